# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Pipeline parallel for the MindSpore Llama family (Llama 3, Qwen3, Qwen3-MoE, DeepSeek-V3): the model split into
stage cells (TorchTitan's split, the same stage boundaries as the torch model:
:func:`hyper_parallel.pipeline.split.module_names_per_stage`), this rank's stages parallelised (TP / FSDP over
the stage's slice of the world mesh) and wrapped as MindSpore ``PipelineStage`` s, and the schedule (GPipe, 1F1B,
Interleaved1F1B, LoopedBFS: the full-backward ones the MindSpore stage runs).

A stage cell (:class:`LlamaStage`) keeps the full model's sub-cells and parameter names
(``model.embed_tokens.weight``, ``model.layers.3.mlp.up_proj.weight``, ``lm_head.weight``), so checkpoints
and optimizer states of a pipelined run have the names of one process. Every stage computes its own RoPE
tables from the sequence length (positions ``0..S-1``)."""
from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence, Tuple

import mindspore as ms
import numpy as np
from mindspore import nn

__all__ = ["LlamaStage", "split_llama", "pipeline_llama3"]


class LlamaStage(nn.Cell):
    """The layers ``layer_ids`` of ``model`` (a MindSpore ``LlamaForCausalLM``), plus the embedding on the first
    stage and the final norm + LM head on the last. ``construct(x)``: token ids (first stage) or hidden
    states ``[batch, seq, hidden]``; returns hidden states, or logits on the last stage. Same attribute
    structure as the model (``stage.model.layers``, ``stage.lm_head``), so the model's ``parallelize_fn``
    applies to a stage as to the whole model."""

    def __init__(self, model: Any, layer_ids: Sequence[int], first: bool, last: bool) -> None:
        super().__init__()
        names = {id(p): p.name for p in model.get_parameters()}
        self.config = model.config
        self.model = nn.Cell()
        self.model.embed_tokens = model.model.embed_tokens if first else None
        self.model.layers = nn.CellList([model.model.layers[i] for i in layer_ids])
        self.model.norm = model.model.norm if last else None
        self.model.rotary = model.model.rotary
        self.lm_head = model.lm_head if last else None
        self.layer_ids = tuple(layer_ids)
        self.first, self.last = first, last
        for param in self.get_parameters():  # assigning cells renames their parameters: keep the model's names
            param.name = names[id(param)]

    def construct(self, x):
        """One stage's forward (see the class docstring)."""
        h = self.model.embed_tokens(x) if self.first else x
        cos, sin = self.model.rotary(ms.Tensor(np.arange(h.shape[1], dtype=np.int32)))
        for layer in self.model.layers:
            h = layer(h, cos, sin)
        if self.last:
            h = self.lm_head(self.model.norm(h))
        return h


def split_llama(model: Any, num_stages: int, mine: Sequence[int],
                layers_per_stage: Optional[Sequence[int]] = None) -> List[LlamaStage]:
    """The stage cells ``mine`` of ``model`` split into ``num_stages`` stages (the first and last one layer
    lighter, as torch; or ``layers_per_stage`` explicitly)."""
    from hyper_parallel.pipeline.split import module_names_per_stage  # pylint: disable=import-outside-toplevel
    names = module_names_per_stage(model.config.num_hidden_layers, num_stages, layer_prefix="model.layers",
                                   first=("model.embed_tokens",), last=("model.norm", "lm_head"),
                                   layers_per_stage=layers_per_stage)
    stages = []
    for s in mine:
        ids = [int(n.rsplit(".", 1)[1]) for n in names[s] if n.startswith("model.layers.")]
        stages.append(LlamaStage(model, ids, first=s == 0, last=s == num_stages - 1))
    return stages


def pipeline_llama3(model, world_mesh, parallel_dims, *, schedule: str = "1F1B", n_microbatches: int,
                    loss_fn: Optional[Callable] = None, layers_per_stage: Optional[Sequence[int]] = None,
                    parallelize: Optional[Callable[[Any], Any]] = None,
                    recompute_ahead: bool = False) -> Tuple[Any, List[LlamaStage]]:
    """The MindSpore registry's ``pipelining_fn``: split ``model`` over ``world_mesh["pp"]`` 's ranks, apply
    ``parallelize(stage_cell)`` (e.g. the model's TP / FSDP plan) to each of this rank's stage cells, build
    their ``PipelineStage`` s and the ``schedule`` (by name). Returns ``(schedule, stage_cells)``; the
    stages' accumulated gradients are ``PipelineStage.grads()`` (``schedule`` 's stages). With tied embeddings
    (Qwen3) the first stage's embedding and the last stage's head are one weight on two ranks: the caller sums
    its gradient over the pp group (``pp = 2``; more is refused). ``recompute_ahead``: each stage recomputes a
    microbatch's forward before blocking on its output gradient (``PipelineStage(recompute_ahead=True)``)."""
    if parallel_dims.pp < 2:
        raise ValueError(f"pipeline_llama3 (MindSpore): parallel_dims.pp={parallel_dims.pp}; pipelining needs pp >= 2")
    if parallel_dims.pp > 2 and getattr(model.config, "tie_word_embeddings", False):
        raise ValueError(f"pipeline_llama3 (MindSpore): parallel_dims.pp={parallel_dims.pp} with tied embeddings: the "
                         "tied weight's gradient is summed over the pp group, which holds only the first and the last "
                         "stage when pp = 2; use pp = 2")
    from hyper_parallel.pipeline.api import PipelineStage, get_schedule_class  # noqa  # pylint: disable=C0415
    from hyper_parallel.pipeline.schedules import generate_schedule  # pylint: disable=import-outside-toplevel
    pp_mesh = world_mesh["pp"]
    group = pp_mesh.get_group()
    cls = get_schedule_class(schedule)
    plan = generate_schedule(cls.schedule_name, parallel_dims.pp, n_microbatches, 2 if cls.multi else 1)
    rank = pp_mesh.get_local_rank()
    mine = [s for s in range(plan.num_stages) if plan.stage_to_rank[s] == rank]
    parts = split_llama(model, plan.num_stages, mine, layers_per_stage)
    if parallelize is not None:
        parts = [parallelize(part) for part in parts]
    stages = [PipelineStage(part, s, plan.num_stages, group=group, recompute_ahead=recompute_ahead)
              for part, s in zip(parts, mine)]
    loss = loss_fn if loss_fn is not None else type(model).loss
    sched = cls(stages if cls.multi else stages[0], n_microbatches, loss_fn=loss)
    return sched, parts
