# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Pipeline parallel for Qwen3-VL: the vision tower on stage 0 ("stage0", the naive placement) or on its own
position ahead of the language model ("mpipe", :class:`~hyper_parallel.pipeline.ScheduleMpipe`).

The pipeline batch (:func:`pack_vl_batch`) has a batch dim on every tensor, so the ordinary microbatch split
applies: ``input_ids`` / ``attention_mask`` ``[B, S]``, the MRoPE ``position_ids`` ``[B, 3, S]`` (computed once
from the whole batch), each sample's image patches padded to ``[B, P, C*T*P*P]`` and its image grids padded
to ``[B, N, 3]`` (all-zero rows: no image). The encoder stage takes back each sample's real patches, runs the
vision tower once per microbatch on exactly those (its cost follows the images, not the padding), and
scatters the merged features into the token embeddings.

DeepStack features cross stage boundaries in dense form: level ``i`` (added after decoder layer ``i``) is a
``[b, S, hidden]`` tensor that is zero away from the image tokens, so ``h + dense`` equals the model's
``h[visual] += features`` exactly, every boundary carries fixed shapes, and a stage passes on the levels that
later stages consume (their gradients come back the same way). Video inputs are not packed here (images
and text only).
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import torch
from torch import nn

from hyper_parallel.models.llama3.model import causal_mask
from hyper_parallel.models.qwen3_vl.model import rope_index
from hyper_parallel.models.qwen3_vl.stages import stage_layers

__all__ = ["pack_vl_batch", "image_token_costs", "Qwen3VLStageModule", "stage_layers", "pipeline_qwen3_vl",
           "blank_vision_term"]

def _image_owners(tokens: Sequence[int], grids: torch.Tensor, per_token: int) -> List[List[int]]:
    """The image indices of every sample: the next grids whose merged sizes fill its placeholder count."""
    owners: List[List[int]] = []
    cursor = 0
    for s, n in enumerate(tokens):
        got = []
        while n > 0:
            if cursor >= len(grids):
                raise ValueError(f"pack_vl_batch: sample {s} has image placeholder tokens beyond image_grid_thw "
                                 f"({len(grids)} images)")
            n -= int(grids[cursor].prod()) // per_token
            got.append(cursor)
            cursor += 1
        if n != 0:
            raise ValueError(f"pack_vl_batch: sample {s}'s image placeholders do not match whole images of "
                             f"image_grid_thw {grids.tolist()}")
        owners.append(got)
    if cursor != len(grids):
        raise ValueError(f"pack_vl_batch: image_grid_thw has {len(grids)} images but input_ids holds placeholders "
                         f"for {cursor}")
    return owners


def pack_vl_batch(config, input_ids: torch.Tensor, attention_mask: Optional[torch.Tensor] = None,
                  pixel_values: Optional[torch.Tensor] = None,
                  image_grid_thw: Optional[torch.Tensor] = None) -> Dict[str, torch.Tensor]:
    """The processor's batch (images in sample order) as per-sample tensors with a batch dim (module
    docstring): ``input_ids``, ``attention_mask``, ``position_ids`` ``[B, 3, S]``, ``pixel_values`` ``[B, P,
    D]`` and ``image_grid_thw`` ``[B, N, 3]`` (zero-padded; ``P, N >= 1``)."""
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    if (pixel_values is None) != (image_grid_thw is None):
        raise ValueError("pack_vl_batch: pass pixel_values and image_grid_thw together (both or neither)")
    b = input_ids.shape[0]
    grids = image_grid_thw if image_grid_thw is not None else torch.zeros(0, 3, dtype=torch.long)
    owners = _image_owners((input_ids == config.image_token_id).sum(-1).tolist(), grids,
                           config.vision.spatial_merge_size ** 2)
    patches = grids.prod(-1).tolist()
    starts = [sum(patches[:i]) for i in range(len(patches) + 1)]
    width = pixel_values.shape[-1] if pixel_values is not None else 1
    max_p = max([1] + [sum(patches[i] for i in got) for got in owners])
    max_n = max([1] + [len(got) for got in owners])
    pix = torch.zeros(b, max_p, width, dtype=pixel_values.dtype if pixel_values is not None else torch.float32)
    grid = torch.zeros(b, max_n, 3, dtype=torch.long)
    for s, got in enumerate(owners):
        rows = [pixel_values[starts[i]:starts[i + 1]] for i in got]
        if rows:
            cat = torch.cat(rows)
            pix[s, :cat.shape[0]] = cat
            grid[s, :len(got)] = grids[got]
    pos = rope_index(input_ids, config, image_grid_thw, None, attention_mask)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": pos.transpose(0, 1).contiguous(),
            "pixel_values": pix, "image_grid_thw": grid}


def image_token_costs(packed: Dict[str, torch.Tensor]) -> List[float]:
    """Per-sample encoder cost of a packed batch: its image patches (the vision tower's sequence length),
    plus 1 so text-only samples still count; ``ScheduleMpipe.step(sample_costs=...)`` balances on it."""
    return [1.0 + float(g.prod(-1).sum()) for g in packed["image_grid_thw"]]


class Qwen3VLStageModule(nn.Module):
    """One pipeline stage of a :class:`~hyper_parallel.models.qwen3_vl.model.Qwen3VLForConditionalGeneration`:
    optionally the encoder part (vision tower + embedding + scatter), the decoder layers ``layers`` (original
    indices, parameter names unchanged: ``model.language_model.layers.<i>``), optionally the head (norm +
    ``lm_head``). ``forward(*inputs, position_ids, attention_mask)``: the encoder stage takes
    ``(input_ids, pixel_values, image_grid_thw)`` of :func:`pack_vl_batch`, the others the previous stage's
    ``(hidden, *deepstack levels still to add)``; returns the same for the next stage, or the logits."""

    def __init__(self, model, layers: Sequence[int], *, encoder: bool, head: bool) -> None:
        super().__init__()
        self.config = model.config
        self.layer_ids = list(layers)
        self.encoder, self.head = encoder, head
        self.levels = len(model.config.vision.deepstack_visual_indexes)
        self.first_level = 0 if encoder else (self.layer_ids[0] if self.layer_ids else None)
        self.dp_mesh = None
        inner, text = nn.Module(), nn.Module()
        inner.language_model = text
        text.rotary = model.model.language_model.rotary
        text.layers = nn.ModuleDict({str(i): model.model.language_model.layers[i] for i in self.layer_ids})
        if encoder:
            inner.visual = model.model.visual
            text.embed_tokens = model.model.language_model.embed_tokens
        if head:
            text.norm = model.model.language_model.norm
            self.lm_head = model.lm_head
        self.model = inner

    def data_parallel(self, mesh) -> None:
        """Run this encoder stage data parallel over the 1-D ``mesh`` (its ranks all hold it): each rank encodes a
        contiguous equal share of every microbatch's samples and returns ``Shard(0)`` DTensors on ``mesh``."""
        if not self.encoder or self.layer_ids:
            raise ValueError("Qwen3VLStageModule.data_parallel: only an encoder stage without decoder layers (Mpipe's) "
                             "runs data parallel")
        self.dp_mesh = mesh

    def _shard(self, inputs):
        """This rank's share of the microbatch ``inputs`` (``data_parallel``)."""
        size, rank = self.dp_mesh.size(), self.dp_mesh.get_local_rank(0)
        b = inputs[0].shape[0]
        if b % size:
            raise ValueError(f"Qwen3VLStageModule: a microbatch of {b} samples does not split evenly over the "
                             f"encoder stage's {size} ranks; make the microbatch size a multiple of {size}")
        return [x[rank * (b // size):(rank + 1) * (b // size)] for x in inputs], b

    def _wrap(self, outputs, batch: int):
        from hyper_parallel.core.placement import Shard  # pylint: disable=import-outside-toplevel
        from hyper_parallel.platform.torch.dtensor import DTensor  # pylint: disable=import-outside-toplevel
        return tuple(DTensor.from_local(t, self.dp_mesh, [Shard(0)], shape=(batch, *t.shape[1:])) for t in outputs)

    def carried_in(self, first_layer: int) -> None:
        """Set the first decoder layer this stage's input has passed (a stage without layers carries on
        whatever its predecessor sent)."""
        self.first_level = first_layer

    def _embed(self, input_ids, pixel_values, image_grid_thw):
        text = self.model.language_model
        embeds = text.embed_tokens(input_ids)
        grids, pix = [], []
        for s in range(input_ids.shape[0]):
            real = image_grid_thw[s][image_grid_thw[s].prod(-1) > 0]
            grids.append(real)
            pix.append(pixel_values[s, :int(real.prod(-1).sum())])
        grid = torch.cat(grids)
        zeros = torch.zeros_like(embeds)
        if grid.shape[0] == 0:  # no image: the tower runs on a blank one, its output added times 0 (see below)
            return embeds + blank_vision_term(self.model.visual, embeds.dtype), [zeros] * self.levels
        merged, deepstack = self.model.visual(torch.cat(pix), grid)
        mask = (input_ids == self.config.image_token_id)[..., None]
        embeds = embeds.masked_scatter(mask, merged.to(embeds.dtype))
        return embeds, [zeros.masked_scatter(mask, d.to(embeds.dtype)) for d in deepstack]

    def decode(self, h, levels, first: int, position_ids, attention_mask):
        """The decoder layers this stage holds over ``h`` (``position_ids [b, 3, S]``, ``attention_mask`` a padding
        mask ``[b, S]`` or a boolean document mask ``[b, 1, S, S]``), adding DeepStack level ``i`` (``levels[i -
        first]``) after layer ``i``; a subclass with another language model overrides it."""
        cos, sin = self.model.language_model.rotary(position_ids.transpose(0, 1))
        cos, sin = cos.to(h.dtype), sin.to(h.dtype)
        mask = attention_mask
        if mask is not None and mask.dim() == 2:  # a padding mask; a 4-D boolean one (packed documents) as is
            mask = causal_mask(mask)
        for i in self.layer_ids:
            layer = self.model.language_model.layers[str(i)]
            h = layer(h, cos, sin) if mask is None else layer(h, cos, sin, mask)
            if i < self.levels:
                h = h + levels[i - first]
        return h

    def forward(self, *inputs, position_ids=None, attention_mask=None):
        """See the class docstring."""
        if self.dp_mesh is not None:
            mine, batch = self._shard(inputs)
            h, levels = self._embed(*mine)
            return self._wrap((h, *levels), batch)
        if self.encoder:
            h, levels = self._embed(*inputs)
            first = 0
        else:
            h, levels, first = inputs[0], list(inputs[1:]), self.first_level
        if self.layer_ids:
            if position_ids is None:
                raise ValueError(f"{type(self).__name__}: position_ids is missing; pass pack_vl_batch's position_ids "
                                 "[B, 3, S] as a keyword of step() on every pipeline rank")
            h = self.decode(h, levels, first, position_ids, attention_mask)
        if self.head:
            return self.lm_head(self.model.language_model.norm(h))
        done = (self.layer_ids[-1] + 1) if self.layer_ids else first
        rest = [levels[i - first] for i in range(max(done, first), self.levels)]
        return (h, *rest) if rest else h


def blank_vision_term(visual, dtype) -> torch.Tensor:
    """``0 x`` the vision tower's outputs on one blank image of one merged patch: a microbatch without images
    still runs every vision block (FSDP gathers the blocks on every rank alike) and every vision parameter gets a
    (zero) gradient, as in one process where a batch without images does the same."""
    c = visual.config
    grid = torch.tensor([[1, c.spatial_merge_size, c.spatial_merge_size]], device=visual.pos_embed.weight.device)
    width = c.in_channels * c.temporal_patch_size * c.patch_size ** 2
    pixels = torch.zeros(c.spatial_merge_size ** 2, width, device=grid.device, dtype=dtype)
    merged, deepstack = visual(pixels, grid)
    return sum((f.sum() for f in deepstack), merged.sum()) * 0.0


def _tie(model, parts, mine, num_stages, stage_to_rank, stages, group) -> None:
    """Tied embeddings: the embedding (stage 0) and the head (last stage) share one weight on one rank, or
    sum their gradients over a 2-rank pipeline group (``PipelineStage.tie_parameters``)."""
    import torch.distributed as dist  # pylint: disable=import-outside-toplevel
    last = num_stages - 1
    if stage_to_rank[0] == stage_to_rank[last]:
        return  # one rank: both stages hold the model's one Parameter
    if dist.get_world_size(group) != 2:
        raise ValueError(f"pipeline_qwen3_vl: tied embeddings with the embedding and the head on different ranks "
                         f"need a 2-rank pipeline group, got {dist.get_world_size(group)} ranks (untie them: "
                         "tie_word_embeddings=False)")
    del model
    for part, s, stage in zip(parts, mine, stages):
        if s == 0:
            stage.tie_parameters([lambda part=part: part.model.language_model.embed_tokens.weight], group)
        elif s == last:
            stage.tie_parameters([lambda part=part: part.lm_head.weight], group)
            # the head's (summed) gradient is a copy of the embedding's: counted once in the global gradient norm
            part.tied_copies = (lambda part=part: part.lm_head.weight,)


def _schedule_class(placement: str, schedule: str, mpipe_config, schedule_kwargs):
    from hyper_parallel.pipeline.api import ScheduleMpipe, get_schedule_class  # pylint: disable=C0415
    if placement != "mpipe" and mpipe_config is not None:
        raise ValueError(f"pipeline_qwen3_vl(mpipe_config=...): only placement='mpipe' takes it, got "
                         f"placement={placement!r}")
    if placement == "mpipe":
        if schedule != "1F1B":
            raise ValueError(f"pipeline_qwen3_vl(schedule={schedule!r}): placement='mpipe' runs ScheduleMpipe; "
                             "leave schedule at its default")
        schedule_kwargs["config"] = mpipe_config
        return ScheduleMpipe
    cls = get_schedule_class(schedule)
    if cls.multi:
        raise ValueError(f"pipeline_qwen3_vl(schedule={schedule!r}): one stage per rank; use 1F1B or GPipe")
    return cls


def _encoder_mesh(pp_group, p: int, encoder_ranks: int, placement: str, tied: bool, device):
    """The data-parallel mesh of a multi-rank encoder stage (the first ``encoder_ranks`` ranks of the pipeline
    group; built on every rank), or None for one encoder rank."""
    import torch.distributed as dist  # pylint: disable=import-outside-toplevel
    if isinstance(encoder_ranks, bool) or not isinstance(encoder_ranks, int) or encoder_ranks < 1:
        raise ValueError(f"pipeline_qwen3_vl(encoder_ranks={encoder_ranks!r}): expected an int >= 1")
    if encoder_ranks == 1:
        return None
    if placement != "mpipe":
        raise ValueError(f"pipeline_qwen3_vl(encoder_ranks={encoder_ranks}): an encoder stage of several ranks needs "
                         f"placement='mpipe' (the encoder alone on its stage), got {placement!r}")
    if p - encoder_ranks < 1:
        raise ValueError(f"pipeline_qwen3_vl(encoder_ranks={encoder_ranks}): the pipeline group has {p} ranks; "
                         "at least one must be left for the language-model stages")
    if tied:
        raise ValueError("pipeline_qwen3_vl(encoder_ranks > 1): not with tied embeddings (untie them: "
                         "tie_word_embeddings=False)")
    from hyper_parallel.core.device_mesh import DeviceMesh  # pylint: disable=import-outside-toplevel
    ranks = dist.get_process_group_ranks(pp_group) if pp_group is not None else list(range(dist.get_world_size()))
    return DeviceMesh(torch.device(device).type, ranks[:encoder_ranks], mesh_dim_names=("encoder_dp",))


def _encoder_group_gradients(part, stage, mesh) -> None:
    """An encoder stage data parallel over ``mesh``: each rank's gradient (of its rows' tokens) summed over the
    group at the end of the step; the group's first rank counts them in the global gradient norm, the others
    hold copies (``tied_copies``)."""
    stage.tie_parameters(list(part.parameters()), mesh.get_group(0))
    if mesh.get_local_rank(0) > 0:
        part.tied_copies = tuple(  # pylint: disable=attribute-defined-outside-init
            lambda name=name: part.get_parameter(name) for name, _ in part.named_parameters())


def pipeline_qwen3_vl(model, *, n_microbatches: int, placement: str = "stage0", schedule: str = "1F1B",
                      pp_group=None, layers_per_stage=None, loss_fn=None, device=None, mpipe_config=None,
                      encoder_ranks: int = 1, stage_cls=None, **schedule_kwargs):
    """Split a Qwen3-VL model over the ranks of ``pp_group`` (default: the world), one stage per rank, and
    build this rank's stage and schedule. Returns ``(schedule, stage_module)``.

    ``placement="stage0"``: the vision tower and embedding share stage 0 with the first decoder layers, run
    by ``schedule`` (any single-stage schedule: ``1F1B``, ``GPipe``). ``placement="mpipe"``: stage 0 is the
    encoder stage alone and the schedule is :class:`~hyper_parallel.pipeline.ScheduleMpipe` (with
    ``mpipe_config``); ``schedule`` must be left at its default. ``encoder_ranks`` (Mpipe only): the encoder
    stage runs on the first ``encoder_ranks`` ranks of the group, data parallel over each microbatch's samples
    (a contiguous equal share per rank, so the microbatch size must divide by it; outputs ``Shard(0)``
    DTensors gathered onto the first language-model stage by the cross-mesh machinery, encoder gradients
    summed over those ranks at the end of the step); the other ranks hold one language-model stage each.
    Feed ``step`` the tensors of :func:`pack_vl_batch`: ``(input_ids, pixel_values, image_grid_thw)``
    positionally on stage 0's rank(s), ``position_ids`` and ``attention_mask`` as keywords on every rank, the
    labels as ``target`` on the last rank (and, for Mpipe, ``sample_costs=image_token_costs(packed)``). The
    stage module shares its parameters with ``model`` (build ``model`` on each rank from the same seed or
    checkpoint). ``stage_cls``: the stage module class (default :class:`Qwen3VLStageModule`; Qwen3.5's
    hybrid language model: :class:`~hyper_parallel.models.qwen3_5_vl.pipeline.Qwen3_5VLStageModule`)."""
    import torch.distributed as dist  # pylint: disable=import-outside-toplevel
    from hyper_parallel.pipeline.api import PipelineStage  # pylint: disable=C0415
    p, rank = dist.get_world_size(pp_group), dist.get_rank(pp_group)
    if p < 2:
        raise ValueError(f"pipeline_qwen3_vl: the pipeline group has {p} rank(s); pipelining needs >= 2")
    cls = _schedule_class(placement, schedule, mpipe_config, schedule_kwargs)
    if device is None:
        device = next(model.parameters()).device
    tied = model.config.text.tie_word_embeddings
    mesh = _encoder_mesh(pp_group, p, encoder_ranks, placement, tied, device)
    n = p - encoder_ranks + 1  # stages: the encoder stage on its ranks, one language-model stage per other rank
    index = max(0, rank - encoder_ranks + 1)
    layers = stage_layers(model.config.text.num_hidden_layers, n, placement, layers_per_stage)
    part = (stage_cls or Qwen3VLStageModule)(model, layers[index], encoder=index == 0, head=index == n - 1)
    prior = [i for ls in layers[:index] for i in ls]
    if index and not layers[index]:
        part.carried_in(prior[-1] + 1 if prior else 0)
    group = mesh if index == 0 else None
    if group is not None:
        part.data_parallel(group)
    stage = PipelineStage(part, index, n, device, group=pp_group,
                          **({"device_mesh": group} if group is not None else {}))
    stage.pass_kwargs_to_all = True
    if group is not None:
        _encoder_group_gradients(part, stage, group)
    if tied:
        _tie(model, [part], [index], n, tuple(range(n)), [stage], pp_group)
    loss = loss_fn if loss_fn is not None else type(model).loss
    return cls(stage, n_microbatches, loss_fn=loss, **schedule_kwargs), part
