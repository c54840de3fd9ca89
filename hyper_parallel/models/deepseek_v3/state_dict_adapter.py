# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Hugging Face ``DeepseekV3ForCausalLM`` adapter: MLA keys as they are, the router ``mlp.router.gate``
<-> ``mlp.gate``, the expert bias <-> ``mlp.gate.e_score_correction_bias``, stacked experts <-> one
``nn.Linear`` per expert. Multi-token-prediction layers ``mtp.{k}.*`` (``num_nextn_predict_layers``) are
Hugging Face's ``model.layers.{num_hidden_layers + k}.*`` (the published checkpoint's layer 61), with the
same per-layer renames plus ``enorm`` / ``hnorm`` / ``eh_proj`` / ``shared_head.norm``; the checkpoint's
copies of the embedding and head under that layer (``embed_tokens.weight``, ``shared_head.head.weight``)
are dropped by ``from_hf`` and not written by ``to_hf`` (the model shares its own, as transformers' MTP
loader does). A model without MTP
layers loading the published checkpoint: ``strict=False``."""
from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Tuple

from hyper_parallel.models.deepseek_v3.args import DeepseekV3Config, deepseek_moe_layer
from hyper_parallel.models.llama3.state_dict_adapter import (_LAYER, LLAMA_FIELDS, LlamaStateDictAdapter,
                                                            decoder_rules)

__all__ = ["DeepseekV3StateDictAdapter", "DEEPSEEK_V3_FIELDS"]

#: DeepSeek-V3's ``config.json`` fields (transformers' and the published checkpoint's remote-code names)
DEEPSEEK_V3_FIELDS = dataclasses.replace(
    LLAMA_FIELDS,
    honoured=tuple(f for f in LLAMA_FIELDS.honoured if f not in ("head_dim", "hidden_act")) + (
        "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "rope_interleave",
        "first_k_dense_replace", "moe_intermediate_size", "n_routed_experts", "num_experts_per_tok",
        "n_shared_experts", "n_group", "topk_group", "norm_topk_prob", "routed_scaling_factor",
        "num_nextn_predict_layers"),
    irrelevant={"head_dim": "derived: qk_rope_head_dim", "qk_head_dim": "derived: qk_nope_head_dim + "
                "qk_rope_head_dim", "ep_size": "the original code's expert-parallel degree (ours: parallelism.ep)",
                "aux_loss_alpha": "the original code's auxiliary loss; the model balances by expert bias",
                "seq_aux": "the original code's auxiliary loss; the model balances by expert bias"},
    refused={**LLAMA_FIELDS.refused,
             "hidden_act": (lambda v: v in ("silu", "swish"), "the experts compute SwiGLU: hidden_act must be "
                            "'silu'"),
             "scoring_func": (lambda v: v in ("sigmoid", None), "the router scores by sigmoid"),
             "topk_method": (lambda v: v in ("noaux_tc", None), "group-limited top-k with expert bias only"),
             "moe_layer_freq": (lambda v: v in (1, None), "every layer after first_k_dense_replace is MoE")})

_DENSE_ATTENTION = ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight")
_MTP = ("enorm.weight", "hnorm.weight", "eh_proj.weight", "shared_head.norm.weight")
_MLA = ("self_attn.q_proj.weight", "self_attn.q_a_proj.weight", "self_attn.q_a_layernorm.weight",
        "self_attn.q_b_proj.weight", "self_attn.kv_a_proj_with_mqa.weight", "self_attn.kv_a_layernorm.weight",
        "self_attn.kv_b_proj.weight")


class DeepseekV3StateDictAdapter(LlamaStateDictAdapter):
    """DeepSeek-V3 <-> Hugging Face ``DeepseekV3ForCausalLM``."""

    hf_architecture = "DeepseekV3ForCausalLM"
    hf_model_type = "deepseek_v3"
    config_cls = DeepseekV3Config
    hf_fields = DEEPSEEK_V3_FIELDS

    def _rules(self) -> List[Tuple[str, str]]:
        rules = [r for r in decoder_rules(moe=True, expert_bias=True)
                 if r[0] not in {_LAYER + n for n in _DENSE_ATTENTION}]
        mtp = _MTP if self.model_config.num_nextn_predict_layers else ()
        return rules + [(_LAYER + n, _LAYER + n) for n in _MLA + mtp]

    def _mtp_prefixes(self) -> List[Tuple[str, str]]:
        n = self.model_config.num_hidden_layers
        return [(f"mtp.{k}.", f"model.layers.{n + k}.") for k in range(self.model_config.num_nextn_predict_layers)]

    def to_hf(self, state_dict):
        """Model keys -> Hugging Face keys (MTP layers as the layers after the decoder's; no copies of the
        embedding / head under them: transformers' MTP loader takes the main model's)."""
        renamed = dict(state_dict)
        for ours, theirs in self._mtp_prefixes():
            for key in [k for k in renamed if k.startswith(ours)]:
                renamed[theirs + key[len(ours):]] = renamed.pop(key)
        return super().to_hf(renamed)

    def from_hf(self, hf_state_dict):
        """Hugging Face keys -> model keys (the MTP layers' embedding / head copies dropped)."""
        rest = dict(hf_state_dict)
        for _, theirs in self._mtp_prefixes():
            rest.pop(theirs + "embed_tokens.weight", None)
            rest.pop(theirs + "shared_head.head.weight", None)
        out = super().from_hf(rest)
        for ours, theirs in self._mtp_prefixes():  # from_hf kept the HF layer prefix: back to mtp.{k}.
            for key in [k for k in out if k.startswith(theirs)]:
                out[ours + key[len(theirs):]] = out.pop(key)
        return out

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
                   norm_topk_prob=moe.route_norm, routed_scaling_factor=moe.route_scale,
                   num_nextn_predict_layers=c.num_nextn_predict_layers)
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
        kwargs["num_nextn_predict_layers"] = hf.get("num_nextn_predict_layers", hf.get("num_mtp_layers")) or 0
        kwargs["first_k_dense_layers"] = hf.get("first_k_dense_replace", 0)
        kwargs["moe"] = deepseek_moe_layer(hf["hidden_size"], hf["moe_intermediate_size"], hf["n_routed_experts"],
                                           hf["num_experts_per_tok"], n_shared_experts=hf.get("n_shared_experts", 1),
                                           n_group=hf.get("n_group", 1), topk_group=hf.get("topk_group", 1),
                                           norm_topk_prob=bool(hf.get("norm_topk_prob", True)),
                                           routed_scaling_factor=hf.get("routed_scaling_factor", 1.0))
        return kwargs
