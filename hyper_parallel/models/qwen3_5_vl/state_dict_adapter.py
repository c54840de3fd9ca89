# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Hugging Face ``Qwen3_5ForConditionalGeneration`` / ``Qwen3_5MoeForConditionalGeneration`` <-> ours.

The state dict, both ways bit-exact: the vision tower's ``model.visual.*`` tensors are the same on both sides but
the blocks' fused ``attn.qkv``, our ``attn.q_proj`` / ``k_proj`` / ``v_proj``
(:func:`~hyper_parallel.models.qwen3_vl.state_dict_adapter.vision_qkv_from_hf`);
the language model's ``model.language_model.*`` and ``lm_head.weight`` go through the text adapter
(:class:`~hyper_parallel.models.qwen3_5.state_dict_adapter.Qwen3_5StateDictAdapter` or the MoE one with
``text_prefix="model.language_model."``: the packed Gated DeltaNet ``in_proj_qkv`` / ``conv1d``, per-expert
weights, the router and shared-expert names; a tied ``lm_head.weight`` is left out on export).

The configuration: every ``config.json`` field of the three levels is honoured, irrelevant or refused with one
line naming the level, field and value (:mod:`hyper_parallel.models.hf_fields`): the top level by
:data:`TOP_RULES`, ``text_config`` by the text adapter's rules, ``vision_config`` by
:data:`~hyper_parallel.models.qwen3_vl.state_dict_adapter.VISION_RULES`.
"""
from __future__ import annotations
# pylint: disable=invalid-name  # Hugging Face's class names (Qwen3_5...) are the contract

from typing import Any, Dict, Mapping, Optional

from hyper_parallel.models.hf_fields import HFFieldRules, check_hf_fields
from hyper_parallel.models.qwen3_5.state_dict_adapter import Qwen3_5StateDictAdapter
from hyper_parallel.models.qwen3_5_moe.state_dict_adapter import Qwen3_5MoeStateDictAdapter
from hyper_parallel.models.qwen3_5_vl.args import Qwen3_5MoeVLConfig, Qwen3_5VLConfig
from hyper_parallel.models.qwen3_vl.state_dict_adapter import (BOOKKEEPING, VISION_HONOURED, _as_dict,
                                                               vision_config_from_hf, vision_qkv_from_hf,
                                                               vision_qkv_to_hf)

__all__ = ["TOP_RULES", "Qwen3_5VLStateDictAdapter", "Qwen3_5MoeVLStateDictAdapter"]

_IDS = ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id")
#: the top level of ``config.json``: the two sub-configurations, the special token ids and the head tying
TOP_RULES = HFFieldRules(honoured=("text_config", "vision_config", "tie_word_embeddings") + _IDS,
                         irrelevant={**BOOKKEEPING, "keys_to_ignore_at_inference": "generation bookkeeping"})
_VISUAL = "model.visual."
_TEXT = "model.language_model."


class Qwen3_5VLStateDictAdapter:
    """Qwen3.5 vision-language model <-> Hugging Face ``Qwen3_5ForConditionalGeneration`` (see the module
    docstring); ``dtype``: the ``torch_dtype`` written to ``config.json`` on export."""

    hf_architecture = "Qwen3_5ForConditionalGeneration"
    hf_model_type = "qwen3_5"
    config_cls = Qwen3_5VLConfig
    text_adapter_cls = Qwen3_5StateDictAdapter

    def __init__(self, config: Qwen3_5VLConfig, dtype: Optional[str] = None) -> None:
        if not isinstance(config, self.config_cls):
            raise TypeError(f"{type(self).__name__}(config): expected a {self.config_cls.__name__}, got "
                            f"{type(config).__name__}")
        self.model_config = config
        self.dtype = dtype
        self.text = self.text_adapter_cls(config.text, dtype, text_prefix=_TEXT)

    def to_hf(self, state_dict: Mapping[str, Any]) -> Dict[str, Any]:
        """Our keys -> Hugging Face keys (the vision tower's fused ``qkv``; the language model through the text
        adapter)."""
        visual = vision_qkv_to_hf({k: v for k, v in state_dict.items() if k.startswith(_VISUAL)})
        text = {("model." + k[len(_TEXT):] if k.startswith(_TEXT) else k): v
                for k, v in state_dict.items() if not k.startswith(_VISUAL)}
        out = self.text.to_hf(text)
        out.update(visual)
        return out

    def from_hf(self, hf_state_dict: Mapping[str, Any]) -> Dict[str, Any]:
        """Hugging Face keys -> ours (the vision ``qkv`` and the text ``in_proj_qkv`` / ``conv1d`` split, experts
        stacked, a tied head the embedding)."""
        visual = vision_qkv_from_hf({k: v for k, v in hf_state_dict.items() if k.startswith(_VISUAL)})
        out = self.text.from_hf({k: v for k, v in hf_state_dict.items() if not k.startswith(_VISUAL)})
        out = {(_TEXT + k[len("model."):] if k.startswith("model.") else k): v for k, v in out.items()}
        out.update(visual)
        return out

    def _vision_config(self) -> Dict[str, Any]:
        v = self.model_config.vision
        out = {k: getattr(v, k) for k in VISION_HONOURED if k != "deepstack_visual_indexes"}
        out["model_type"] = self.hf_model_type + "_vision"
        return out

    def hf_config(self) -> Dict[str, Any]:
        """The ``config.json`` dictionary transformers reads back to the same model."""
        c = self.model_config
        text = dict(self.text.hf_config())
        text.pop("architectures", None)
        out = {"architectures": [self.hf_architecture], "model_type": self.hf_model_type, "text_config": text,
               "vision_config": self._vision_config(), "tie_word_embeddings": c.text.tie_word_embeddings}
        out.update({k: getattr(c, k) for k in _IDS})
        if self.dtype:
            out["torch_dtype"] = self.dtype
        return out

    @classmethod
    def config_from_hf(cls, hf_config: Any) -> Qwen3_5VLConfig:
        """Our configuration from a Hugging Face ``Qwen3_5Config`` (or its ``to_dict()`` / ``config.json``); a
        refused field, or one known to none of the rules and not off, raises ``ValueError`` naming the level,
        field and value."""
        cfg = _as_dict(hf_config)
        name = cls.hf_architecture.replace("ForConditionalGeneration", "Config")
        check_hf_fields(TOP_RULES, cfg, name)
        text = dict(_as_dict(cfg.get("text_config") or {}))
        if "tie_word_embeddings" in cfg:  # the top level ties transformers' head
            text["tie_word_embeddings"] = bool(cfg["tie_word_embeddings"])
        try:
            text_cfg = cls.text_adapter_cls.config_from_hf(text)
        except ValueError as exc:
            raise ValueError(f"{name}.text_config: {exc}") from None
        vision = vision_config_from_hf(cfg.get("vision_config") or {}, f"{name}.vision_config")
        ids = {k: cfg[k] for k in _IDS if cfg.get(k) is not None}
        return cls.config_cls(text=text_cfg, vision=vision, **ids)


class Qwen3_5MoeVLStateDictAdapter(Qwen3_5VLStateDictAdapter):
    """Qwen3.5-MoE vision-language model <-> Hugging Face ``Qwen3_5MoeForConditionalGeneration``."""

    hf_architecture = "Qwen3_5MoeForConditionalGeneration"
    hf_model_type = "qwen3_5_moe"
    config_cls = Qwen3_5MoeVLConfig
    text_adapter_cls = Qwen3_5MoeStateDictAdapter
