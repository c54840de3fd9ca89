# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""DeepSeek-V3 on MindSpore: multi-head latent attention (MLA) and MoE blocks with shared experts, group-limited
sigmoid routing and the expert bias (``hyper_parallel.moe._mindspore``); the torch model's architecture, config,
flavors and parameter names (``hyper_parallel.models.deepseek_v3.model``). Multi-token-prediction layers
(``num_nextn_predict_layers > 0``) are torch-only (refused by name)."""
from __future__ import annotations

import math

import mindspore as ms
import numpy as np
from mindspore import mint, nn

from hyper_parallel.models.deepseek_v3.args import FLAVORS, DeepseekV3Config, yarn_mscale
from hyper_parallel.models.llama3._mindspore.model import (CoreAttention, LlamaDecoderLayer, LlamaForCausalLM,
                                                          LlamaModel, LlamaRMSNorm, LlamaRotary, Linear,
                                                          apply_rotary_emb, rope_inv_freq)

__all__ = ["DeepseekV3ForCausalLM", "DeepseekV3Config", "FLAVORS", "DeepseekV3Attention", "DeepseekV3Rotary",
           "apply_interleaved_rotary", "yarn_inv_freq"]

#: the eps of the latent norms (fixed at 1e-6, as in the torch model and transformers)
LATENT_NORM_EPS = 1e-6


def yarn_inv_freq(config: DeepseekV3Config):
    """YaRN inverse frequencies (float32) and the cos/sin magnitude factor (the torch model's formula)."""
    dim, base = config.qk_rope_head_dim, config.rope_theta
    pos_freqs = np.float32(base) ** (np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / np.float32(dim))
    extrapolation = np.float32(1.0) / pos_freqs
    interpolation = np.float32(1.0) / (np.float32(config.rope_factor) * pos_freqs)
    original = config.rope_original_max_position_embeddings

    def correction_dim(rotations: float) -> float:
        return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low = max(math.floor(correction_dim(config.rope_beta_fast)), 0)
    high = min(math.ceil(correction_dim(config.rope_beta_slow)), dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(dim // 2, dtype=np.float32) - np.float32(low)) / np.float32(high - low), 0, 1)
    keep = (1 - ramp).astype(np.float32)
    inv = interpolation * (1 - keep) + extrapolation * keep
    if config.rope_mscale and config.rope_mscale_all_dim:
        factor = yarn_mscale(config.rope_factor, config.rope_mscale) / yarn_mscale(config.rope_factor,
                                                                                  config.rope_mscale_all_dim)
    else:
        factor = yarn_mscale(config.rope_factor)
    return inv.astype(np.float32), factor


class DeepseekV3Rotary(LlamaRotary):
    """cos/sin tables of the decoupled RoPE part (default or YaRN frequencies; YaRN scales them by its
    magnitude factor)."""

    def __init__(self, config: DeepseekV3Config) -> None:
        super().__init__(config)
        if config.rope_type == "yarn":
            inv, self.magnitude = yarn_inv_freq(config)
        else:
            inv = rope_inv_freq(config, config.qk_rope_head_dim)
        self.inv_freq = ms.Tensor(inv)


def apply_interleaved_rotary(x, cos, sin):
    """RoPE on interleaved pairs ``(x0, x1), (x2, x3), ...``; the output holds the rotated even then odd elements
    (the torch model's ``apply_interleaved_rotary``)."""
    half = cos.shape[-1] // 2
    c, s = cos[..., :half], sin[..., :half]
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return mint.cat((x1 * c - x2 * s, x2 * c + x1 * s), -1)


class DeepseekV3Attention(nn.Cell):
    """Multi-head latent attention (parameter names as Hugging Face's ``DeepseekV3Attention``)."""

    def __init__(self, config: DeepseekV3Config) -> None:
        super().__init__()
        c = config
        self.nope, self.rope, self.v_dim = c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim
        self.kv_lora_rank = c.kv_lora_rank
        self.interleave = c.rope_interleave
        q_out = c.num_attention_heads * c.qk_head_dim
        if c.q_lora_rank:
            self.q_a_proj = Linear(c.hidden_size, c.q_lora_rank)
            self.q_a_layernorm = LlamaRMSNorm(c.q_lora_rank, LATENT_NORM_EPS)
            self.q_b_proj = Linear(c.q_lora_rank, q_out)
            self.q_proj = None
        else:
            self.q_proj = Linear(c.hidden_size, q_out)
        self.kv_a_proj_with_mqa = Linear(c.hidden_size, c.kv_lora_rank + c.qk_rope_head_dim)
        self.kv_a_layernorm = LlamaRMSNorm(c.kv_lora_rank, LATENT_NORM_EPS)
        self.kv_b_proj = Linear(c.kv_lora_rank, c.num_attention_heads * (c.qk_nope_head_dim + c.v_head_dim))
        self.o_proj = Linear(c.num_attention_heads * c.v_head_dim, c.hidden_size)
        self.core_attention = CoreAttention(c.softmax_scale)

    def _rotate(self, x, cos, sin):
        return apply_interleaved_rotary(x, cos, sin) if self.interleave else apply_rotary_emb(x, cos, sin)

    def construct(self, x, cos, sin):
        """``x: [batch, seq, hidden]``."""
        b, s = x.shape[0], x.shape[1]
        q = self.q_proj(x) if self.q_proj is not None else self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
        q = q.reshape(b, s, -1, self.nope + self.rope)
        q_pass, q_rot = q[..., :self.nope], q[..., self.nope:]
        kv_all = self.kv_a_proj_with_mqa(x)
        kv, k_rot = kv_all[..., :self.kv_lora_rank], kv_all[..., self.kv_lora_rank:]
        kv = self.kv_b_proj(self.kv_a_layernorm(kv)).reshape(b, s, -1, self.nope + self.v_dim)
        k_pass, v = kv[..., :self.nope], kv[..., self.nope:]
        q_rot = self._rotate(q_rot, cos, sin)
        k_rot = self._rotate(k_rot.reshape(b, s, 1, self.rope), cos, sin)
        q = mint.cat((q_pass, q_rot), -1)
        k = mint.cat((k_pass, k_rot.broadcast_to((b, s, k_pass.shape[2], self.rope))), -1)
        return self.o_proj(self.core_attention(q, k, v))


class DeepseekV3DecoderLayer(LlamaDecoderLayer):
    """Pre-norm MLA + MLP (dense for the first ``first_k_dense_layers`` layers, MoE after)."""

    attention_cls = DeepseekV3Attention


class DeepseekV3Model(LlamaModel):
    """Embedding + DeepSeek-V3 decoder layers + final norm."""

    layer_cls = DeepseekV3DecoderLayer
    rotary_cls = DeepseekV3Rotary


class DeepseekV3ForCausalLM(LlamaForCausalLM):
    """DeepSeek-V3 decoder + LM head; ``construct(input_ids, position_ids=None)`` returns logits."""

    model_cls = DeepseekV3Model

    def __init__(self, config: DeepseekV3Config, seed: int = 0) -> None:
        if not isinstance(config, DeepseekV3Config):
            raise TypeError(f"DeepseekV3ForCausalLM(config): expected a DeepseekV3Config, got {type(config).__name__}")
        if config.num_nextn_predict_layers:
            raise ValueError(f"DeepseekV3ForCausalLM (MindSpore): num_nextn_predict_layers="
                             f"{config.num_nextn_predict_layers}: the multi-token-prediction layers are torch-only; "
                             "use a flavor without them (e.g. 'debug')")
        super().__init__(config, seed=seed)
