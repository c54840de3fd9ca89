# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The MindSpore trainer backend: the mccl process group, the ``(dp_shard, tp)`` mesh, the MindSpore model
(``get_model_spec(name, backend="mindspore")``: Llama 3 with its TP + sequence-parallel + FSDP plan; Qwen3,
Qwen3-MoE and DeepSeek-V3 with FSDP / HSDP; MoE layers balanced by the auxiliary loss or the expert bias), the
MindSpore AdamW/Muon and LR schedule of ``hyper_parallel.optim`` (same factories and formulas as torch),
clipping by the global norm of the sharded gradients, gradient accumulation, and checkpoints through
``hyper_parallel.checkpoint`` 's MindSpore save/load. Mirrors ``hyper_parallel.trainer._torch.backend``.

Initial weights: when torch is importable the model starts from the torch model's weights for the same
seed (``torch.manual_seed(job.seed)`` then the torch constructor, as the torch backend builds it), so a
MindSpore run and a torch run of one config start from the same point; else (torch not installed, or hidden)
from the MindSpore model's own init, equal to torch's ``hyper_parallel.models.init_parameters(model, seed)``
and layout-independent. Either way every rank builds the full weights before sharding.
"""
from __future__ import annotations

import os
import resource
import time
import warnings
from typing import Any, Dict, List, Optional, Sequence

import mindspore as ms
import numpy as np

from hyper_parallel.models.llama3._mindspore.model import cross_entropy
from hyper_parallel.trainer._mindspore.launch import check_mindspore_config
from hyper_parallel.trainer.models import build_model_config
from hyper_parallel.models.parallel_dims import ParallelDims

__all__ = ["MindSporeTrainerBackend", "torch_initial_weights"]


def torch_initial_weights(name: str, mcfg: Any, seed: int) -> Any:
    """``{name: ndarray}`` of the torch model's initial weights for ``seed`` (what the torch backend starts
    from), or None when torch is not installed."""
    try:
        import torch  # pylint: disable=import-outside-toplevel
    except ImportError:
        return None
    from hyper_parallel.models import get_model_spec  # pylint: disable=import-outside-toplevel
    torch.manual_seed(seed)
    model = get_model_spec(name).model_cls(mcfg)
    return {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}


def _settle_graph(grads: Sequence[Any]) -> None:
    """Wait for a compiled forward + backward graph by a host copy of its smallest gradient (a norm weight's:
    cheap at any model size) before its loss is read. On MindSpore 2.10 CPU, reading the loss output first made
    the same graph take ~1.6x as long (TP 2, llama3 debug, same rows, same process: 155 vs 85 ms), and so did a
    sliced read of a gradient (a PyNative op on the output): the TP + compile step went from 160 to 101 ms with
    this read (``benchmarks/ms_tp_compile.py``). The data-parallel path waits on the last value backward writes
    for a like reason (see ``_packed_grads``)."""
    min(grads, key=lambda g: g.size).asnumpy()


def _compiled_loss(model: Any, ids: Any, labels: Any, scale: Any) -> Any:
    """The models' ``loss`` on plain logits, scaled (no loss parallel under ``training.compile``; parsed by
    ``mindspore.jit``: no import statement inside)."""
    logits = model(ids)
    return cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1)) * scale


def _flops_per_token(cfg: Any, n_params: int, seq_len: int) -> float:
    """6 N + 12 L H S (the torch backend's estimate)."""
    return 6.0 * n_params + 12.0 * cfg.num_hidden_layers * cfg.hidden_size * seq_len


class MindSporeTrainerBackend:  # pylint: disable=too-many-instance-attributes
    """See :class:`hyper_parallel.trainer.api.TrainerBackend`; ``[job] backend = "mindspore"``."""

    name = "mindspore"

    def __init__(self, trainer: Any) -> None:
        check_mindspore_config(trainer.config)
        if trainer.distributed and "MS_ROLE" not in os.environ:  # no MindSpore cluster around this process
            if trainer.config.job.nproc != 1:
                raise ValueError(f"job.nproc = {trainer.config.job.nproc}: a MindSpore run on several ranks starts "
                                 "under hp-train (which launches the cluster) or msrun")
            trainer.distributed = False  # job.nproc = 1: this process alone, no process group
        self.trainer = trainer
        self.config = trainer.config
        self.rank = 0
        self.world_size = 1
        self.dims: Any = None
        self.mesh: Any = None
        self.model: Any = None
        self.optimizer: Any = None
        self.scheduler: Any = None
        self.dp_rank = 0
        self.dp_size = 1
        self.flops_per_token = 0.0
        self.peak_flops = 0.0
        from hyper_parallel.trainer.config import intra_op_threads  # pylint: disable=import-outside-toplevel
        ranks_here = 1 if "MS_ROLE" not in os.environ else int(os.environ.get("MS_WORKER_NUM", "1"))
        self.threads = intra_op_threads(self.config.job.threads, os.environ, os.cpu_count(), ranks_here)
        self._plat: Any = None
        self._world_group: Any = None
        self._specs: Dict[str, Any] = {}
        self._grad_fn: Any = None
        self._compiled_fsdp: Any = None  # training.compile under FSDP: a CompiledFSDPStep
        self._model_cls: Any = None
        self._schedule: Any = None  # pipeline parallel: the schedule over this rank's stages
        self._pp_scale = 1.0
        self._pp_first = self._pp_last = False  # this rank holds the first / last pipeline stage
        self._pp_tied = False  # pipeline parallel of a model with tied embeddings
        self._cp: Any = None  # context parallel: (cp mesh, SeqLayout cache key -> positions)
        self._loss_reduced = False  # this step's loss came back averaged with the gradients (replicate)
        self._packed = False  # replicate + compile: the graph returns the flat buckets (pack_gradients)

    # ------------------------------------------------------------------ process group / meshes
    def init_distributed(self) -> None:
        """Join the mccl process group started by the launcher; the world mesh of the config's degrees."""
        par = self.config.parallelism
        from hyper_parallel.platform.mindspore.runtime import configure  # pylint: disable=import-outside-toplevel
        configure(threads=self.threads)  # synchronous launch, one dispatch thread, self.threads kernel threads
        ms.set_context(mode=ms.PYNATIVE_MODE)
        try:
            ms.set_device("CPU")
        except RuntimeError:  # already set in this process (a second trainer): MindSpore refuses any change
            pass
        if self.trainer.distributed:
            import hyper_parallel as hp  # pylint: disable=import-outside-toplevel
            from hyper_parallel.platform import get_platform  # pylint: disable=import-outside-toplevel
            self._plat = get_platform("mindspore")
            if not self._plat.is_initialized():
                hp.init_process_group(platform="mindspore")
            self.rank, self.world_size = self._plat.get_rank(), self._plat.get_world_size()
            self._world_group = self._plat.new_group(range(self.world_size))
        self.dims = ParallelDims(dp_replicate=par.dp_replicate, dp_shard=par.dp_shard, cp=par.cp, tp=par.tp,
                                 pp=par.pp, ep=par.ep, world_size=self.world_size)
        if self.trainer.distributed:
            self.mesh = self.dims.build_mesh("cpu", platform="mindspore")
            self.dp_rank, self.dp_size = self.dims.dp_rank(self.rank), self.dims.dp
            if self.dims.cp > 1:
                from hyper_parallel.cp._mindspore.attention import CPAttention  # noqa  # pylint: disable=C0415
                self._cp = CPAttention(self.dims.mesh("cp"), par.cp_method, par.cp_load_balance)
        self._check_pp_batch()

    def _check_pp_batch(self) -> None:
        """The batch split on this run's world, pipeline microbatches included: the rule ``hp-train --check``
        applies on ``job.nproc`` (:func:`~hyper_parallel.trainer.config.check_global_batch`)."""
        # pylint: disable=import-outside-toplevel
        from hyper_parallel.models.parallel_dims import degrees_of
        from hyper_parallel.trainer.config import check_global_batch
        check_global_batch(self.config, degrees_of(self.dims))

    def barrier(self) -> None:
        """All ranks meet."""
        if self.trainer.distributed:
            self._plat.barrier()

    # ------------------------------------------------------------------ model / optimizer
    def _build_model(self, vocab_size: int) -> Any:
        from hyper_parallel.models import get_model_spec  # pylint: disable=import-outside-toplevel
        cfg = self.config
        name = "llama3" if cfg.model.name == "llama" else cfg.model.name
        mcfg = build_model_config(name, cfg.model.flavor, "mindspore", vocab_size=vocab_size,
                                  max_position_embeddings=max(cfg.training.seq_len, 128))
        spec = get_model_spec(name, backend="mindspore")
        model = spec.model_cls(mcfg, seed=cfg.job.seed)
        self._model_cls = spec.model_cls
        weights = torch_initial_weights(name, mcfg, cfg.job.seed)
        if weights is not None:
            model.load_numpy(weights)
        n_params = sum(int(np.prod(p.shape)) for p in model.get_parameters())
        self.flops_per_token = _flops_per_token(mcfg, n_params, cfg.training.seq_len)
        return model, spec

    def setup(self, dataset: Any) -> None:
        """Model sized to the tokenizer; the ``[activation]`` policy on its layers; parallelised (TP + SP, FSDP, or
        the pipeline stages); optimizer and schedule."""
        cfg = self.config
        model, spec = self._build_model(dataset.vocab_size)
        if cfg.activation:  # on the whole model's layer cells, before TP / FSDP / the stage split take them
            from hyper_parallel.activation import apply_activation_policy  # pylint: disable=C0415
            apply_activation_policy(model, cfg.activation)
        if self.trainer.distributed and self.dims.pp > 1:
            model = self._pipeline(model, spec)
        elif self.trainer.distributed:
            model = spec.parallelize_fn(model, self.mesh, self.dims, **self._plan_kwargs())
        self.model = model
        self._setup_moe()
        from hyper_parallel.optim._mindspore.factory import (get_hyper_lr_scheduler,  # noqa  # pylint: disable=C0415
                                                             get_hyper_optimizer)
        from hyper_parallel.optim._mindspore.optimizers import parameter_specs  # pylint: disable=C0415
        ocfg = dict(cfg.optimizer)
        ocfg.setdefault("total_steps", cfg.training.steps)
        self.optimizer = get_hyper_optimizer(model, ocfg)
        if cfg.training.compile:  # the fused AdamW kernels of every parameter in one graph as well
            from hyper_parallel.optim._mindspore.optimizers import AdamW  # pylint: disable=C0415
            for opt in self.optimizer.optimizers:
                if isinstance(opt, AdamW) and opt.fused:
                    opt.compile()
        self.scheduler = get_hyper_lr_scheduler(self.optimizer, ocfg)
        self._specs = parameter_specs(model)
        if self._schedule is None:
            self._grad_fn = self._make_grad_fn(list(self.optimizer.parameters))

    def _make_grad_fn(self, params: List[Any]) -> Any:
        """``value_and_grad`` of the scaled loss; with ``training.compile`` (the config check allows it on unsharded
        layers: one rank or ``dp_replicate``, no PP / CP; under TP this rank's shards, see
        ``hyper_parallel.tp._mindspore.compiled``) the whole forward and backward under one ``mindspore.jit``
        graph, as plain MindSpore's fastest mode compiles its step (the optimizer's fused kernels run after it)."""
        if not self.config.training.compile:
            return ms.value_and_grad(self._scaled_loss, None, params)
        model = self.model
        if self.trainer.distributed and self.dims.tp > 1:  # TP: one graph over this rank's shards (a local twin)
            from hyper_parallel.tp._mindspore.compiled import compiled_tp_grad_fn  # pylint: disable=C0415
            return compiled_tp_grad_fn(model, self.dims.mesh("tp"), params, **self._plan_kwargs())
        if self.trainer.distributed and self.dims.dp_shard > 1:  # FSDP: the graph computes on an unsharded twin
            from hyper_parallel.fsdp._mindspore.compiled import CompiledFSDPStep  # pylint: disable=C0415
            twin = self._model_cls(model.config, seed=self.config.job.seed)
            self._compiled_fsdp = CompiledFSDPStep(model, twin, _compiled_loss)
            return self._compiled_fsdp.value_and_grad
        if getattr(model, "remove_gradient_hooks", None) is not None:  # replicate: reduce after the graph
            model.remove_gradient_hooks()

        def compiled_loss(ids, labels, scale):  # a def: mindspore.jit parses a lambda only on its own line
            return _compiled_loss(model, ids, labels, scale)

        grad_fn = ms.value_and_grad(compiled_loss, None, params)
        if not (self._pure_replicate() and model.packs_extra()):
            return ms.jit(grad_fn)
        from hyper_parallel.fsdp._mindspore.replicate import pack_gradients  # noqa  # pylint: disable=C0415
        layout, size = model.gradient_layout(params), self.world_size

        def packed(ids, labels, scale):  # replicate: the gradients leave the graph in its flat buckets / world,
            loss, grads = grad_fn(ids, labels, scale)  # the loss at the end of the last
            return loss, pack_gradients(grads, layout, size, loss)

        self._packed = True
        return ms.jit(packed)

    def _plan_kwargs(self) -> Dict[str, Any]:
        par = self.config.parallelism
        return {"sequence_parallel": par.sequence_parallel, "loss_parallel": par.loss_parallel and par.tp > 1}

    def _pipeline(self, model: Any, spec: Any) -> Any:
        """Pipeline parallel: this rank's stage cells (each parallelised by the model's plan over its stage's
        ranks) under the configured schedule; a ``CellList`` of them is the model (parameter names unchanged)."""
        from mindspore import nn  # pylint: disable=import-outside-toplevel
        par = self.config.parallelism
        if par.pp_layers_per_stage:  # checked against this model's layer count, naming the key
            from hyper_parallel.pipeline.split import check_layers_per_stage  # noqa  # pylint: disable=C0415
            from hyper_parallel.trainer.config import pipeline_stages  # pylint: disable=import-outside-toplevel
            check_layers_per_stage(par.pp_layers_per_stage, model.config.num_hidden_layers,
                                   pipeline_stages(par, self.dims.pp), what="parallelism.pp_layers_per_stage")
        loss_fn = type(model).loss
        kwargs = self._plan_kwargs()
        self._schedule, parts = spec.pipelining_fn(
            model, self.mesh, self.dims, schedule=par.pp_schedule, n_microbatches=par.pp_microbatches,
            layers_per_stage=list(par.pp_layers_per_stage) or None, recompute_ahead=par.pp_recompute_ahead,
            loss_fn=lambda out, tgt: loss_fn(out, tgt) * self._pp_scale,
            parallelize=lambda part: spec.parallelize_fn(part, self.mesh, self.dims, **kwargs))
        self._pp_first = any(p.first for p in parts)
        self._pp_tied = bool(getattr(model.config, "tie_word_embeddings", False))
        self._pp_last = any(p.last for p in parts)
        names = [(p, p.name) for part in parts for p in part.get_parameters()]
        holder = nn.CellList(parts)
        for param, name in names:  # a CellList prefixes its items' parameter names: keep the model's names
            param.name = name
        return holder

    def _moe_cells(self) -> List[Any]:
        from hyper_parallel.moe._mindspore.moe import MoE  # pylint: disable=import-outside-toplevel
        return [c for _, c in self.model.cells_and_names() if isinstance(c, MoE)]

    def _token_group(self) -> Any:
        """The ranks whose tokens one MoE layer sees together: every rank (data, CP and TP ranks hold distinct
        tokens), under PP the ranks of this stage (the data-parallel group; None when alone: PP x CP / TP is
        refused on MindSpore)."""
        if not self.trainer.distributed or self.world_size == 1:
            return None
        if self.dims.pp == 1:
            return self._world_group
        dp = self.dims.mesh("dp")
        return None if dp is None else dp.get_group(0)

    def _setup_moe(self) -> None:
        """Auxiliary losses over the global batch (every rank's tokens) with the accumulation scale."""
        from hyper_parallel.moe._mindspore.moe import AuxLossScaler  # pylint: disable=import-outside-toplevel
        AuxLossScaler.scale = 1.0 / self.config.training.grad_accum
        group = self._token_group()
        if group is not None:
            for cell in self._moe_cells():
                cell.set_token_groups(group, self.dp_size * self.dims.cp)  # CP ranks' gradients are averaged too

    def _balance_experts(self) -> None:
        """Expert-bias balancing after the optimizer step (counts summed over the ranks), as the torch backend."""
        from hyper_parallel.moe._mindspore.moe import update_expert_bias  # pylint: disable=import-outside-toplevel
        group = self._token_group()
        for cell in self._moe_cells():
            if cell.config.uses_expert_bias:
                update_expert_bias(cell, group)

    def checkpoint_states(self) -> Dict[str, Any]:
        """Model, optimizer and LR schedule as ``Stateful`` s (no RNG: the MindSpore model draws none)."""
        from hyper_parallel.checkpoint import ModelState, OptimizerState  # pylint: disable=import-outside-toplevel
        return {"model": ModelState(self.model), "optim": OptimizerState(self.model, self.optimizer),
                "lr_scheduler": self.scheduler}

    # ------------------------------------------------------------------ steps
    def _tensors(self, rows: List[List[int]]):
        """Input ids and labels (shifted by one); under CP this rank's load-balanced sequence shards of both."""
        batch = np.asarray(rows, dtype=np.int32)
        ids, labels = batch[:, :-1], batch[:, 1:]
        if self._cp is not None:
            pos = np.asarray(self._cp.layout(ids.shape[1], "training.seq_len").positions(self._cp.index))
            ids, labels = ids[:, pos], labels[:, pos]
        return ms.Tensor(ids), ms.Tensor(labels)

    def _positions(self, seq_local: int):
        """RoPE positions of this rank's tokens (under CP: where they sit in the whole sequence), else None."""
        if self._cp is None:
            return None
        layout = self._cp.layout(seq_local * self._cp.size, "training.seq_len")
        return ms.Tensor(np.asarray(layout.positions(self._cp.index), dtype=np.int32))

    def _loss(self, ids, labels):
        if self._cp is None:
            return type(self.model).loss(self.model(ids), labels)
        from hyper_parallel.cp._mindspore.attention import STACK  # pylint: disable=import-outside-toplevel
        STACK.append(self._cp)  # the model's attention runs the CP attention (context_parallel's hook)
        try:
            return type(self.model).loss(self.model(ids, self._positions(ids.shape[1])), labels)
        finally:
            STACK.pop()

    def _scaled_loss(self, ids, labels, scale):
        return self._loss(ids, labels) * scale

    def _mean_over_ranks(self, value: float) -> float:
        """The loss averaged over the data-parallel ranks (TP and CP ranks hold the same or equal-weight values:
        averaging over the world is the same; under PP only the last stage's ranks hold it, the others give 0)."""
        d = self.dims
        if not self.trainer.distributed or d.dp_replicate * d.dp_shard * d.cp * d.pp == 1:
            return value  # one rank, or TP alone: every rank holds the same loss
        from hyper_parallel.platform.mindspore.collectives import raw_all_reduce  # noqa  # pylint: disable=C0415
        total = raw_all_reduce(ms.Tensor([value], ms.float32), "sum", self._world_group)
        return float(total.asnumpy()[0]) / (self.world_size // self.dims.pp)

    def _pp_pass(self, rows: List[List[int]], train: bool) -> float:
        """One schedule pass (``step`` or the forward-only ``eval``) over ``rows``: the mean microbatch loss on
        the last stage's ranks, 0 on the others."""
        ids, labels = self._tensors(rows)
        losses: List[Any] = []
        run = self._schedule.step if train else self._schedule.eval
        run(ids if self._pp_first else None, target=labels if self._pp_last else None, losses=losses,
            return_outputs=False)
        return sum(float(x.asnumpy()) for x in losses) / len(losses) if losses else 0.0

    def _pp_grads(self, rows: List[List[int]]):
        """Pipeline step: ``grad_accum`` schedule passes (losses scaled by ``1/grad_accum``); the stages'
        accumulated gradients aligned with the optimizer's parameters, and the summed loss (0 off the last
        stage)."""
        accum = self.config.training.grad_accum
        micro = len(rows) // accum
        stages = self._schedule._stages  # pylint: disable=protected-access
        for stage in stages:
            stage.zero_grad()
        total = 0.0
        self._pp_scale = 1.0 / accum
        try:
            for i in range(accum):
                total += self._pp_pass(rows[i * micro:(i + 1) * micro], train=True)
        finally:
            self._pp_scale = 1.0
        by_name: Dict[str, Any] = {}
        for stage in stages:  # a weight held by two of this rank's stages (tied embeddings) sums its gradients
            for p, g in zip(stage.weights, stage.grads()):
                if g is not None:
                    by_name[p.name] = by_name[p.name] + g if p.name in by_name else g
        self._tie_pp_grads(by_name)
        params = list(self.optimizer.parameters)
        return [by_name[p.name] if by_name.get(p.name) is not None else ms.ops.zeros_like(p) for p in params], total

    def _tied_name(self) -> Optional[str]:
        """The tied embedding's parameter name under PP (the first stage's embedding is the last stage's head)."""
        return "model.embed_tokens.weight" if self._pp_tied else None

    def _tie_pp_grads(self, by_name: Dict[str, Any]) -> None:
        """Tied embeddings under PP (``pp = 2``: one rank holds the first stage, the other the last): the weight's
        gradient summed over the pp group, so both copies take the same step."""
        name = self._tied_name()
        if name is None:
            return
        if name not in by_name:
            raise RuntimeError(f"pipeline parallel with tied embeddings: this rank holds no stage using {name}")
        from hyper_parallel.platform.mindspore.collectives import raw_all_reduce  # noqa  # pylint: disable=C0415
        by_name[name] = raw_all_reduce(by_name[name], "sum", self.dims.mesh("pp").get_group(0))

    def _grads(self, rows: List[List[int]]):
        """(gradients aligned with the optimizer's parameters, summed micro-batch loss)."""
        t = self.config.training
        if self._schedule is not None:
            return self._pp_grads(rows)
        micro = len(rows) // t.grad_accum
        scale = ms.Tensor(1.0 / t.grad_accum, ms.float32)
        params = list(self.optimizer.parameters)
        if self._packed:
            return self._packed_grads(rows, micro, scale, params)
        # replicate: the model reduces; uncompiled, its backward hooks also accumulate the micro-batches
        ddp = getattr(self.model, "reduce_gradients", None)
        if self._compiled_fsdp is not None:  # the parameters once per step into the compiled graph's twin
            self._compiled_fsdp.gather()
        grads, losses = self._micro_batches(rows, micro, scale, ddp is not None and not t.compile)
        if self._pure_replicate():  # the loss rides in the gradients' all-reduce
            grads, mean = self.model.reduce_gradients(params, grads, extra=sum(losses[1:], losses[0]))
            self._loss_reduced = True
            return grads, float(mean.asnumpy()[0])  # the one host copy of the step (the graph's result)
        if self._compiled_fsdp is not None:  # one reduce-scatter per unit of the summed full gradients
            return self._compiled_fsdp_grads(grads, params, losses)
        if t.compile and grads:  # a gradient before the loss: see _settle_graph
            _settle_graph(grads)
        total = sum(float(x.asnumpy()) for x in losses)  # the host copies after the micro-batches, not between
        if ddp is not None:
            grads = ddp(params, grads)
        return grads, total

    def _micro_batches(self, rows: List[List[int]], micro: int, scale: Any, hooked: bool):
        """(gradients summed over the ``grad_accum`` micro-batches -- ``hooked``: replicate's backward hooks sum
        them, the last micro-batch's are kept --, the micro-batches' losses)."""
        grads, losses = None, []
        accum = self.config.training.grad_accum
        for i in range(accum):
            if hooked:
                self.model.set_requires_gradient_sync(i == accum - 1)
            loss, g = self._grad_fn(*self._tensors(rows[i * micro:(i + 1) * micro]), scale)
            losses.append(loss)
            grads = list(g) if grads is None or hooked else [a + b for a, b in zip(grads, g)]
        return grads, losses

    def _compiled_fsdp_grads(self, table, params, losses):
        """FSDP + compile: the shard gradients of the summed gradient table (one reduce-scatter), and the step's
        loss -- fused, the mean over the ranks that rode in the reduce-scatter (the one host copy)."""
        shards = self._compiled_fsdp.reduce(table)
        mean = self._compiled_fsdp.mean_loss()
        if mean is None:
            return [shards[p.name] for p in params], sum(float(x.asnumpy()) for x in losses)
        self._loss_reduced = True
        return [shards[p.name] for p in params], float(mean.asnumpy()[0])

    def _packed_grads(self, rows: List[List[int]], micro: int, scale: Any, params: List[Any]):
        """Replicate + compile: the graph's flat buckets (gradients and loss / world) summed over the micro-batches,
        one all-reduce per bucket, split per parameter; the mean loss is the last bucket's tail."""
        flats = None
        for i in range(self.config.training.grad_accum):
            _, f = self._grad_fn(*self._tensors(rows[i * micro:(i + 1) * micro]), scale)
            flats = list(f) if flats is None else [a + b for a, b in zip(flats, f)]
        # the graph done before the all-reduce starts (mccl's wait would share the CPU with its kernels): a host
        # read of the last value backward writes (the loss, at the end of the last flat buffer; the loss output
        # itself is ready after the forward); ms.runtime.synchronize() cost ~90 ms a step more (docs/mindspore.md)
        flats[-1][-1:].asnumpy()
        grads, mean = self.model.reduce_packed(params, flats, extra=True)
        self._loss_reduced = True
        return grads, float(mean.asnumpy()[0])  # the one host copy of the step's loss

    def _pure_replicate(self) -> bool:
        """The model is ``replicate``-d over the whole world (data parallel the only degree, no pipeline): every
        rank holds every parameter and, after the all-reduce, the same gradients and the same mean loss."""
        return (self._schedule is None and self.trainer.distributed and self.dims.dp_replicate == self.world_size
                and getattr(self.model, "reduced_grad_sq_norm", None) is not None)

    def _clip_reduced(self, params, grads, max_norm: float):
        """Replicate and compiled FSDP hold every reduced gradient: clipped by the norm they computed from them (no
        collective of its own); None for the other layouts."""
        reduced = self.model if self._pure_replicate() else self._compiled_fsdp
        norm_sq = None if reduced is None else reduced.reduced_grad_sq_norm()
        if norm_sq is None:
            return None
        norm = float(norm_sq.asnumpy()) ** 0.5  # the same on every rank
        coef = min(1.0, float(max_norm) / (norm + 1e-6))
        if coef >= 1.0:
            return tuple(grads), norm
        if reduced is self.model:  # scaled in the flat buckets, then split
            return tuple(self.model.scale_reduced_gradients(params, coef)), norm
        return tuple(g * coef for g in grads), norm

    def _clip(self, params, grads, max_norm: float):
        """Clip by the global norm of the full gradients (under PP every stage's parameters count once)."""
        from hyper_parallel.optim._mindspore.clip import clip_grad_norm, total_grad_norm  # noqa  # pylint: disable=C0415
        group = self._world_group if self.trainer.distributed else None
        clipped = self._clip_reduced(params, grads, max_norm)
        if clipped is not None:
            return clipped
        if self._schedule is None:
            return clip_grad_norm(params, grads, max_norm, self._specs, group, self.world_size)
        # each stage's parameters live on world/pp ranks: weight this rank's squares by pp/world, sum the world
        from hyper_parallel.platform.mindspore.collectives import raw_all_reduce  # noqa  # pylint: disable=C0415
        tied = self._tied_name() if self._pp_last and not self._pp_first else None  # counted on the first stage
        kept = [(p, g) for p, g in zip(params, grads) if p.name != tied]
        local = total_grad_norm([p for p, _ in kept], [g for _, g in kept], self._specs, None, 1) ** 2 \
            * self.dims.pp / self.world_size
        total = raw_all_reduce(ms.Tensor([local], ms.float32), "sum", group)
        norm = float(total.asnumpy()[0]) ** 0.5
        coef = min(1.0, float(max_norm) / (norm + 1e-6))
        return (tuple(grads) if coef >= 1.0 else tuple(g * coef for g in grads)), norm

    def train_step(self, rows: List[List[int]]) -> Dict[str, Any]:
        """Forward/backward over ``grad_accum`` micro-batches (gradients summed; under PP ``grad_accum``
        schedule passes), clip, optimizer and LR steps."""
        t = self.config.training
        start = time.perf_counter()
        grads, total = self._grads(rows)
        params = list(self.optimizer.parameters)
        grad_norm = 0.0
        if t.clip_grad_norm > 0:
            grads, grad_norm = self._clip(params, grads, t.clip_grad_norm)
        lr = self.scheduler.get_last_lr()[0]
        self.optimizer.step(tuple(grads))
        self._balance_experts()
        self.scheduler.step()
        compute = time.perf_counter() - start
        loss = total if self._loss_reduced else self._mean_over_ranks(total)
        self._loss_reduced = False
        return {"loss": loss, "grad_norm": grad_norm, "lr": lr, "compute_s": compute}

    def eval_loss(self, rows: List[List[int]]) -> float:
        """Held-out loss of this batch (mean over the ranks); no gradient."""
        if self._schedule is not None:
            # the forward-only schedule over passes of the training pass size: a MindSpore stage infers its
            # message shapes at its first step and keeps them (another microbatch size would desynchronise the
            # ranks' transfers)
            accum = self.config.training.grad_accum
            micro = len(rows) // accum
            value = sum(self._pp_pass(rows[i * micro:(i + 1) * micro], train=False) for i in range(accum)) / accum
            return self._mean_over_ranks(value)
        return self._mean_over_ranks(float(self._loss(*self._tensors(rows)).asnumpy()))

    # ------------------------------------------------------------------ monitors
    def peak_memory_mib(self) -> float:
        """Peak resident set of this process (MindSpore's CPU backend keeps tensors in host memory)."""
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    def moe_stats(self) -> Dict[str, Any]:
        """The MindSpore Llama has no MoE layers."""
        return {}

    def start_profiler(self) -> Any:
        """Start Python's ``cProfile`` (``metrics.profile_steps``; see ``trainer/_mindspore/profile.py``)."""
        from hyper_parallel.trainer._mindspore import profile  # pylint: disable=import-outside-toplevel
        return profile.start()

    def stop_profiler(self, prof: Any, path: str) -> None:
        """Stop ``prof``; write the time breakdown by layer to ``path`` (JSON) and the raw ``.pstats``."""
        from hyper_parallel.trainer._mindspore import profile  # pylint: disable=import-outside-toplevel
        profile.stop(prof, path)

    def shutdown(self, failed: bool = False) -> None:
        """Leave the process group at a barrier (the launcher ends the cluster); ``failed`` (leaving on an
        exception): no barrier.

        Training, metrics and checkpoints are complete when this runs. mccl's CPU barrier is an all-reduce with a
        fixed 60 s wait, which a rank still writing its plot can outlast; such a failure is reported as a warning
        instead of turning a finished run into a failed one."""
        if not failed and self.trainer.distributed and self._plat is not None and self._plat.is_initialized():
            try:
                self._plat.barrier()
            except RuntimeError as exc:
                warnings.warn(f"MindSpore trainer: the closing barrier failed after the run finished ({exc}); "
                              "results and checkpoints are complete", RuntimeWarning, stacklevel=2)
