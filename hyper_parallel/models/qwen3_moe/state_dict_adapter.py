# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Hugging Face ``Qwen3MoeForCausalLM`` adapter: Qwen3's names, the router ``mlp.router.gate`` <->
``mlp.gate``, and our stacked experts <-> one ``nn.Linear`` per expert."""
from __future__ import annotations

from typing import Any, Dict

import dataclasses

from hyper_parallel.models.qwen3.state_dict_adapter import QWEN3_FIELDS, Qwen3StateDictAdapter
from hyper_parallel.models.qwen3_moe.args import Qwen3MoeConfig, qwen3_moe_layer

__all__ = ["Qwen3MoeStateDictAdapter", "QWEN3_MOE_FIELDS"]

_SILU_ONLY = (lambda v: v in ("silu", "swish"), "the experts compute SwiGLU: hidden_act must be 'silu'")
#: Qwen3-MoE's ``config.json`` fields: Qwen3's plus the MoE layer's
QWEN3_MOE_FIELDS = dataclasses.replace(
    QWEN3_FIELDS,
    honoured=tuple(f for f in QWEN3_FIELDS.honoured if f != "hidden_act") + (
        "moe_intermediate_size", "num_experts", "num_local_experts", "num_experts_per_tok", "norm_topk_prob",
        "mlp_only_layers", "router_aux_loss_coef"),
    refused={**QWEN3_FIELDS.refused, "hidden_act": _SILU_ONLY,
             "decoder_sparse_step": (lambda v: v in (1, None), "only every layer sparse (1) after the "
                                     "mlp_only_layers prefix is implemented")})


class Qwen3MoeStateDictAdapter(Qwen3StateDictAdapter):
    """Qwen3-MoE <-> Hugging Face ``Qwen3MoeForCausalLM``."""

    hf_architecture = "Qwen3MoeForCausalLM"
    hf_model_type = "qwen3_moe"
    config_cls = Qwen3MoeConfig
    hf_fields = QWEN3_MOE_FIELDS

    def _hf_config(self) -> Dict[str, Any]:
        out = super()._hf_config()
        c, moe = self.model_config, self.model_config.moe
        out.update(moe_intermediate_size=moe.hidden_dim, num_experts=moe.num_experts, num_experts_per_tok=moe.top_k,
                   norm_topk_prob=moe.route_norm, decoder_sparse_step=1,
                   mlp_only_layers=list(range(c.first_k_dense_layers)), router_aux_loss_coef=moe.aux_loss_coeff,
                   output_router_logits=False)
        return out

    @classmethod
    def config_kwargs_from_hf(cls, hf_config: Dict[str, Any]) -> Dict[str, Any]:
        """Qwen3's fields plus the MoE layer (``mlp_only_layers`` must be the first k layers and
        ``decoder_sparse_step`` 1: other layouts are refused by name)."""
        kwargs = super().config_kwargs_from_hf(hf_config)
        dense = list(hf_config.get("mlp_only_layers") or [])
        if dense != list(range(len(dense))) or hf_config.get("decoder_sparse_step", 1) != 1:
            raise ValueError(f"Qwen3MoeConfig from Hugging Face: mlp_only_layers={dense} / decoder_sparse_step="
                             f"{hf_config.get('decoder_sparse_step')}: only the first k layers may be dense")
        kwargs["first_k_dense_layers"] = len(dense)
        kwargs["moe"] = qwen3_moe_layer(hf_config["hidden_size"], hf_config["moe_intermediate_size"],
                                        hf_config.get("num_experts", hf_config.get("num_local_experts")),
                                        hf_config["num_experts_per_tok"], bool(hf_config.get("norm_topk_prob", False)),
                                        hf_config.get("router_aux_loss_coef", 1e-3))
        return kwargs
