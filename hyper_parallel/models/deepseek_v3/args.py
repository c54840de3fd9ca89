# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""DeepSeek-V3 configuration and flavor table (pure Python: no framework import).

Multi-head latent attention (queries through a ``q_lora_rank`` bottleneck, keys and values through a
shared ``kv_lora_rank`` latent plus one decoupled RoPE key of ``qk_rope_head_dim``), YaRN RoPE with
the softmax scale multiplied by ``mscale(factor, mscale_all_dim)**2``, and from ``first_k_dense_layers``
on a ``hyper_parallel.moe`` block: sigmoid scores, expert-bias (auxiliary-loss-free) selection,
group-limited top-k, renormalised weights times ``routed_scaling_factor``, shared experts.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Dict

from hyper_parallel.models.llama3.args import LlamaConfig
from hyper_parallel.moe import MoEConfig

__all__ = ["DeepseekV3Config", "FLAVORS", "deepseek_moe_layer", "yarn_mscale"]


def yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    """YaRN's magnitude correction ``0.1 * mscale * ln(scale) + 1`` (1 for ``scale <= 1``)."""
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


@dataclass(frozen=True)
class DeepseekV3Config(LlamaConfig):  # pylint: disable=too-many-instance-attributes
    """DeepSeek-V3 sizes. ``head_dim`` is the RoPE part of a query/key head (``qk_rope_head_dim``, as in
    Hugging Face); ``q_lora_rank=0`` projects queries directly (``q_proj``); ``num_nextn_predict_layers``
    multi-token-prediction (MTP) layers follow the decoder (0: none; the published checkpoint has 1)."""

    q_lora_rank: int = 0
    kv_lora_rank: int = 32
    qk_nope_head_dim: int = 16
    qk_rope_head_dim: int = 8
    v_head_dim: int = 16
    rope_interleave: bool = True
    rope_beta_fast: float = 32.0
    rope_beta_slow: float = 1.0
    rope_mscale: float = 1.0
    rope_mscale_all_dim: float = 0.0
    num_nextn_predict_layers: int = 0
    rope_types = ("default", "yarn")

    def __post_init__(self) -> None:
        object.__setattr__(self, "head_dim", self.qk_rope_head_dim)
        if self.num_key_value_heads != self.num_attention_heads:
            raise ValueError(f"DeepseekV3Config: multi-head latent attention has num_key_value_heads == "
                             f"num_attention_heads, got {self.num_key_value_heads} != {self.num_attention_heads}")
        for name in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"DeepseekV3Config({name}): expected a positive int, got {value!r}")
        for name in ("q_lora_rank", "num_nextn_predict_layers"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"DeepseekV3Config({name}): expected an int >= 0, got {value!r}")
        if self.num_nextn_predict_layers and self.moe is None:
            raise ValueError("DeepseekV3Config(num_nextn_predict_layers): the multi-token-prediction layers are MoE "
                             "layers; the config has no moe")
        super().__post_init__()

    @property
    def qk_head_dim(self) -> int:
        """Query/key head size: the no-RoPE part plus the RoPE part."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def softmax_scale(self) -> float:
        """``qk_head_dim ** -0.5``, times ``mscale(factor, mscale_all_dim) ** 2`` under YaRN."""
        scale = self.qk_head_dim ** -0.5
        if self.rope_type == "yarn" and self.rope_mscale_all_dim:
            m = yarn_mscale(self.rope_factor, self.rope_mscale_all_dim)
            scale *= m * m
        return scale


def deepseek_moe_layer(hidden_size: int, moe_intermediate_size: int, n_routed_experts: int, top_k: int, *,
                       n_shared_experts: int = 1, n_group: int = 1, topk_group: int = 1, norm_topk_prob: bool = True,
                       routed_scaling_factor: float = 1.0) -> MoEConfig:
    """The ``MoEConfig`` of a DeepSeek-V3 MoE layer (Hugging Face's field names as arguments)."""
    return MoEConfig(num_experts=n_routed_experts, top_k=top_k, dim=hidden_size, hidden_dim=moe_intermediate_size,
                     num_shared_experts=n_shared_experts, score_func="sigmoid", route_norm=norm_topk_prob,
                     route_scale=routed_scaling_factor, n_groups=n_group, topk_groups=topk_group,
                     load_balance="expert_bias")


#: ``debug``/``small`` run on CPU (``debug_mtp``: ``debug`` with one multi-token-prediction layer); ``671B``
#: (without the MTP layer; ``config("671B", num_nextn_predict_layers=1)`` adds it) is for meta-device
#: construction only
FLAVORS: Dict[str, DeepseekV3Config] = {
    "debug": DeepseekV3Config(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                              first_k_dense_layers=1, num_attention_heads=4, num_key_value_heads=4,
                              q_lora_rank=32, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8,
                              v_head_dim=16, max_position_embeddings=128,
                              moe=deepseek_moe_layer(64, 32, 8, 2, n_group=4, topk_group=2,
                                                     routed_scaling_factor=2.5)),
    "small": DeepseekV3Config(vocab_size=1024, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                              first_k_dense_layers=1, num_attention_heads=8, num_key_value_heads=8,
                              q_lora_rank=128, kv_lora_rank=64, qk_nope_head_dim=32, qk_rope_head_dim=16,
                              v_head_dim=32, max_position_embeddings=512,
                              moe=deepseek_moe_layer(256, 128, 8, 2, n_group=4, topk_group=2,
                                                     routed_scaling_factor=2.5)),
    "671B": DeepseekV3Config(vocab_size=129280, hidden_size=7168, intermediate_size=18432, num_hidden_layers=61,
                             first_k_dense_layers=3, num_attention_heads=128, num_key_value_heads=128,
                             q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
                             v_head_dim=128, max_position_embeddings=163840, rope_theta=10000.0,
                             rope_type="yarn", rope_factor=40.0, rope_original_max_position_embeddings=4096,
                             rope_mscale=1.0, rope_mscale_all_dim=1.0,
                             moe=deepseek_moe_layer(7168, 2048, 256, 8, n_group=8, topk_group=4,
                                                    routed_scaling_factor=2.5)),
}
FLAVORS["debug_mtp"] = dataclasses.replace(FLAVORS["debug"], num_nextn_predict_layers=1)
