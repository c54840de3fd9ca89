# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Llama-style decoder: embedding, RMSNorm, RoPE attention with GQA, SwiGLU MLP, LM head.

Parameter names follow Hugging Face's ``LlamaForCausalLM`` (``model.embed_tokens.weight``,
``model.layers.0.self_attn.q_proj.weight``, ``model.norm.weight``, ``lm_head.weight`` …) so HF
state dicts load directly. Head counts are inferred from tensor sizes (``view(..., -1, head_dim)``)
so the same code runs on tensor-parallel local shards.

With ``config.moe`` set, the decoder layers from ``first_k_dense_layers`` on replace their MLP by a
mixture-of-experts block (``hyper_parallel.moe.MoE``) under the same name ``mlp``, like Hugging
Face's Qwen3-MoE / DeepSeek-V3 (``model.layers.1.mlp.router.gate``, ``...mlp.experts.gate_proj``
stacked ``[E, hidden, dim]``, ``...mlp.shared_experts.gate_proj``).
"""
from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from hyper_parallel.kernels import apply_rotary_emb
from hyper_parallel.models.llama3.args import TINY_CONFIGS, LlamaConfig
from hyper_parallel.moe._torch.experts import GroupedExperts
from hyper_parallel.moe._torch.moe import MoE

__all__ = ["LlamaConfig", "LlamaForCausalLM", "TINY_CONFIGS", "LlamaModel", "LlamaDecoderLayer", "LlamaAttention",
           "LlamaMLP", "LlamaRMSNorm", "LlamaRotary", "attention", "causal_mask", "llama3_scaled_inv_freq",
           "document_mask", "ACTIVATIONS"]


class LlamaRMSNorm(nn.Module):
    """Root-mean-square norm with a learned scale."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise the last dim."""
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


def llama3_scaled_inv_freq(inv: torch.Tensor, config) -> torch.Tensor:
    """Llama 3.1's long-context RoPE: wavelengths longer than ``original / low_freq_factor`` are divided by
    ``rope_factor``, shorter than ``original / high_freq_factor`` kept, and smoothly blended between."""
    low_wavelen = config.rope_original_max_position_embeddings / config.rope_low_freq_factor
    high_wavelen = config.rope_original_max_position_embeddings / config.rope_high_freq_factor
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > low_wavelen, inv / config.rope_factor, inv)
    smooth = ((config.rope_original_max_position_embeddings / wavelen - config.rope_low_freq_factor)
              / (config.rope_high_freq_factor - config.rope_low_freq_factor))
    blended = (1 - smooth) * scaled / config.rope_factor + smooth * scaled
    medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return torch.where(medium, blended, scaled)


class LlamaRotary(nn.Module):
    """cos/sin tables for rotary embeddings (HF ``rotate_half`` convention)."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.config = config
        self.register_buffer("inv_freq", self.inverse_frequencies(), persistent=False)

    def inverse_frequencies(self) -> torch.Tensor:
        """``theta ** (-2i / head_dim)`` (Llama 3.1-scaled with ``rope_type="llama3"``), on the default device."""
        config = self.config
        inv = 1.0 / (config.rope_theta ** (torch.arange(0, config.head_dim, 2, dtype=torch.int64).float()
                                           / config.head_dim))
        if getattr(config, "rope_type", "default") == "llama3":
            inv = llama3_scaled_inv_freq(inv, config)
        return inv

    def init_buffers(self, device) -> None:
        """Recompute ``inv_freq`` on ``device`` (after construction on the meta device)."""
        with torch.device(device):
            self.register_buffer("inv_freq", self.inverse_frequencies(), persistent=False)

    def forward(self, positions: torch.Tensor):
        """(cos, sin) of shape ``[seq, 1, head_dim]`` for positions ``[seq]`` (``[batch, seq, 1, head_dim]``
        for ``[batch, seq]``)."""
        freqs = positions.float().unsqueeze(-1) * self.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().unsqueeze(-2), emb.sin().unsqueeze(-2)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Optional[torch.Tensor] = None,
              scale: Optional[float] = None) -> torch.Tensor:
    """Causal SDPA on ``[batch, seq, heads, dim]`` tensors (grouped-query heads allowed), returning
    ``[batch, seq, heads * v_dim]``; ``mask``: the boolean ``[batch, 1, seq, seq]`` of :func:`causal_mask`."""
    b, s = q.shape[0], q.shape[1]
    kwargs = {"is_causal": True} if mask is None else {"attn_mask": mask}
    if scale is not None:
        kwargs["scale"] = scale
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                         enable_gqa=True, **kwargs)
    return out.transpose(1, 2).reshape(b, s, -1)


def causal_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """The boolean ``[batch, 1, seq, seq]`` SDPA mask of a Hugging Face padding mask ``[batch, seq]`` (1 =
    token, 0 = padding): causal and no padded key. A query with no visible key (left padding) sees itself,
    so its (ignored) output stays finite."""
    s = attention_mask.shape[-1]
    keep = torch.ones(s, s, dtype=torch.bool, device=attention_mask.device).tril()
    keep = keep & attention_mask.bool()[:, None, None, :]
    return keep | (~keep.any(-1, keepdim=True) & torch.eye(s, dtype=torch.bool, device=keep.device))


def document_mask(doc_ids: torch.Tensor) -> torch.Tensor:
    """The boolean ``[batch, 1, seq, seq]`` SDPA mask of packed samples: causal and within one document
    (``doc_ids[b, i] == doc_ids[b, j]``); padding (any id of its own) attends to itself only."""
    s = doc_ids.shape[-1]
    keep = torch.ones(s, s, dtype=torch.bool, device=doc_ids.device).tril()
    return (keep & (doc_ids[:, :, None] == doc_ids[:, None, :]))[:, None]


class LlamaAttention(nn.Module):
    """Causal self-attention with grouped-query heads (and Qwen3's per-head query/key RMSNorm when
    ``config.qk_norm``)."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        hd = config.head_dim
        self.head_dim = hd
        self.q_proj = nn.Linear(config.hidden_size, config.num_attention_heads * hd, bias=False)
        self.k_proj = nn.Linear(config.hidden_size, config.num_key_value_heads * hd, bias=False)
        self.v_proj = nn.Linear(config.hidden_size, config.num_key_value_heads * hd, bias=False)
        self.o_proj = nn.Linear(config.num_attention_heads * hd, config.hidden_size, bias=False)
        if getattr(config, "qk_norm", False):
            self.q_norm = LlamaRMSNorm(hd, config.rms_norm_eps)
            self.k_norm = LlamaRMSNorm(hd, config.rms_norm_eps)
        else:
            self.q_norm = self.k_norm = None

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``x: [batch, seq, hidden]``; ``mask``: see :func:`attention`."""
        b, s = x.shape[0], x.shape[1]
        q = self.q_proj(x).view(b, s, -1, self.head_dim)
        k = self.k_proj(x).view(b, s, -1, self.head_dim)
        v = self.v_proj(x).view(b, s, -1, self.head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rotary_emb(q, cos, sin), apply_rotary_emb(k, cos, sin)
        return self.o_proj(attention(q, k, v, mask))


def _gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    return F.gelu(x, approximate="tanh")


#: ``config.hidden_act`` -> the gate activation (transformers' ``ACT2FN`` meanings)
ACTIVATIONS = {"silu": F.silu, "swish": F.silu, "gelu": F.gelu, "gelu_pytorch_tanh": _gelu_tanh,
               "gelu_new": _gelu_tanh, "relu": F.relu}


class LlamaMLP(nn.Module):
    """Gated feed-forward ``down(act(gate(x)) * up(x))`` (SwiGLU with the default ``hidden_act="silu"``)."""

    def __init__(self, config: LlamaConfig, intermediate_size: Optional[int] = None) -> None:
        super().__init__()
        inner = intermediate_size or config.intermediate_size
        self.gate_proj = nn.Linear(config.hidden_size, inner, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, inner, bias=False)
        self.down_proj = nn.Linear(inner, config.hidden_size, bias=False)
        self.act = ACTIVATIONS[getattr(config, "hidden_act", "silu")]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``down(act(gate(x)) * up(x))``."""
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    """Pre-norm attention + MLP (or MoE) block; a model family with another attention sets ``attention_cls``."""

    attention_cls = LlamaAttention

    def __init__(self, config: LlamaConfig, index: int = 0) -> None:
        super().__init__()
        self.input_layernorm = LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = self.attention_cls(config)
        self.post_attention_layernorm = LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = MoE(config.moe) if config.is_moe_layer(index) else LlamaMLP(config)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Residual stream in, residual stream out (``mask``: see :func:`attention`)."""
        a = self.input_layernorm(x)
        x = x + (self.self_attn(a, cos, sin) if mask is None else self.self_attn(a, cos, sin, mask))
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    """Embedding + decoder layers + final norm (``layer_cls`` / ``rotary_cls``: the blocks a derived
    model swaps in)."""

    layer_cls = LlamaDecoderLayer
    rotary_cls = LlamaRotary

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(self.layer_cls(config, i) for i in range(config.num_hidden_layers))
        self.norm = LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary = self.rotary_cls(config)

    def forward(self, input_ids: torch.Tensor, position_ids: Optional[torch.Tensor] = None,
                attention_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Hidden states ``[batch, seq, hidden]``. ``position_ids`` (``[seq]`` or ``[batch, seq]``, default
        ``0..seq-1``) are the RoPE positions: pass the sharded positions under context parallelism.
        ``attention_mask``: Hugging Face's padding mask ``[batch, seq]`` (1 = token, 0 = padding), or a boolean
        ``[batch, 1, seq, seq]`` mask (True = attend) used as it is (packed samples: :func:`document_mask`)."""
        if position_ids is None:
            position_ids = torch.arange(input_ids.shape[1], device=input_ids.device)
        cos, sin = self.rotary(position_ids)
        mask = causal_mask(attention_mask) if attention_mask is not None and attention_mask.dim() == 2 \
            else attention_mask
        # a pipeline stage (hyper_parallel.pipeline) may lack the embedding / norm and hold some layers only
        h = self.embed_tokens(input_ids) if self.embed_tokens is not None else input_ids
        for layer in (self.layers.values() if isinstance(self.layers, nn.ModuleDict) else self.layers):
            h = layer(h, cos, sin) if mask is None else layer(h, cos, sin, mask)
        return self.norm(h) if self.norm is not None else h


class LlamaForCausalLM(nn.Module):
    """Decoder + LM head; ``forward`` returns logits ``[batch, seq, vocab]``."""

    model_cls = LlamaModel

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.config = config
        self.model = self.model_cls(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.reset_parameters()

    def reset_parameters(self, std: float = 0.02, root: Optional[nn.Module] = None) -> None:
        """Normal(0, std) init for linear, embedding and expert weights, ones for norms (of ``root``'s
        modules, default the whole model)."""
        for mod in (root if root is not None else self).modules():
            if isinstance(mod, (nn.Linear, nn.Embedding)):
                nn.init.normal_(mod.weight, std=std)
            elif isinstance(mod, GroupedExperts):
                mod.reset_parameters(std)
            elif isinstance(mod, LlamaRMSNorm):
                nn.init.ones_(mod.weight)

    def forward(self, input_ids: torch.Tensor, position_ids: Optional[torch.Tensor] = None,
                attention_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Logits for next-token prediction (``position_ids``, ``attention_mask``: see
        :meth:`LlamaModel.forward`)."""
        h = self.model(input_ids, position_ids, attention_mask)
        return self.lm_head(h) if self.lm_head is not None else h

    @staticmethod
    def loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Mean next-token cross-entropy (labels already shifted, -100 ignored)."""
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
