# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Hugging Face ``Qwen3_5MoeForCausalLM`` adapter (model type ``qwen3_5_moe_text``): Qwen3.5's names, the router
``mlp.router.gate`` <-> ``mlp.gate``, the shared expert ``mlp.shared_experts.*`` <-> ``mlp.shared_expert.*``
(its gate ``mlp.shared_experts.expert_gate`` <-> ``mlp.shared_expert_gate``), and our stacked experts <-> one
``gate_proj`` / ``up_proj`` / ``down_proj`` per expert (the layout transformers saves)."""
from __future__ import annotations
# pylint: disable=invalid-name  # Hugging Face's class names (Qwen3_5...) are the contract

from typing import Any, Dict

import dataclasses

from hyper_parallel.models.hf_fields import HFFieldRules
from hyper_parallel.models.qwen3_5.state_dict_adapter import (QWEN3_5_FIELDS, Qwen3_5StateDictAdapter,
                                                              text_config_of)
from hyper_parallel.models.qwen3_5_moe.args import Qwen3_5MoeConfig, qwen3_5_moe_layer

__all__ = ["Qwen3_5MoeStateDictAdapter", "QWEN3_5_MOE_FIELDS"]

_MOE_FIELDS = frozenset({"moe_intermediate_size", "num_experts", "num_experts_per_tok", "router_aux_loss_coef",
                         "shared_expert_intermediate_size"})
#: Qwen3.5's fields plus the MoE ones (``output_router_logits`` is common-irrelevant)
QWEN3_5_MOE_FIELDS = HFFieldRules(honoured=QWEN3_5_FIELDS.honoured + tuple(sorted(_MOE_FIELDS)),
                                  irrelevant=QWEN3_5_FIELDS.irrelevant, refused=QWEN3_5_FIELDS.refused)


class Qwen3_5MoeStateDictAdapter(Qwen3_5StateDictAdapter):
    """Qwen3.5-MoE <-> Hugging Face ``Qwen3_5MoeForCausalLM``."""

    hf_architecture = "Qwen3_5MoeForCausalLM"
    hf_model_type = "qwen3_5_moe_text"
    config_cls = Qwen3_5MoeConfig
    hf_fields = QWEN3_5_MOE_FIELDS

    def _hf_config(self) -> Dict[str, Any]:
        out = super()._hf_config()
        c, moe = self.model_config, self.model_config.moe
        out.pop("intermediate_size", None)
        out.update(moe_intermediate_size=moe.hidden_dim, num_experts=moe.num_experts, num_experts_per_tok=moe.top_k,
                   router_aux_loss_coef=moe.aux_loss_coeff,
                   shared_expert_intermediate_size=c.shared_expert_intermediate_size, output_router_logits=False)
        return out

    @classmethod
    def config_kwargs_from_hf(cls, hf_config: Dict[str, Any]) -> Dict[str, Any]:
        """Qwen3.5's fields plus the MoE layer."""
        kwargs = super().config_kwargs_from_hf(hf_config)
        hf_config = text_config_of(hf_config)
        for key in _MOE_FIELDS - {"shared_expert_intermediate_size"}:
            kwargs.pop(key, None)
        defaults = {f.name: f.default for f in dataclasses.fields(Qwen3_5MoeConfig)}
        hidden = hf_config.get("hidden_size", defaults["hidden_size"])
        kwargs["moe"] = qwen3_5_moe_layer(hidden, hf_config.get("moe_intermediate_size", 512),
                                          hf_config.get("num_experts", 256), hf_config.get("num_experts_per_tok", 8),
                                          hf_config.get("router_aux_loss_coef", 1e-3))
        kwargs.setdefault("intermediate_size", hf_config.get("moe_intermediate_size", 512))
        return kwargs
