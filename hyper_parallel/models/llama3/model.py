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

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from hyper_parallel.kernels import apply_rotary_emb
from hyper_parallel.models.llama3.args import TINY_CONFIGS, LlamaConfig
from hyper_parallel.moe._torch.experts import GroupedExperts
from hyper_parallel.moe._torch.moe import MoE

__all__ = ["LlamaConfig", "LlamaForCausalLM", "TINY_CONFIGS"]


class LlamaRMSNorm(nn.Module):
    """Root-mean-square norm with a learned scale."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise the last dim."""
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


class LlamaRotary(nn.Module):
    """cos/sin tables for rotary embeddings (HF ``rotate_half`` convention)."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        inv = 1.0 / (config.rope_theta ** (torch.arange(0, config.head_dim, 2).float() / config.head_dim))
        self.register_buffer("inv_freq", inv, persistent=False)

    def forward(self, positions: torch.Tensor):
        """(cos, sin) of shape ``[seq, 1, head_dim]`` for positions ``[seq]`` (``[batch, seq, 1, head_dim]``
        for ``[batch, seq]``)."""
        freqs = positions.float().unsqueeze(-1) * self.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().unsqueeze(-2), emb.sin().unsqueeze(-2)


class LlamaAttention(nn.Module):
    """Causal self-attention with grouped-query heads."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        hd = config.head_dim
        self.head_dim = hd
        self.q_proj = nn.Linear(config.hidden_size, config.num_attention_heads * hd, bias=False)
        self.k_proj = nn.Linear(config.hidden_size, config.num_key_value_heads * hd, bias=False)
        self.v_proj = nn.Linear(config.hidden_size, config.num_key_value_heads * hd, bias=False)
        self.o_proj = nn.Linear(config.num_attention_heads * hd, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """``x: [batch, seq, hidden]``."""
        b, s = x.shape[0], x.shape[1]
        q = self.q_proj(x).view(b, s, -1, self.head_dim)
        k = self.k_proj(x).view(b, s, -1, self.head_dim)
        v = self.v_proj(x).view(b, s, -1, self.head_dim)
        q, k = apply_rotary_emb(q, cos, sin), apply_rotary_emb(k, cos, sin)
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                             is_causal=True, enable_gqa=True)
        return self.o_proj(out.transpose(1, 2).reshape(b, s, -1))


class LlamaMLP(nn.Module):
    """SwiGLU feed-forward."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``down(silu(gate(x)) * up(x))``."""
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    """Pre-norm attention + MLP (or MoE) block."""

    def __init__(self, config: LlamaConfig, index: int = 0) -> None:
        super().__init__()
        self.input_layernorm = LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = LlamaAttention(config)
        self.post_attention_layernorm = LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = MoE(config.moe) if config.is_moe_layer(index) else LlamaMLP(config)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """Residual stream in, residual stream out."""
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    """Embedding + decoder layers + final norm."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(LlamaDecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary = LlamaRotary(config)

    def forward(self, input_ids: torch.Tensor, position_ids: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Hidden states ``[batch, seq, hidden]``. ``position_ids`` (``[seq]`` or ``[batch, seq]``, default
        ``0..seq-1``) are the RoPE positions: pass the sharded positions under context parallelism."""
        if position_ids is None:
            position_ids = torch.arange(input_ids.shape[1], device=input_ids.device)
        cos, sin = self.rotary(position_ids)
        # a pipeline stage (hyper_parallel.pipeline) may lack the embedding / norm and hold some layers only
        h = self.embed_tokens(input_ids) if self.embed_tokens is not None else input_ids
        for layer in (self.layers.values() if isinstance(self.layers, nn.ModuleDict) else self.layers):
            h = layer(h, cos, sin)
        return self.norm(h) if self.norm is not None else h


class LlamaForCausalLM(nn.Module):
    """Decoder + LM head; ``forward`` returns logits ``[batch, seq, vocab]``."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.config = config
        self.model = LlamaModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.reset_parameters()

    def reset_parameters(self, std: float = 0.02) -> None:
        """Normal(0, std) init for linear, embedding and expert weights, ones for norms."""
        for mod in self.modules():
            if isinstance(mod, (nn.Linear, nn.Embedding)):
                nn.init.normal_(mod.weight, std=std)
            elif isinstance(mod, GroupedExperts):
                mod.reset_parameters(std)
            elif isinstance(mod, LlamaRMSNorm):
                nn.init.ones_(mod.weight)

    def forward(self, input_ids: torch.Tensor, position_ids: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Logits for next-token prediction (``position_ids``: see :meth:`LlamaModel.forward`)."""
        h = self.model(input_ids, position_ids)
        return self.lm_head(h) if self.lm_head is not None else h

    @staticmethod
    def loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Mean next-token cross-entropy (labels already shifted, -100 ignored)."""
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
