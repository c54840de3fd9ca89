# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Qwen3.5 text model: a hybrid of Gated DeltaNet (linear attention) and gated full-attention layers.

Parameter names follow Hugging Face's ``Qwen3_5ForCausalLM`` except where the packed tensors of the Gated
DeltaNet are held per section, so that tensor parallelism can shard each section by heads with the ordinary
column-wise style (the state-dict adapter concatenates them back, bit-exact):

* ``linear_attn.in_proj_qkv`` (packed ``[q | k | v]``) -> ``in_proj_q`` / ``in_proj_k`` / ``in_proj_v``;
* ``linear_attn.conv1d.weight`` (``[q | k | v]`` channels) -> ``conv_q.weight`` / ``conv_k.weight`` /
  ``conv_v.weight`` (each ``[channels, 1, kernel]``).

Head counts come from tensor sizes (``view(..., -1, head_dim)``), so the same code runs on TP shards. The
text model is separable from any vision tower: :class:`Qwen3_5TextModel` takes ``inputs_embeds`` and 3-D
multimodal RoPE positions ``[3, batch, seq]`` (or Hugging Face's ``[4, batch, seq]`` with the text
positions first), so a vision-language model can drive it.

Packed documents: ``position_ids`` that restart (a position that is not the previous one + 1) start a new
document; linear-attention layers then reset their conv window and recurrent state at each document start
and full-attention layers attend within the document only (:class:`DocumentLayout`).
"""
from __future__ import annotations
# pylint: disable=invalid-name  # Hugging Face's class names (Qwen3_5...) are the contract

from typing import List, Optional

import torch
import torch.nn.functional as F
from torch import nn

from hyper_parallel.kernels import apply_rotary_emb
from hyper_parallel.models.llama3.model import (LlamaForCausalLM, LlamaMLP, LlamaRMSNorm, LlamaRotary, attention,
                                               causal_mask)
from hyper_parallel.models.qwen3_5.args import FLAVORS, Qwen3_5Config
from hyper_parallel.models.qwen3_5.gated_delta import chunk_gated_delta_rule
from hyper_parallel.moe._torch.experts import FeedForward, GroupedExperts
from hyper_parallel.moe._torch.moe import MoE

__all__ = ["Qwen3_5Config", "FLAVORS", "Qwen3_5ForCausalLM", "Qwen3_5TextModel", "Qwen3_5DecoderLayer",
           "Qwen3_5Attention", "Qwen3_5GatedDeltaNet", "Qwen3_5RMSNorm", "Qwen3_5Rotary", "CausalConv1d",
           "GatedSharedExpert", "Qwen3_5SparseMoe", "DocumentLayout", "local_tensor"]


def local_tensor(x: torch.Tensor) -> torch.Tensor:
    """This rank's shard of a DTensor parameter (TP shards the conv channels, ``A_log`` and ``dt_bias`` of the
    heads a rank holds); a plain tensor as it is."""
    to_local = getattr(x, "to_local", None)
    return to_local() if to_local is not None else x


class Qwen3_5RMSNorm(nn.Module):
    """Zero-centred RMSNorm: ``norm(x) * (1 + weight)`` computed in fp32 (the weight is initialised to zeros)."""

    #: ``hyper_parallel.models.init_parameters``: this module's weight starts at zero
    param_init_kinds = {"weight": "zeros"}

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise the last dim."""
        xf = x.float()
        out = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (out * (1.0 + self.weight.float())).type_as(x)


class Qwen3_5Rotary(LlamaRotary):
    """cos/sin of the ``rotary_dim`` rotated dims; positions ``[seq]``, ``[batch, seq]`` or multimodal
    ``[3, batch, seq]`` (temporal/height/width, frequencies interleaved by ``mrope_section``)."""

    def inverse_frequencies(self) -> torch.Tensor:
        """``theta ** (-2i / rotary_dim)``."""
        dim = self.config.rotary_dim
        return 1.0 / (self.config.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))

    def forward(self, positions: torch.Tensor):
        """(cos, sin) of shape ``[..., seq, 1, rotary_dim]``."""
        freqs = positions.float().unsqueeze(-1) * self.inv_freq
        if positions.dim() == 3:  # multimodal: T frequencies, with H and W interleaved into their sections
            section = self.config.mrope_section
            mixed = freqs[0].clone()
            for axis in (1, 2):
                idx = slice(axis, section[axis] * 3, 3)
                mixed[..., idx] = freqs[axis][..., idx]
            freqs = mixed
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().unsqueeze(-2), emb.sin().unsqueeze(-2)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE on the first ``cos.shape[-1]`` dims of each head; the rest pass through."""
    r = cos.shape[-1]
    if r == x.shape[-1]:
        return apply_rotary_emb(x, cos.to(x.dtype), sin.to(x.dtype))
    return torch.cat([apply_rotary_emb(x[..., :r], cos.to(x.dtype), sin.to(x.dtype)), x[..., r:]], dim=-1)


class DocumentLayout:
    """Where each token of a ``[batch, seq]`` block goes when documents are laid out as rows of their own.

    ``starts [batch, seq]`` (bool) marks document starts; position 0 of every row starts a segment.
    :meth:`pack` maps ``[batch, seq, ...]`` to ``[segments, longest, ...]`` (zero-padded at the end, which a
    causal layer never sees), :meth:`unpack` maps back. Without an inner start the layout is the identity
    (``segments = batch``). ``continues [batch]``: the row's first token continues a document of the
    previous context-parallel rank (its position is not 0)."""

    def __init__(self, starts: torch.Tensor, continues: Optional[torch.Tensor] = None) -> None:
        bsz, seq = starts.shape
        self.shape = (bsz, seq)
        self.continues = continues
        starts = starts.clone()
        starts[:, 0] = True
        self.doc_ids = starts.long().cumsum(1)  # per row: 1, 1, 2, 2, 2, ...
        self.identity = bool(starts.sum() == bsz)
        flat = starts.reshape(-1)
        seg = flat.long().cumsum(0) - 1
        first = flat.nonzero().squeeze(1)
        offset = torch.arange(flat.numel(), device=flat.device) - first[seg]
        self.segments = int(seg[-1]) + 1
        self.longest = int(offset.max()) + 1
        self.dest = seg * self.longest + offset
        seg = seg.view(bsz, seq)
        self.first_segment, self.last_segment = seg[:, 0], seg[:, -1]

    @classmethod
    def from_positions(cls, positions: torch.Tensor) -> "DocumentLayout":
        """Documents of ``positions [batch, seq]``: a new one wherever a position is not the previous + 1."""
        starts = torch.zeros_like(positions, dtype=torch.bool)
        starts[:, 1:] = positions[:, 1:] != positions[:, :-1] + 1
        return cls(starts, continues=positions[:, 0] != 0)

    def pack(self, x: torch.Tensor) -> torch.Tensor:
        """``[batch, seq, ...]`` -> ``[segments, longest, ...]``."""
        if self.identity:
            return x
        rest = x.shape[2:]
        flat = x.reshape(-1, *rest)
        out = flat.new_zeros(self.segments * self.longest, *rest).index_copy(0, self.dest, flat)
        return out.view(self.segments, self.longest, *rest)

    def unpack(self, y: torch.Tensor) -> torch.Tensor:
        """``[segments, longest, ...]`` -> ``[batch, seq, ...]``."""
        if self.identity:
            return y
        rest = y.shape[2:]
        return y.reshape(-1, *rest).index_select(0, self.dest).view(*self.shape, *rest)

    def rows_to_first_segments(self, x: torch.Tensor) -> torch.Tensor:
        """``[batch, ...]`` per-row values (an incoming state) -> ``[segments, ...]`` on each row's first
        segment, zeros elsewhere."""
        if self.identity:
            return x
        return x.new_zeros(self.segments, *x.shape[1:]).index_copy(0, self.first_segment, x)

    def last_segments_to_rows(self, y: torch.Tensor) -> torch.Tensor:
        """``[segments, ...]`` -> ``[batch, ...]`` of each row's last segment (an outgoing state)."""
        return y if self.identity else y.index_select(0, self.last_segment)

    def tail_keep(self, width: int) -> torch.Tensor:
        """``[batch, width]``: which of each row's last ``width`` tokens belong to the row's last document."""
        tail = self.doc_ids[:, -width:]
        return tail == self.doc_ids[:, -1:]

    def attention_mask(self, padding: Optional[torch.Tensor]) -> torch.Tensor:
        """The boolean ``[batch, 1, seq, seq]`` SDPA mask: causal, within a document, no padded key."""
        same = self.doc_ids.unsqueeze(-1) == self.doc_ids.unsqueeze(-2)
        keep = same & torch.ones(self.shape[1], self.shape[1], dtype=torch.bool, device=same.device).tril()
        if padding is not None:
            keep = keep & padding.bool()[:, None, :]
        eye = torch.eye(self.shape[1], dtype=torch.bool, device=keep.device)
        return (keep | (~keep.any(-1, keepdim=True) & eye)).unsqueeze(1)


class CausalConv1d(nn.Module):
    """Depthwise causal conv1d + SiLU over ``[n, seq, channels]``; ``weight [channels, 1, kernel]``. ``halo
    [n, kernel - 1, channels]``: the tokens before the block (zeros when absent)."""

    def __init__(self, channels: int, kernel: int) -> None:
        super().__init__()
        self.kernel = kernel
        self.weight = nn.Parameter(torch.empty(channels, 1, kernel))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, x: torch.Tensor, halo: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``silu(conv(x))``, same shape."""
        w = local_tensor(self.weight)
        xt = x.transpose(1, 2)
        if halo is None:
            xt = F.pad(xt, (self.kernel - 1, 0))
        else:
            xt = torch.cat([halo.transpose(1, 2).to(xt.dtype), xt], dim=-1)
        return F.silu(F.conv1d(xt, w.to(xt.dtype), groups=w.shape[0])).transpose(1, 2)


class Qwen3_5GatedDeltaNet(nn.Module):  # pylint: disable=too-many-instance-attributes
    """Gated DeltaNet token mixer: q/k/v projections -> causal conv -> gated delta rule
    (:func:`~hyper_parallel.models.qwen3_5.gated_delta.chunk_gated_delta_rule`) -> gated RMSNorm (``norm(o) *
    silu(z)``) -> ``out_proj``. ``context_parallel``: set by
    :class:`hyper_parallel.cp.style.LinearAttentionContextParallel` (conv halo and recurrent state passed
    between the ranks of the sequence); ``None`` on one rank."""

    def __init__(self, config: Qwen3_5Config) -> None:
        super().__init__()
        c = config
        hidden = c.hidden_size
        self.head_k_dim, self.head_v_dim = c.linear_key_head_dim, c.linear_value_head_dim
        key_dim, value_dim = c.linear_num_key_heads * self.head_k_dim, c.linear_num_value_heads * self.head_v_dim
        self.chunk_size = c.chunk_size
        self.conv_kernel = c.linear_conv_kernel_dim
        self.in_proj_q = nn.Linear(hidden, key_dim, bias=False)
        self.in_proj_k = nn.Linear(hidden, key_dim, bias=False)
        self.in_proj_v = nn.Linear(hidden, value_dim, bias=False)
        self.in_proj_z = nn.Linear(hidden, value_dim, bias=False)
        self.in_proj_b = nn.Linear(hidden, c.linear_num_value_heads, bias=False)
        self.in_proj_a = nn.Linear(hidden, c.linear_num_value_heads, bias=False)
        self.conv_q = CausalConv1d(key_dim, c.linear_conv_kernel_dim)
        self.conv_k = CausalConv1d(key_dim, c.linear_conv_kernel_dim)
        self.conv_v = CausalConv1d(value_dim, c.linear_conv_kernel_dim)
        self.dt_bias = nn.Parameter(torch.ones(c.linear_num_value_heads))
        self.A_log = nn.Parameter(torch.empty(c.linear_num_value_heads).uniform_(0.01, 16.0).log())
        self.norm = LlamaRMSNorm(self.head_v_dim, c.rms_norm_eps)
        self.out_proj = nn.Linear(value_dim, hidden, bias=False)
        self.context_parallel = None

    def _conv_inputs(self, x: torch.Tensor, layout: DocumentLayout) -> List[torch.Tensor]:
        """q, k, v after the projections and the causal conv, in the layout's segments."""
        pre = [self.in_proj_q(x), self.in_proj_k(x), self.in_proj_v(x)]
        halos = [None, None, None]
        if self.context_parallel is not None:
            halos = self.context_parallel.halos(pre, layout, self.conv_kernel - 1)
        convs = (self.conv_q, self.conv_k, self.conv_v)
        return [conv(layout.pack(t), None if h is None else layout.rows_to_first_segments(h))
                for conv, t, h in zip(convs, pre, halos)]

    def forward(self, x: torch.Tensor, layout: Optional[DocumentLayout] = None,
                padding_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``x [batch, seq, hidden]`` -> same shape. ``padding_mask [batch, seq]`` (1 = token) zeroes padded
        inputs, as Hugging Face does; ``layout``: packed documents (default: one per row)."""
        if padding_mask is not None:
            x = x * padding_mask.unsqueeze(-1).to(x.dtype)
        bsz, seq = x.shape[0], x.shape[1]
        if layout is None:
            layout = DocumentLayout(torch.zeros(bsz, seq, dtype=torch.bool, device=x.device))
        q, k, v = self._conv_inputs(x, layout)
        n, length = q.shape[0], q.shape[1]
        q, k = q.reshape(n, length, -1, self.head_k_dim), k.reshape(n, length, -1, self.head_k_dim)
        v = v.reshape(n, length, -1, self.head_v_dim)
        beta = layout.pack(torch.sigmoid(self.in_proj_b(x)))
        g = layout.pack(-local_tensor(self.A_log).float().exp()
                        * F.softplus(self.in_proj_a(x).float() + local_tensor(self.dt_bias)))
        if self.context_parallel is not None:
            core = self.context_parallel.delta_rule(chunk_gated_delta_rule, q, k, v, g, beta, layout,
                                                    chunk_size=self.chunk_size, anchor=x)
        else:
            core, _ = chunk_gated_delta_rule(q, k, v, g, beta, chunk_size=self.chunk_size,
                                             use_qk_l2norm_in_kernel=True)
        core = layout.unpack(core)
        z = self.in_proj_z(x).view(bsz, seq, -1, self.head_v_dim)
        out = self.norm(core) * F.silu(z.float()).to(core.dtype)
        return self.out_proj(out.reshape(bsz, seq, -1))


class Qwen3_5Attention(nn.Module):
    """Gated full attention: GQA with zero-centred per-head QK-norm, partial RoPE, and the output multiplied by
    ``sigmoid(gate)`` (``q_proj`` emits each head's query and gate side by side) before ``o_proj``."""

    def __init__(self, config: Qwen3_5Config) -> None:
        super().__init__()
        hd = config.head_dim
        self.head_dim = hd
        self.q_proj = nn.Linear(config.hidden_size, config.num_attention_heads * hd * 2, bias=False)
        self.k_proj = nn.Linear(config.hidden_size, config.num_key_value_heads * hd, bias=False)
        self.v_proj = nn.Linear(config.hidden_size, config.num_key_value_heads * hd, bias=False)
        self.o_proj = nn.Linear(config.num_attention_heads * hd, config.hidden_size, bias=False)
        self.q_norm = Qwen3_5RMSNorm(hd, config.rms_norm_eps)
        self.k_norm = Qwen3_5RMSNorm(hd, config.rms_norm_eps)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``x: [batch, seq, hidden]``; ``mask``: boolean ``[batch, 1, seq, seq]`` or None (causal)."""
        b, s = x.shape[0], x.shape[1]
        qg = self.q_proj(x).view(b, s, -1, 2 * self.head_dim)
        q, gate = qg[..., :self.head_dim], qg[..., self.head_dim:]
        q = self.q_norm(q)
        k = self.k_norm(self.k_proj(x).view(b, s, -1, self.head_dim))
        v = self.v_proj(x).view(b, s, -1, self.head_dim)
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        out = attention(q, k, v, mask)
        return self.o_proj(out * torch.sigmoid(gate.reshape(b, s, -1)))


class GatedSharedExpert(FeedForward):
    """Qwen3.5-MoE's shared expert: a SwiGLU scaled per token by ``sigmoid(expert_gate(x))``."""

    def __init__(self, dim: int, hidden_dim: int) -> None:
        super().__init__(dim, hidden_dim)
        self.expert_gate = nn.Linear(dim, 1, bias=False)
        nn.init.normal_(self.expert_gate.weight, std=0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``sigmoid(expert_gate(x)) * swiglu(x)``."""
        return torch.sigmoid(self.expert_gate(x)) * super().forward(x)


class Qwen3_5SparseMoe(MoE):
    """``hyper_parallel.moe.MoE`` (softmax top-k router, renormalised weights) with a
    :class:`GatedSharedExpert` of width ``shared_hidden`` as ``shared_experts``."""

    def __init__(self, config, shared_hidden: int) -> None:
        super().__init__(config)
        self.shared_experts = GatedSharedExpert(config.dim, shared_hidden) if shared_hidden else None


class Qwen3_5DecoderLayer(nn.Module):
    """Pre-norm token mixer (``linear_attn`` or ``self_attn`` by ``config.layer_types[index]``) + MLP (or MoE)."""

    def __init__(self, config: Qwen3_5Config, index: int = 0) -> None:
        super().__init__()
        self.layer_type = config.layer_types[index]
        self.input_layernorm = Qwen3_5RMSNorm(config.hidden_size, config.rms_norm_eps)
        if config.is_linear_layer(index):
            self.linear_attn = Qwen3_5GatedDeltaNet(config)
        else:
            self.self_attn = Qwen3_5Attention(config)
        self.post_attention_layernorm = Qwen3_5RMSNorm(config.hidden_size, config.rms_norm_eps)
        if config.is_moe_layer(index):
            self.mlp = Qwen3_5SparseMoe(config.moe, getattr(config, "shared_expert_intermediate_size", 0))
        else:
            self.mlp = LlamaMLP(config)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, context: dict) -> torch.Tensor:
        """Residual stream in and out; ``context``: ``layout`` / ``padding`` (linear attention) and ``mask``
        (full attention) of :meth:`Qwen3_5TextModel.forward`."""
        a = self.input_layernorm(x)
        if self.layer_type == "linear_attention":
            mixed = self.linear_attn(a, context.get("layout"), context.get("padding"))
        elif context.get("mask") is None:
            mixed = self.self_attn(a, cos, sin)
        else:
            mixed = self.self_attn(a, cos, sin, context["mask"])
        x = x + mixed
        return x + self.mlp(self.post_attention_layernorm(x))


def _split_positions(position_ids: Optional[torch.Tensor], bsz: int, seq: int, device):
    """(text positions ``[batch, seq]`` or None, RoPE positions) from ``[seq]``, ``[batch, seq]``, multimodal
    ``[3, batch, seq]`` or Hugging Face's ``[4, batch, seq]`` (text positions first)."""
    if position_ids is None:
        return None, torch.arange(seq, device=device)
    if position_ids.dim() == 1:
        return position_ids.unsqueeze(0).expand(bsz, -1), position_ids
    if position_ids.dim() == 2:
        return position_ids, position_ids
    if position_ids.dim() == 3 and position_ids.shape[0] == 4:
        return position_ids[0], position_ids[1:]
    if position_ids.dim() == 3 and position_ids.shape[0] == 3:
        return None, position_ids
    raise ValueError(f"Qwen3_5TextModel(position_ids): expected [seq], [batch, seq], [3, batch, seq] or "
                     f"[4, batch, seq], got {tuple(position_ids.shape)}")


class Qwen3_5TextModel(nn.Module):
    """Embedding + hybrid decoder layers + final norm (no LM head, no vision tower)."""

    def __init__(self, config: Qwen3_5Config) -> None:
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(Qwen3_5DecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = Qwen3_5RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary = Qwen3_5Rotary(config)

    #: the context-parallel mesh when the sequence is split over ranks (set by
    #: ``hyper_parallel.models.qwen3_5.parallelize.qwen3_5_cp_plan``): packed documents then get a full-attention
    #: mask over the whole sequence (rows: every query, columns: every key, in sequence order)
    cp_mesh = None

    def _global_document_mask(self, text_positions: torch.Tensor) -> Optional[torch.Tensor]:
        """Under CP (a contiguous split): the ``[batch, 1, S, S]`` document mask of the whole sequence, from every
        rank's positions (one small all-gather per forward; the CP attention keeps this rank's query rows), or
        None when the whole sequence is one document per row (plain causal attention)."""
        import torch.distributed as dist  # pylint: disable=import-outside-toplevel
        group = self.cp_mesh.get_group(0)
        parts = [torch.empty_like(text_positions) for _ in range(dist.get_world_size(group))]
        dist.all_gather(parts, text_positions.contiguous(), group=group)
        whole = DocumentLayout.from_positions(torch.cat(parts, dim=1))
        return None if whole.identity else whole.attention_mask(None)

    def _context(self, text_positions, attention_mask, bsz: int, seq: int, device) -> dict:
        if attention_mask is not None and attention_mask.dim() == 4:  # a boolean full-attention mask as given
            return self._masked_context(text_positions, attention_mask, bsz, seq, device)
        layout = None
        if text_positions is not None:
            layout = DocumentLayout.from_positions(text_positions.to(device))
        padding = attention_mask if attention_mask is not None and not bool(attention_mask.all()) else None
        if self.cp_mesh is not None and text_positions is not None and padding is None:
            mask = self._global_document_mask(text_positions.to(device))
        elif layout is not None and not layout.identity:
            mask = layout.attention_mask(padding)
        else:
            mask = causal_mask(attention_mask) if attention_mask is not None else None
        if layout is None:
            layout = DocumentLayout(torch.zeros(bsz, seq, dtype=torch.bool, device=device))
        return {"layout": layout, "padding": padding, "mask": mask}

    @staticmethod
    def _masked_context(text_positions, mask: torch.Tensor, bsz: int, seq: int, device) -> dict:
        """A ``[batch, 1, seq, seq]`` boolean mask (the trainer's SFT document mask, of the whole sequence under
        CP) is the full-attention layers' mask as given; the linear-attention layers take the documents from the
        restarting ``position_ids`` (the SFT rows' positions restart with each document, padding included)."""
        if text_positions is not None:
            layout = DocumentLayout.from_positions(text_positions.to(device))
        else:
            layout = DocumentLayout(torch.zeros(bsz, seq, dtype=torch.bool, device=device))
        return {"layout": layout, "padding": None, "mask": mask.to(device=device, dtype=torch.bool)}

    def forward(self, input_ids: Optional[torch.Tensor] = None, position_ids: Optional[torch.Tensor] = None,
                attention_mask: Optional[torch.Tensor] = None,
                inputs_embeds: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Hidden states ``[batch, seq, hidden]`` of ``input_ids`` (or ``inputs_embeds``; a pipeline stage
        without the embedding gets the previous stage's hidden states as ``input_ids``). ``position_ids``: see
        :func:`_split_positions` (pass the sharded positions under context parallelism); restarting positions
        mark packed documents. ``attention_mask``: Hugging Face's padding mask ``[batch, seq]``, or a boolean
        ``[batch, 1, seq, seq]`` full-attention mask (see :meth:`_masked_context`)."""
        src = inputs_embeds if inputs_embeds is not None else input_ids
        bsz, seq = src.shape[0], src.shape[1]  # the whole sequence (under SP the embedding's output is a shard)
        if inputs_embeds is not None:
            h = inputs_embeds
        else:
            h = self.embed_tokens(input_ids) if self.embed_tokens is not None else input_ids
        text_positions, rope_positions = _split_positions(position_ids, bsz, seq, h.device)
        cos, sin = self.rotary(rope_positions)
        context = self._context(text_positions, attention_mask, bsz, seq, h.device)
        for layer in (self.layers.values() if isinstance(self.layers, nn.ModuleDict) else self.layers):
            h = layer(h, cos, sin, context)
        return self.norm(h) if self.norm is not None else h


class Qwen3_5ForCausalLM(LlamaForCausalLM):
    """Qwen3.5 text model + LM head; ``forward(input_ids, position_ids=None, attention_mask=None)`` returns
    logits ``[batch, seq, vocab]`` (:meth:`Qwen3_5TextModel.forward`)."""

    model_cls = Qwen3_5TextModel
    config_cls = Qwen3_5Config

    def __init__(self, config: Qwen3_5Config) -> None:
        if not isinstance(config, self.config_cls):
            raise TypeError(f"{type(self).__name__}(config): expected a {self.config_cls.__name__}, got "
                            f"{type(config).__name__}")
        super().__init__(config)

    def reset_parameters(self, std: float = 0.02, root: Optional[nn.Module] = None) -> None:
        """Hugging Face's init: Normal(0, std) for linear, embedding, conv and expert weights, zeros for the
        zero-centred norms, ones for the gated norms and ``dt_bias``, ``A_log = log(U(0.01, 16))``."""
        for mod in (root if root is not None else self).modules():
            if isinstance(mod, (nn.Linear, nn.Embedding, CausalConv1d)):
                nn.init.normal_(mod.weight, std=std)
            elif isinstance(mod, GroupedExperts):
                mod.reset_parameters(std)
            elif isinstance(mod, Qwen3_5RMSNorm):
                nn.init.zeros_(mod.weight)
            elif isinstance(mod, LlamaRMSNorm):
                nn.init.ones_(mod.weight)
            elif isinstance(mod, Qwen3_5GatedDeltaNet):
                with torch.no_grad():
                    mod.dt_bias.fill_(1.0)
                    mod.A_log.copy_(torch.empty_like(mod.A_log).uniform_(0.01, 16.0).log())

    def forward(self, input_ids: torch.Tensor, position_ids: Optional[torch.Tensor] = None,
                attention_mask: Optional[torch.Tensor] = None,
                inputs_embeds: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Logits for next-token prediction."""
        h = self.model(input_ids, position_ids, attention_mask, inputs_embeds)
        return self.lm_head(h) if self.lm_head is not None else h
