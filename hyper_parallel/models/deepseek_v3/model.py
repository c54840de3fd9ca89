# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""DeepSeek-V3: multi-head latent attention (MLA) and ``hyper_parallel.moe`` blocks with shared experts.

Parameter names follow Hugging Face's ``DeepseekV3ForCausalLM`` (``self_attn.q_a_proj``,
``q_a_layernorm``, ``q_b_proj``, ``kv_a_proj_with_mqa``, ``kv_a_layernorm``, ``kv_b_proj``, ``o_proj``;
``mlp.shared_experts.*``) up to the MoE router and stacked experts (see the state-dict adapter).
Head counts come from tensor sizes (``view(..., -1, dim)``), so the same code runs on TP shards.

Multi-token prediction (``config.num_nextn_predict_layers = D > 0``, DeepSeek-V3 report section 2.2):
MTP layer ``k`` (1-based) combines the previous depth's hidden state ``h[k-1]`` at position ``i`` (the
decoder's output for ``k = 1``) with the embedding of token ``t[i+k]``:
``h[k] = norm_k(TRM_k(W_k [enorm_k(Emb(t[i+k])); hnorm_k(h[k-1])]))`` with ``W_k`` = ``eh_proj``,
``TRM_k`` an MoE decoder block, ``norm_k`` = ``shared_head.norm``; its logits ``lm_head(h[k])`` (the
shared output head) predict ``t[i+k+1]``. The embedding and head are the model's own.
"""
from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from hyper_parallel.kernels import apply_rotary_emb
from hyper_parallel.models.deepseek_v3.args import FLAVORS, DeepseekV3Config, yarn_mscale
from hyper_parallel.models.llama3.model import (LlamaDecoderLayer, LlamaForCausalLM, LlamaModel, LlamaRMSNorm,
                                               LlamaRotary, attention, causal_mask)

__all__ = ["DeepseekV3ForCausalLM", "DeepseekV3Config", "FLAVORS", "DeepseekV3Attention", "DeepseekV3Rotary",
           "DeepseekV3MTPLayer", "apply_interleaved_rotary", "yarn_inv_freq", "mtp_loss"]

#: the eps of the latent norms (``q_a_layernorm``, ``kv_a_layernorm``): fixed at 1e-6 in DeepSeek's code and in
#: transformers' ``DeepseekV3Attention``, whatever ``rms_norm_eps`` says (that one is the decoder norms')
LATENT_NORM_EPS = 1e-6


def yarn_inv_freq(config: DeepseekV3Config) -> "tuple[torch.Tensor, float]":
    """YaRN inverse frequencies and cos/sin magnitude factor: low frequencies interpolated by
    ``rope_factor``, high ones kept, a linear ramp between the correction dims of ``beta_fast`` /
    ``beta_slow`` rotations over the original context."""
    dim, base = config.qk_rope_head_dim, config.rope_theta
    pos_freqs = base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim)
    extrapolation, interpolation = 1.0 / pos_freqs, 1.0 / (config.rope_factor * pos_freqs)
    original = config.rope_original_max_position_embeddings

    def correction_dim(rotations: float) -> float:
        return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low = max(math.floor(correction_dim(config.rope_beta_fast)), 0)
    high = min(math.ceil(correction_dim(config.rope_beta_slow)), dim - 1)
    if low == high:
        high += 0.001
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    keep = 1 - ramp
    inv = interpolation * (1 - keep) + extrapolation * keep
    if config.rope_mscale and config.rope_mscale_all_dim:
        factor = yarn_mscale(config.rope_factor, config.rope_mscale) / yarn_mscale(config.rope_factor,
                                                                                  config.rope_mscale_all_dim)
    else:
        factor = yarn_mscale(config.rope_factor)
    return inv, factor


class DeepseekV3Rotary(LlamaRotary):
    """cos/sin tables of the decoupled RoPE key/query part (default or YaRN frequencies; under YaRN the
    tables are multiplied by its magnitude factor)."""

    def __init__(self, config: DeepseekV3Config) -> None:
        self.magnitude = 1.0
        super().__init__(config)

    def inverse_frequencies(self) -> torch.Tensor:
        """Default or YaRN inverse frequencies of the ``qk_rope_head_dim`` dims (sets ``magnitude``)."""
        config = self.config
        if config.rope_type == "yarn":
            inv, self.magnitude = yarn_inv_freq(config)
            return inv
        dim = config.qk_rope_head_dim
        return 1.0 / (config.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))

    def forward(self, positions: torch.Tensor):
        """(cos, sin) of shape ``[seq, 1, rope_dim]`` (``[batch, seq, 1, rope_dim]`` for ``[batch, seq]``)."""
        freqs = positions.float().unsqueeze(-1) * self.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return (emb.cos() * self.magnitude).unsqueeze(-2), (emb.sin() * self.magnitude).unsqueeze(-2)


def apply_interleaved_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE on interleaved pairs ``(x0, x1), (x2, x3), ...`` (DeepSeek's weight layout); the output holds
    the rotated even then odd elements (the same permutation for queries and keys leaves ``q . k``
    unchanged, as in Hugging Face)."""
    half = cos.shape[-1] // 2
    c, s = cos[..., :half], sin[..., :half]
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


class DeepseekV3Attention(nn.Module):
    """Multi-head latent attention."""

    def __init__(self, config: DeepseekV3Config) -> None:
        super().__init__()
        c = config
        self.nope, self.rope, self.v_dim = c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim
        self.kv_lora_rank = c.kv_lora_rank
        self.interleave = c.rope_interleave
        self.scale = c.softmax_scale
        q_out = c.num_attention_heads * c.qk_head_dim
        if c.q_lora_rank:
            self.q_a_proj = nn.Linear(c.hidden_size, c.q_lora_rank, bias=False)
            self.q_a_layernorm = LlamaRMSNorm(c.q_lora_rank, LATENT_NORM_EPS)
            self.q_b_proj = nn.Linear(c.q_lora_rank, q_out, bias=False)
            self.q_proj = None
        else:
            self.q_proj = nn.Linear(c.hidden_size, q_out, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(c.hidden_size, c.kv_lora_rank + c.qk_rope_head_dim, bias=False)
        self.kv_a_layernorm = LlamaRMSNorm(c.kv_lora_rank, LATENT_NORM_EPS)
        self.kv_b_proj = nn.Linear(c.kv_lora_rank, c.num_attention_heads * (c.qk_nope_head_dim + c.v_head_dim),
                                   bias=False)
        self.o_proj = nn.Linear(c.num_attention_heads * c.v_head_dim, c.hidden_size, bias=False)

    def _rotate(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        return apply_interleaved_rotary(x, cos, sin) if self.interleave else apply_rotary_emb(x, cos, sin)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``x: [batch, seq, hidden]``; ``mask``: see :func:`hyper_parallel.models.llama3.model.attention`."""
        b, s = x.shape[0], x.shape[1]
        q = self.q_proj(x) if self.q_proj is not None else self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
        q = q.view(b, s, -1, self.nope + self.rope)
        q_pass, q_rot = torch.split(q, [self.nope, self.rope], dim=-1)
        kv, k_rot = torch.split(self.kv_a_proj_with_mqa(x), [self.kv_lora_rank, self.rope], dim=-1)
        kv = self.kv_b_proj(self.kv_a_layernorm(kv)).view(b, s, -1, self.nope + self.v_dim)
        k_pass, v = torch.split(kv, [self.nope, self.v_dim], dim=-1)
        q_rot = self._rotate(q_rot, cos, sin)
        k_rot = self._rotate(k_rot.view(b, s, 1, self.rope), cos, sin)
        q = torch.cat((q_pass, q_rot), dim=-1)
        k = torch.cat((k_pass, k_rot.expand(-1, -1, k_pass.shape[2], -1)), dim=-1)
        return self.o_proj(attention(q, k, v, mask, scale=self.scale))


class DeepseekV3DecoderLayer(LlamaDecoderLayer):
    """Pre-norm MLA + MLP (dense for the first ``first_k_dense_layers`` layers, MoE after)."""

    attention_cls = DeepseekV3Attention


class _SharedHead(nn.Module):
    """The MTP layer's output norm (Hugging Face name ``shared_head.norm``; the head itself is shared)."""

    def __init__(self, config: DeepseekV3Config) -> None:
        super().__init__()
        self.norm = LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)


class DeepseekV3MTPLayer(DeepseekV3DecoderLayer):
    """One multi-token-prediction depth: ``enorm`` / ``hnorm`` / ``eh_proj`` into an MoE decoder block, then
    ``shared_head.norm`` (Hugging Face's names under ``model.layers.{num_hidden_layers + k - 1}``)."""

    def __init__(self, config: DeepseekV3Config, index: int) -> None:
        super().__init__(config, index)
        self.enorm = LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.hnorm = LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.eh_proj = nn.Linear(2 * config.hidden_size, config.hidden_size, bias=False)
        self.shared_head = _SharedHead(config)

    # pylint: disable-next=arguments-differ,arguments-renamed
    def forward(self, embeds: torch.Tensor, hidden: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``embeds``: embeddings of the tokens one step ahead of ``hidden`` (the previous depth's output)."""
        x = self.eh_proj(torch.cat((self.enorm(embeds), self.hnorm(hidden)), dim=-1))
        return self.shared_head.norm(super().forward(x, cos, sin, mask))


def mtp_loss(mtp_logits, labels: torch.Tensor) -> torch.Tensor:
    """Mean over the MTP depths of the cross-entropy of depth ``k``'s logits ``[batch, seq - k, vocab]``
    against ``labels[:, k:]`` (``labels``: the main model's next-token labels, -100 ignored); multiply by
    the MTP weight (DeepSeek-V3: 0.3, then 0.1) and add to the main loss."""
    if not mtp_logits:
        raise ValueError("mtp_loss: no MTP logits (the model has num_nextn_predict_layers=0)")
    total = 0.0
    for k, logits in enumerate(mtp_logits, start=1):
        total = total + F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels[:, k:].reshape(-1))
    return total / len(mtp_logits)


class DeepseekV3Model(LlamaModel):
    """Embedding + DeepSeek-V3 decoder layers + final norm."""

    layer_cls = DeepseekV3DecoderLayer
    rotary_cls = DeepseekV3Rotary


class DeepseekV3ForCausalLM(LlamaForCausalLM):
    """DeepSeek-V3 decoder + LM head; ``forward(input_ids, position_ids=None, attention_mask=None)``
    returns logits ``[batch, seq, vocab]``."""

    model_cls = DeepseekV3Model

    def __init__(self, config: DeepseekV3Config) -> None:
        if not isinstance(config, DeepseekV3Config):
            raise TypeError(f"DeepseekV3ForCausalLM(config): expected a DeepseekV3Config, got {type(config).__name__}")
        super().__init__(config)
        self.mtp = None
        if config.num_nextn_predict_layers:
            self.mtp = nn.ModuleList(DeepseekV3MTPLayer(config, config.num_hidden_layers + k)
                                     for k in range(config.num_nextn_predict_layers))
            self.reset_parameters(root=self.mtp)

    def forward(self, input_ids: torch.Tensor, position_ids: Optional[torch.Tensor] = None,  # pylint: disable=arguments-differ
                attention_mask: Optional[torch.Tensor] = None, return_mtp: bool = False):
        """Logits ``[batch, seq, vocab]``; with ``return_mtp=True``, ``(logits, [mtp logits of depth k:
        [batch, seq - k, vocab] for k = 1..D])`` (depth ``k`` at position ``i`` predicts token ``i + k + 1``;
        see :func:`mtp_loss`)."""
        if not return_mtp:
            return super().forward(input_ids, position_ids, attention_mask)
        if self.mtp is None:
            raise ValueError("DeepseekV3ForCausalLM.forward(return_mtp=True): the model has no multi-token-prediction "
                             "layers (config.num_nextn_predict_layers=0)")
        hidden = self.model(input_ids, position_ids, attention_mask)
        return self.lm_head(hidden), self._mtp_logits(hidden, input_ids, position_ids, attention_mask)

    def _mtp_logits(self, hidden, input_ids, position_ids, attention_mask):
        seq = input_ids.shape[1]
        if position_ids is None:
            position_ids = torch.arange(seq, device=input_ids.device)
        out = []
        for k, layer in enumerate(self.mtp, start=1):
            cos, sin = self.model.rotary(position_ids[..., k:])
            mask = causal_mask(attention_mask[:, k:]) if attention_mask is not None else None
            hidden = layer(self.model.embed_tokens(input_ids[:, k:]), hidden[:, :seq - k], cos, sin, mask)
            out.append(self.lm_head(hidden))
        return out
