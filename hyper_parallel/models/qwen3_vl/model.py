# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Qwen3-VL on torch: the vision tower, the MRoPE Qwen3 decoder with DeepStack, and the causal-LM head.

Parameter names are Hugging Face's ``Qwen3VLForConditionalGeneration`` (``model.visual.*``,
``model.language_model.*``, ``lm_head.weight``), so a checkpoint loads without renaming. The decoder layers
are :class:`~hyper_parallel.models.llama3.model.LlamaDecoderLayer` driven by a Qwen3 config (QK-norm), so
every plan written for the Llama/Qwen3 blocks (TP, FSDP, activation checkpointing) applies to them.

Images and videos arrive as the HF processor makes them: ``pixel_values`` ``[patches, C*T*P*P]`` with
``image_grid_thw`` ``[images, 3]`` (and ``pixel_values_videos`` / ``video_grid_thw``); the token sequence holds
one placeholder token per merged patch.
"""
from __future__ import annotations

import itertools
from typing import List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from hyper_parallel.kernels import apply_rotary_emb
from hyper_parallel.models.llama3.model import LlamaDecoderLayer, LlamaRMSNorm, causal_mask
from hyper_parallel.models.qwen3_vl.args import FLAVORS, Qwen3VLConfig, Qwen3VLVisionConfig

__all__ = ["Qwen3VLForConditionalGeneration", "Qwen3VLVisionModel", "Qwen3VLTextModel", "Qwen3VLConfig", "FLAVORS",
           "rope_index", "vision_positions"]

_ACTS = {"gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"), "gelu": F.gelu, "silu": F.silu,
         "quick_gelu": lambda x: x * torch.sigmoid(1.702 * x)}


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def vision_positions(grid_thw: torch.Tensor, merge: int) -> torch.Tensor:
    """``[patches, 2]`` (row, column) of every patch, in the processor's order: merge x merge blocks
    row-major, the patches of a block row-major inside it, repeated for each frame."""
    out = []
    for t, h, w in grid_thw.tolist():
        rows, cols = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
        shape = (h // merge, merge, w // merge, merge)
        rows = rows.reshape(shape).transpose(1, 2).flatten()
        cols = cols.reshape(shape).transpose(1, 2).flatten()
        out.append(torch.stack([rows, cols], dim=-1).repeat(t, 1))
    return torch.cat(out, dim=0).to(grid_thw.device)


class VisionPatchMerger(nn.Module):
    """``merge x merge`` neighbouring patches concatenated, then LayerNorm + MLP to the decoder width
    (``postshuffle``: the norm after the concatenation, as the DeepStack mergers do)."""

    def __init__(self, config: Qwen3VLVisionConfig, postshuffle: bool = False) -> None:
        super().__init__()
        self.width = config.hidden_size * config.spatial_merge_size ** 2
        self.postshuffle = postshuffle
        self.norm = nn.LayerNorm(self.width if postshuffle else config.hidden_size, eps=1e-6)
        self.linear_fc1 = nn.Linear(self.width, self.width)
        self.linear_fc2 = nn.Linear(self.width, config.out_hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[patches, hidden]`` -> ``[patches / merge^2, out_hidden]``."""
        x = self.norm(x.view(-1, self.width)) if self.postshuffle else self.norm(x).view(-1, self.width)
        return self.linear_fc2(F.gelu(self.linear_fc1(x)))


class VisionAttention(nn.Module):
    """Full (non-causal) attention inside each image or frame; 2-D rotary positions.

    The query, key and value projections are separate ``q_proj`` / ``k_proj`` / ``v_proj`` Linears (Hugging
    Face's checkpoint fuses them into one ``qkv`` laid out ``[3, heads, head_dim]``; the state-dict adapters split
    it on load and concatenate it on export:
    :func:`~hyper_parallel.models.qwen3_vl.state_dict_adapter.vision_qkv_from_hf`), so tensor parallel shards each
    of them column-wise by heads with a truthful ``Shard(0)`` placement. ``forward`` infers the number of (local)
    heads from the projection, so the same code runs whole and TP-sharded."""

    def __init__(self, config: Qwen3VLVisionConfig) -> None:
        super().__init__()
        self.num_heads = config.num_heads
        self.head_dim = config.hidden_size // config.num_heads
        self.q_proj = nn.Linear(config.hidden_size, config.hidden_size)
        self.k_proj = nn.Linear(config.hidden_size, config.hidden_size)
        self.v_proj = nn.Linear(config.hidden_size, config.hidden_size)
        self.proj = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``x: [patches, hidden]``; ``mask``: the boolean block-diagonal ``[patches, patches]``."""
        n = x.shape[0]
        q, k, v = (proj(x).view(n, -1, self.head_dim) for proj in (self.q_proj, self.k_proj, self.v_proj))
        q, k = apply_rotary_emb(q, cos, sin), apply_rotary_emb(k, cos, sin)
        out = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), attn_mask=mask)
        return self.proj(out.transpose(0, 1).reshape(n, -1))


class VisionBlock(nn.Module):
    """Pre-LayerNorm attention + MLP."""

    def __init__(self, config: Qwen3VLVisionConfig) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(config.hidden_size, eps=1e-6)
        self.norm2 = nn.LayerNorm(config.hidden_size, eps=1e-6)
        self.attn = VisionAttention(config)
        self.mlp = nn.Module()
        self.mlp.linear_fc1 = nn.Linear(config.hidden_size, config.intermediate_size)
        self.mlp.linear_fc2 = nn.Linear(config.intermediate_size, config.hidden_size)
        self.act = _ACTS[config.hidden_act]

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Residual stream in, residual stream out."""
        x = x + self.attn(self.norm1(x), cos, sin, mask)
        return x + self.mlp.linear_fc2(self.act(self.mlp.linear_fc1(self.norm2(x))))


class Qwen3VLVisionModel(nn.Module):
    """Patch embedding + position table + blocks + merger; ``forward`` returns the merged embeddings and the
    DeepStack features (one per ``deepstack_visual_indexes`` entry)."""

    def __init__(self, config: Qwen3VLVisionConfig) -> None:
        super().__init__()
        self.config = config
        self.patch_embed = nn.Module()
        kernel = (config.temporal_patch_size, config.patch_size, config.patch_size)
        self.patch_embed.proj = nn.Conv3d(config.in_channels, config.hidden_size, kernel_size=kernel, stride=kernel)
        self.pos_embed = nn.Embedding(config.num_position_embeddings, config.hidden_size)
        self.side = int(round(config.num_position_embeddings ** 0.5))
        self.blocks = nn.ModuleList(VisionBlock(config) for _ in range(config.depth))
        self.merger = VisionPatchMerger(config)
        self.deepstack_merger_list = nn.ModuleList(VisionPatchMerger(config, postshuffle=True)
                                                   for _ in config.deepstack_visual_indexes)
        self.register_buffer("inv_freq", self._inverse_frequencies(), persistent=False)

    def _inverse_frequencies(self) -> torch.Tensor:
        c = self.config
        head_dim = c.hidden_size // c.num_heads
        quarter = torch.arange(0, head_dim // 2, 2, dtype=torch.float) / (head_dim // 2)
        return 1.0 / (c.rope_theta ** quarter)

    def init_buffers(self, device) -> None:
        """Recompute the rotary ``inv_freq`` on ``device`` (after construction on the meta device)."""
        with torch.device(device):
            self.register_buffer("inv_freq", self._inverse_frequencies(), persistent=False)

    def _position_table(self, grid_thw: torch.Tensor) -> torch.Tensor:
        """The learned ``side x side`` table resized (bilinear, corners aligned) to each grid, in patch order."""
        merge = self.config.spatial_merge_size
        table = self.pos_embed.weight.view(self.side, self.side, -1).permute(2, 0, 1).unsqueeze(0)
        out = []
        for t, h, w in grid_thw.tolist():
            grid = F.interpolate(table, size=(h, w), mode="bilinear", align_corners=True)[0].permute(1, 2, 0)
            grid = grid.reshape(h // merge, merge, w // merge, merge, -1).transpose(1, 2).reshape(h * w, -1)
            out.append(grid.repeat(t, 1))
        return torch.cat(out, dim=0)

    def _rotary(self, grid_thw: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        pos = vision_positions(grid_thw, self.config.spatial_merge_size)
        freqs = pos[..., None].float() * self.inv_freq
        hw = torch.cat([freqs[:, 0], freqs[:, 1]], dim=-1)
        emb = torch.cat([hw, hw], dim=-1).unsqueeze(-2)
        return emb.cos(), emb.sin()

    @staticmethod
    def _block_mask(grid_thw: torch.Tensor) -> torch.Tensor:
        sizes = torch.repeat_interleave(grid_thw[:, 1] * grid_thw[:, 2], grid_thw[:, 0])
        owner = torch.repeat_interleave(torch.arange(len(sizes), device=grid_thw.device), sizes)
        return owner[:, None] == owner[None, :]

    def forward(self, pixel_values: torch.Tensor, grid_thw: torch.Tensor) -> Tuple[torch.Tensor, List[torch.Tensor]]:
        """``pixel_values [patches, C*T*P*P]``, ``grid_thw [n, 3]`` -> (``[patches / merge^2, out_hidden]``,
        DeepStack features of the same shape)."""
        c = self.config
        x = pixel_values.view(-1, c.in_channels, c.temporal_patch_size, c.patch_size, c.patch_size)
        x = self.patch_embed.proj(x.to(self.patch_embed.proj.weight.dtype)).view(-1, c.hidden_size)
        x = x + self._position_table(grid_thw).to(x.dtype)
        cos, sin = self._rotary(grid_thw)
        mask = self._block_mask(grid_thw)
        deepstack = []
        for index, block in enumerate(self.blocks):
            x = block(x, cos.to(x.dtype), sin.to(x.dtype), mask)
            if index in c.deepstack_visual_indexes:
                deepstack.append(self.deepstack_merger_list[c.deepstack_visual_indexes.index(index)](x))
        return self.merger(x), deepstack


class MRotary(nn.Module):
    """Interleaved multimodal rotary tables: frequency ``i`` follows the height position when ``i % 3 == 1``
    (``i < 3 * mrope_section[1]``), the width position when ``i % 3 == 2`` (``i < 3 * mrope_section[2]``), the
    temporal one otherwise."""

    def __init__(self, config: Qwen3VLConfig) -> None:
        super().__init__()
        text = config.text
        self.section = tuple(config.mrope_section)
        inv = 1.0 / (text.rope_theta ** (torch.arange(0, text.head_dim, 2, dtype=torch.int64).float() / text.head_dim))
        self.register_buffer("inv_freq", inv, persistent=False)

    def forward(self, position_ids: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """``position_ids [3, batch, seq]`` -> (cos, sin) ``[batch, seq, 1, head_dim]``."""
        freqs = position_ids[..., None].float() * self.inv_freq
        mixed = freqs[0].clone()
        for axis, offset in ((1, 1), (2, 2)):
            idx = slice(offset, self.section[axis] * 3, 3)
            mixed[..., idx] = freqs[axis, ..., idx]
        emb = torch.cat((mixed, mixed), dim=-1).unsqueeze(-2)
        return emb.cos(), emb.sin()


class Qwen3VLTextModel(nn.Module):
    """Embedding + Qwen3 decoder layers + final norm; DeepStack features are added to the hidden states at the
    visual positions after the first ``len(deepstack)`` layers."""

    def __init__(self, config: Qwen3VLConfig) -> None:
        super().__init__()
        text = config.text
        self.embed_tokens = nn.Embedding(text.vocab_size, text.hidden_size)
        self.layers = nn.ModuleList(LlamaDecoderLayer(text, i) for i in range(text.num_hidden_layers))
        self.norm = LlamaRMSNorm(text.hidden_size, text.rms_norm_eps)
        self.rotary = MRotary(config)

    def forward(self, inputs_embeds: torch.Tensor, position_ids: torch.Tensor,
                attention_mask: Optional[torch.Tensor] = None, visual_mask: Optional[torch.Tensor] = None,
                deepstack: Sequence[torch.Tensor] = ()) -> torch.Tensor:
        """``inputs_embeds [batch, seq, hidden]``, ``position_ids [3, batch, seq]`` -> hidden states;
        ``attention_mask``: a ``[batch, seq]`` padding mask or a boolean ``[batch, 1, seq, seq]`` SDPA mask."""
        cos, sin = self.rotary(position_ids)
        cos, sin = cos.to(inputs_embeds.dtype), sin.to(inputs_embeds.dtype)
        mask = attention_mask
        if mask is not None and mask.dim() == 2:  # a padding mask; a 4-D boolean one (packed documents) as is
            mask = causal_mask(mask)
        h = inputs_embeds
        for index, layer in enumerate(self.layers):
            h = layer(h, cos, sin) if mask is None else layer(h, cos, sin, mask)
            if index < len(deepstack) and visual_mask is not None:
                h = h.clone()
                h[visual_mask] = h[visual_mask] + deepstack[index].to(h.dtype)
        return self.norm(h)


def _token_types(input_ids: torch.Tensor, config: Qwen3VLConfig) -> torch.Tensor:
    types = torch.zeros_like(input_ids)
    types[input_ids == config.image_token_id] = 1
    types[input_ids == config.video_token_id] = 2
    return types


def _grids_per_modality(image_grid_thw, video_grid_thw):
    """Iterators over the grids of images (1) and video frames (2: one grid per frame, as the processor's
    timestamps separate the frames)."""
    if video_grid_thw is not None:
        video_grid_thw = torch.repeat_interleave(video_grid_thw, video_grid_thw[:, 0], dim=0)
        video_grid_thw[:, 0] = 1
    return {1: iter(image_grid_thw.tolist()) if image_grid_thw is not None else iter(()),
            2: iter(video_grid_thw.tolist()) if video_grid_thw is not None else iter(())}


def _sample_positions(types: List[int], grids, merge: int) -> torch.Tensor:
    pieces, pos = [], 0
    for kind, group in itertools.groupby(types):
        length = len(list(group))
        if kind == 0:
            pieces.append(torch.arange(length).view(1, -1).expand(3, -1) + pos)
            pos += length
            continue
        consumed = 0
        while consumed < length:  # consecutive images/frames form one run of placeholders
            t, h, w = next(grids[kind], (None, None, None))
            if t is None:
                what = "image" if kind == 1 else "video"
                raise ValueError(f"Qwen3VL: more {what} placeholder tokens in input_ids than {what}_grid_thw "
                                 f"describes (pass pixel values and grids for every {what})")
            gh, gw = h // merge, w // merge
            tt, hh, ww = torch.meshgrid(torch.arange(t), torch.arange(gh) + pos, torch.arange(gw) + pos, indexing="ij")
            pieces.append(torch.stack([tt + pos, hh, ww]).reshape(3, -1))
            consumed += t * gh * gw
            pos += max(gh, gw)
    return torch.cat(pieces, dim=1)


def rope_index(input_ids: torch.Tensor, config: Qwen3VLConfig, image_grid_thw: Optional[torch.Tensor] = None,
               video_grid_thw: Optional[torch.Tensor] = None, attention_mask: Optional[torch.Tensor] = None,
               mm_token_type_ids: Optional[torch.Tensor] = None) -> torch.Tensor:
    """MRoPE positions ``[3, batch, seq]``: text tokens count on all three axes; the placeholders of an image
    take (temporal, row, column) of its merged grid offset by the running position, which then advances by
    ``max(rows, columns)``. Padding (``attention_mask == 0``) gets position 0."""
    types = mm_token_type_ids if mm_token_type_ids is not None else _token_types(input_ids, config)
    grids = _grids_per_modality(image_grid_thw, video_grid_thw)
    out = torch.zeros(3, *input_ids.shape, dtype=torch.long, device=input_ids.device)
    for b in range(input_ids.shape[0]):
        keep = (attention_mask[b].bool() if attention_mask is not None
                else torch.ones_like(input_ids[b], dtype=torch.bool))
        sample = _sample_positions(types[b][keep].tolist(), grids, config.vision.spatial_merge_size)
        out[:, b, keep] = sample.to(out.device)
    return out


class _Inner(nn.Module):
    """``model``: the vision tower and the language model (Hugging Face's ``Qwen3VLModel`` names)."""

    def __init__(self, config: Qwen3VLConfig) -> None:
        super().__init__()
        self.visual = Qwen3VLVisionModel(config.vision)
        self.language_model = Qwen3VLTextModel(config)


class Qwen3VLForConditionalGeneration(nn.Module):
    """Qwen3-VL with its LM head. ``forward(input_ids, attention_mask=None, pixel_values=None,
    image_grid_thw=None, pixel_values_videos=None, video_grid_thw=None, position_ids=None,
    mm_token_type_ids=None)`` returns logits ``[batch, seq, vocab]``."""

    def __init__(self, config: Qwen3VLConfig) -> None:
        super().__init__()
        if not isinstance(config, Qwen3VLConfig):
            raise TypeError(f"Qwen3VLForConditionalGeneration(config): expected a Qwen3VLConfig, got "
                            f"{type(config).__name__}")
        self.config = config
        self.model = _Inner(config)
        self.lm_head = nn.Linear(config.text.hidden_size, config.text.vocab_size, bias=False)
        if config.text.tie_word_embeddings:
            self.lm_head.weight = self.model.language_model.embed_tokens.weight
        self.reset_parameters()

    def reset_parameters(self, std: float = 0.02) -> None:
        """Normal(0, std) for linear, convolution and embedding weights, zero biases, ones for norms."""
        for mod in self.modules():
            if isinstance(mod, (nn.Linear, nn.Embedding, nn.Conv3d)):
                nn.init.normal_(mod.weight, std=std)
                if getattr(mod, "bias", None) is not None:
                    nn.init.zeros_(mod.bias)
            elif isinstance(mod, (LlamaRMSNorm, nn.LayerNorm)):
                nn.init.ones_(mod.weight)
                if getattr(mod, "bias", None) is not None:
                    nn.init.zeros_(mod.bias)

    def _scatter(self, ids: torch.Tensor, embeds: torch.Tensor, token: int, pixels, grid, what: str):
        """Replace the ``token`` placeholders by the vision tower's output; returns (embeds, mask, deepstack)."""
        if pixels is None:
            return embeds, None, []
        merged, deepstack = self.model.visual(pixels, grid)
        mask = ids == token
        if int(mask.sum()) != merged.shape[0]:
            raise ValueError(f"Qwen3VL: {int(mask.sum())} {what} placeholder tokens in input_ids but the {what} "
                             f"features have {merged.shape[0]} rows (grid_thw {grid.tolist()})")
        embeds = embeds.masked_scatter(mask[..., None], merged.to(embeds.dtype))
        return embeds, mask, deepstack

    def forward(self, input_ids: torch.Tensor, attention_mask: Optional[torch.Tensor] = None,  # pylint: disable=too-many-arguments
                pixel_values: Optional[torch.Tensor] = None, image_grid_thw: Optional[torch.Tensor] = None,
                pixel_values_videos: Optional[torch.Tensor] = None, video_grid_thw: Optional[torch.Tensor] = None,
                position_ids: Optional[torch.Tensor] = None,
                mm_token_type_ids: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Logits; ``position_ids`` default to :func:`rope_index` of the inputs."""
        cfg = self.config
        embeds = self.model.language_model.embed_tokens(input_ids)
        embeds, img_mask, img_ds = self._scatter(input_ids, embeds, cfg.image_token_id, pixel_values,
                                                 image_grid_thw, "image")
        embeds, vid_mask, vid_ds = self._scatter(input_ids, embeds, cfg.video_token_id, pixel_values_videos,
                                                 video_grid_thw, "video")
        visual_mask, deepstack = _join_deepstack(img_mask, img_ds, vid_mask, vid_ds)
        if position_ids is None:
            position_ids = rope_index(input_ids, cfg, image_grid_thw, video_grid_thw, attention_mask,
                                      mm_token_type_ids)
        elif position_ids.dim() == 2:
            position_ids = position_ids[None].expand(3, -1, -1)
        h = self.model.language_model(embeds, position_ids, attention_mask, visual_mask, deepstack)
        return self.lm_head(h)

    @staticmethod
    def loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Mean next-token cross-entropy (labels already shifted, -100 ignored)."""
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1))


def _join_deepstack(img_mask, img_ds, vid_mask, vid_ds):
    """The visual positions and, per DeepStack level, the features of every visual token in sequence order."""
    if img_mask is None and vid_mask is None:
        return None, []
    if vid_mask is None:
        return img_mask, img_ds
    if img_mask is None:
        return vid_mask, vid_ds
    visual = img_mask | vid_mask
    joint_img, joint_vid = img_mask[visual], vid_mask[visual]
    out = []
    for img, vid in zip(img_ds, vid_ds):
        joint = img.new_zeros(int(visual.sum()), img.shape[-1])
        joint[joint_img], joint[joint_vid] = img, vid
        out.append(joint)
    return visual, out
