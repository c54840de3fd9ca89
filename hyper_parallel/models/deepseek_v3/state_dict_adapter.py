# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Hugging Face ``DeepseekV3ForCausalLM`` adapter: MLA keys as they are, the router ``mlp.router.gate``
<-> ``mlp.gate``, the expert bias <-> ``mlp.gate.e_score_correction_bias``, stacked experts <-> one
``nn.Linear`` per expert. The multi-token-prediction layer of the published checkpoint (layer 61) is
not part of the model: load it with ``strict=False``."""
from __future__ import annotations

from typing import Any, Dict, List, Tuple

from hyper_parallel.models.deepseek_v3.args import DeepseekV3Config, deepseek_moe_layer
from hyper_parallel.models.llama3.state_dict_adapter import _LAYER, LlamaStateDictAdapter, decoder_rules

__all__ = ["DeepseekV3StateDictAdapter"]

_DENSE_ATTENTION = ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight")
_MLA = ("self_attn.q_proj.weight", "self_attn.q_a_proj.weight", "self_attn.q_a_layernorm.weight",
        "self_attn.q_b_proj.weight", "self_attn.kv_a_proj_with_mqa.weight", "self_attn.kv_a_layernorm.weight",
        "self_attn.kv_b_proj.weight")


class DeepseekV3StateDictAdapter(LlamaStateDictAdapter):
    """DeepSeek-V3 <-> Hugging Face ``DeepseekV3ForCausalLM``."""

    hf_architecture = "DeepseekV3ForCausalLM"
    hf_model_type = "deepseek_v3"
    config_cls = DeepseekV3Config

    def _rules(self) -> List[Tuple[str, str]]:
        rules = [r for r in decoder_rules(moe=True, expert_bias=True)
                 if r[0] not in {_LAYER + n for n in _DENSE_ATTENTION}]
        return rules + [(_LAYER + n, _LAYER + n) for n in _MLA]

    def _rope_parameters(self) -> Dict[str, Any]:
        c = self.model_config
        if c.rope_type != "yarn":
            return {"rope_type": "default", "rope_theta": c.rope_theta}
        return {"rope_type": "yarn", "rope_theta": c.rope_theta, "factor": c.rope_factor,
                "original_max_position_embeddings": c.rope_original_max_position_embeddings,
                "beta_fast": c.rope_beta_fast, "beta_slow": c.rope_beta_slow, "mscale": c.rope_mscale,
                "mscale_all_dim": c.rope_mscale_all_dim}

    def _hf_config(self) -> Dict[str, Any]:
        out = super()._hf_config()
        c, moe = self.model_config, self.model_config.moe
        out.update(q_lora_rank=c.q_lora_rank or None, kv_lora_rank=c.kv_lora_rank, qk_nope_head_dim=c.qk_nope_head_dim,
                   qk_rope_head_dim=c.qk_rope_head_dim, v_head_dim=c.v_head_dim, rope_interleave=c.rope_interleave,
                   first_k_dense_replace=c.first_k_dense_layers, moe_intermediate_size=moe.hidden_dim,
                   n_routed_experts=moe.num_experts, num_experts_per_tok=moe.top_k,
                   n_shared_experts=moe.num_shared_experts, n_group=moe.n_groups, topk_group=moe.topk_groups,
                   norm_topk_prob=moe.route_norm, routed_scaling_factor=moe.route_scale, num_nextn_predict_layers=0)
        out.pop("head_dim")
        return out

    @classmethod
    def config_kwargs_from_hf(cls, hf_config: Dict[str, Any]) -> Dict[str, Any]:
        """DeepSeek-V3 fields (MLA, YaRN, the MoE layer) from a Hugging Face ``config.json`` dict."""
        hf = dict(hf_config)
        rope = dict(hf.pop("rope_parameters", None) or hf.pop("rope_scaling", None) or {})
        kwargs = super().config_kwargs_from_hf(hf)
        kwargs.pop("head_dim", None)
        kwargs["rope_theta"] = rope.get("rope_theta", hf.get("rope_theta", 10000.0))
        kind = rope.get("rope_type", rope.get("type", "default"))
        if kind == "yarn":
            kwargs.update(rope_type="yarn", rope_factor=rope["factor"],
                          rope_original_max_position_embeddings=rope["original_max_position_embeddings"],
                          rope_beta_fast=rope.get("beta_fast") or 32.0, rope_beta_slow=rope.get("beta_slow") or 1.0,
                          rope_mscale=rope.get("mscale") or 0.0, rope_mscale_all_dim=rope.get("mscale_all_dim") or 0.0)
        elif kind != "default":
            raise ValueError(f"DeepseekV3Config from Hugging Face: rope type {kind!r} is not supported "
                             "(expected 'default' or 'yarn')")
        kwargs["q_lora_rank"] = hf.get("q_lora_rank") or 0
        kwargs["first_k_dense_layers"] = hf.get("first_k_dense_replace", 0)
        kwargs["moe"] = deepseek_moe_layer(hf["hidden_size"], hf["moe_intermediate_size"], hf["n_routed_experts"],
                                           hf["num_experts_per_tok"], n_shared_experts=hf.get("n_shared_experts", 1),
                                           n_group=hf.get("n_group", 1), topk_group=hf.get("topk_group", 1),
                                           norm_topk_prob=bool(hf.get("norm_topk_prob", True)),
                                           routed_scaling_factor=hf.get("routed_scaling_factor", 1.0))
        return kwargs
