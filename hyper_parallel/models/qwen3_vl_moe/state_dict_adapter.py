# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Hugging Face ``Qwen3VLMoeForConditionalGeneration`` <-> Qwen3-VL-MoE: the configuration (every
``config.json`` field of the three levels, top / ``text_config`` / ``vision_config``, honoured, irrelevant or
refused by the rules of :mod:`hyper_parallel.models.hf_fields`) and the state dict, both ways bit-exact:

* the router ``...mlp.gate.weight`` <-> our ``...mlp.router.gate.weight``;
* Hugging Face's fused experts ``...mlp.experts.gate_up_proj`` ``[E, 2 * moe_intermediate, hidden]`` (gate rows
  first) <-> our ``...mlp.experts.gate_proj`` / ``up_proj`` ``[E, moe_intermediate, hidden]``;
  ``...mlp.experts.down_proj`` ``[E, hidden, moe_intermediate]`` is the same tensor on both sides;
* our ``...mlp.expert_bias`` (aux-loss-free balancing; zero for a model balanced by the auxiliary loss) has no
  Hugging Face counterpart: dropped on export (refused when not zero), zeros on import;
* Hugging Face's fused vision ``...attn.qkv`` <-> our ``...attn.q_proj`` / ``k_proj`` / ``v_proj`` (as Qwen3-VL);
* a tied ``lm_head.weight`` is left out on export, as ``save_pretrained`` does.
"""
from __future__ import annotations

import re
from typing import Any, Dict, Mapping

from hyper_parallel.models.hf_fields import HFFieldRules, check_hf_fields
from hyper_parallel.models.qwen3_moe.args import Qwen3MoeConfig, qwen3_moe_layer
from hyper_parallel.models.qwen3_vl.state_dict_adapter import (BOOKKEEPING, TEXT_HONOURED, VISION_RULES,
                                                               Qwen3VLStateDictAdapter, _as_dict, _rope, _vision,
                                                               vision_qkv_from_hf, vision_qkv_to_hf)
from hyper_parallel.models.qwen3_vl_moe.args import Qwen3VLMoeConfig

__all__ = ["TOP_RULES", "TEXT_RULES", "VISION_RULES", "config_from_hf", "config_to_hf", "to_hf", "from_hf",
           "Qwen3VLMoeStateDictAdapter"]

_IDS = ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id")
_BOOKKEEPING = BOOKKEEPING
_MOE_FIELDS = ("moe_intermediate_size", "num_experts", "num_local_experts", "num_experts_per_tok",
               "mlp_only_layers", "router_aux_loss_coef", "decoder_sparse_step")


def _first_k(value: Any) -> bool:
    layers = list(value or [])
    return layers == list(range(len(layers)))


#: the top level: the sub-configurations and the special token ids
TOP_RULES = HFFieldRules(honoured=("text_config", "vision_config", "tie_word_embeddings") + _IDS,
                         irrelevant=_BOOKKEEPING)
#: ``text_config``: Qwen3's decoder sizes, MRoPE and the MoE layer
TEXT_RULES = HFFieldRules(
    honoured=TEXT_HONOURED + _MOE_FIELDS + ("hidden_act", "rope_parameters", "rope_scaling", "rope_theta",
                                            "tie_word_embeddings"),
    irrelevant={**_BOOKKEEPING, "sliding_window": "always None in Qwen3-VL-MoE (no sliding-window layers)"},
    refused={"hidden_act": (lambda v: v in ("silu", "swish"), "the decoder's MLPs and experts are SwiGLU"),
             "attention_bias": (lambda v: not v, "the attention projections have no bias"),
             "attention_dropout": (lambda v: not v, "attention dropout is not implemented"),
             "decoder_sparse_step": (lambda v: v in (1, None), "only every layer sparse after the mlp_only_layers "
                                     "prefix is implemented"),
             "mlp_only_layers": (_first_k, "only the first k layers may be dense")})
def _text(text: Mapping[str, Any], tie: bool) -> Qwen3MoeConfig:
    kwargs = {k: text[k] for k in TEXT_HONOURED if text.get(k) is not None}
    experts = text.get("num_experts", text.get("num_local_experts"))
    dense = list(text.get("mlp_only_layers") or [])
    moe = qwen3_moe_layer(text["hidden_size"], text["moe_intermediate_size"], experts, text["num_experts_per_tok"],
                          True, float(text.get("router_aux_loss_coef", 1e-3)))
    return Qwen3MoeConfig(tie_word_embeddings=tie, rope_theta=_rope(text)["rope_theta"], moe=moe,
                          first_k_dense_layers=len(dense), **kwargs)


def config_from_hf(hf_config: Any) -> Qwen3VLMoeConfig:
    """Our configuration from a ``transformers.Qwen3VLMoeConfig`` (or its ``to_dict()``); a field that is
    refused, or known to none of the rules and not off, raises ``ValueError`` naming the level, field and
    value."""
    cfg = _as_dict(hf_config)
    text, vision = _as_dict(cfg.get("text_config") or {}), _as_dict(cfg.get("vision_config") or {})
    check_hf_fields(TOP_RULES, cfg, "Qwen3VLMoeConfig")
    check_hf_fields(TEXT_RULES, text, "Qwen3VLMoeConfig.text_config")
    check_hf_fields(VISION_RULES, vision, "Qwen3VLMoeConfig.vision_config")
    tie = bool(cfg.get("tie_word_embeddings", text.get("tie_word_embeddings", False)))
    ids = {k: cfg[k] for k in _IDS if cfg.get(k) is not None}
    return Qwen3VLMoeConfig(text=_text(text, tie), vision=_vision(vision), mrope_section=_rope(text)["mrope_section"],
                            **ids)


def config_to_hf(config: Qwen3VLMoeConfig) -> Dict[str, Any]:
    """The ``config.json`` dictionary ``transformers.Qwen3VLMoeConfig(**d)`` reads back to the same model."""
    from hyper_parallel.models.qwen3_vl.state_dict_adapter import config_to_hf as dense  # noqa  # pylint: disable=C0415
    t, moe = config.text, config.text.moe
    out = dense(config)
    out.update(architectures=["Qwen3VLMoeForConditionalGeneration"], model_type="qwen3_vl_moe")
    out["text_config"].update(model_type="qwen3_vl_moe_text", moe_intermediate_size=moe.hidden_dim,
                              num_experts=moe.num_experts, num_experts_per_tok=moe.top_k, decoder_sparse_step=1,
                              mlp_only_layers=list(range(t.first_k_dense_layers)),
                              router_aux_loss_coef=moe.aux_loss_coeff)
    out["vision_config"]["model_type"] = "qwen3_vl_moe_vision"
    return out


_OURS = re.compile(r"^(model\.language_model\.layers\.\d+\.mlp)\.(router\.gate\.weight|experts\.gate_proj|"
                   r"experts\.up_proj|expert_bias)$")
_THEIRS = re.compile(r"^(model\.language_model\.layers\.\d+\.mlp)\.(gate\.weight|experts\.gate_up_proj)$")


def to_hf(state_dict: Mapping[str, Any], config: Qwen3VLMoeConfig) -> Dict[str, Any]:
    """Our state dict -> Hugging Face ``Qwen3VLMoeForConditionalGeneration`` names and layouts (the vision
    blocks' fused ``qkv``: :func:`~hyper_parallel.models.qwen3_vl.state_dict_adapter.vision_qkv_to_hf`)."""
    import torch  # pylint: disable=import-outside-toplevel
    out: Dict[str, Any] = {}
    state_dict = vision_qkv_to_hf(state_dict)
    for key, value in state_dict.items():
        m = _OURS.match(key)
        if m is None:
            out[key] = value
        elif m.group(2) == "router.gate.weight":
            out[f"{m.group(1)}.gate.weight"] = value
        elif m.group(2) == "experts.gate_proj":
            out[f"{m.group(1)}.experts.gate_up_proj"] = torch.cat(
                [value, state_dict[f"{m.group(1)}.experts.up_proj"]], dim=1)
        elif m.group(2) == "expert_bias" and bool(value.any()):
            raise ValueError(f"to_hf: {key} is not zero: Hugging Face's Qwen3-VL-MoE has no expert bias (the model "
                             f"was balanced aux-loss-free); it cannot be exported")
    if config.text.tie_word_embeddings:
        out.pop("lm_head.weight", None)
    return out


def from_hf(hf_state_dict: Mapping[str, Any], config: Qwen3VLMoeConfig) -> Dict[str, Any]:
    """Hugging Face names and layouts -> our state dict (the vision blocks' ``qkv`` split, expert biases zero;
    a tied head is the embedding)."""
    import torch  # pylint: disable=import-outside-toplevel
    out: Dict[str, Any] = {}
    inner = config.text.moe.hidden_dim
    for key, value in vision_qkv_from_hf(hf_state_dict).items():
        m = _THEIRS.match(key)
        if m is None:
            out[key] = value
        elif m.group(2) == "gate.weight":
            out[f"{m.group(1)}.router.gate.weight"] = value
            out[f"{m.group(1)}.expert_bias"] = torch.zeros(value.shape[0], dtype=torch.float32)
        else:
            if value.shape[1] != 2 * inner:
                raise ValueError(f"from_hf: {key} has shape {tuple(value.shape)}; expected [experts, 2 x "
                                 f"moe_intermediate_size {inner}, hidden]")
            out[f"{m.group(1)}.experts.gate_proj"] = value[:, :inner].clone()
            out[f"{m.group(1)}.experts.up_proj"] = value[:, inner:].clone()
    if config.text.tie_word_embeddings:
        out["lm_head.weight"] = out["model.language_model.embed_tokens.weight"]
    return out


class Qwen3VLMoeStateDictAdapter(Qwen3VLStateDictAdapter):
    """The registry's adapter of Qwen3-VL-MoE (``[model] init_from`` / ``[checkpoint] export_hf``):
    :func:`to_hf` / :func:`from_hf` and :func:`config_from_hf` / :func:`config_to_hf`."""

    hf_architecture = "Qwen3VLMoeForConditionalGeneration"

    @staticmethod
    def config_writer(config: Any) -> Dict[str, Any]:
        """:func:`config_to_hf` of this module."""
        return config_to_hf(config)

    @staticmethod
    def config_reader(hf_config: Any) -> Qwen3VLMoeConfig:
        """:func:`config_from_hf` of this module."""
        return config_from_hf(hf_config)

    def to_hf(self, state_dict: Mapping[str, Any]) -> Dict[str, Any]:
        """Our keys -> Hugging Face keys and layouts (:func:`to_hf`)."""
        return to_hf(state_dict, self.model_config)

    def from_hf(self, hf_sd: Mapping[str, Any]) -> Dict[str, Any]:
        """Hugging Face keys and layouts -> ours (:func:`from_hf`)."""
        return from_hf(hf_sd, self.model_config)
