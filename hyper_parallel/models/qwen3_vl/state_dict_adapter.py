# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Hugging Face ``Qwen3VLConfig`` <-> :class:`Qwen3VLConfig`. Parameter names are Hugging Face's
(``model.visual.*``, ``model.language_model.*``, ``lm_head.weight``) but for the vision blocks' attention input
projection: Hugging Face's fused ``attn.qkv`` is our ``attn.q_proj`` / ``k_proj`` / ``v_proj`` (split on import,
concatenated on export, bit-exact: :func:`vision_qkv_from_hf` / :func:`vision_qkv_to_hf`; separate projections let
tensor parallel shard them by heads); a tied ``lm_head.weight`` is left out on export as ``save_pretrained`` does.

Every field of the Hugging Face configuration is honoured, listed as irrelevant to training, or refused by
:func:`config_from_hf` with one line naming the field and its value.
"""
from __future__ import annotations

import re
from typing import Any, Dict, Mapping

from hyper_parallel.models.hf_fields import HFFieldRules, check_hf_fields
from hyper_parallel.models.qwen3.args import Qwen3Config
from hyper_parallel.models.qwen3_vl.args import Qwen3VLConfig, Qwen3VLVisionConfig

__all__ = ["config_from_hf", "config_to_hf", "TEXT_HONOURED", "VISION_HONOURED", "IRRELEVANT", "hf_state_dict",
           "VISION_RULES", "BOOKKEEPING", "vision_config_from_hf", "vision_qkv_from_hf", "vision_qkv_to_hf",
           "Qwen3VLStateDictAdapter"]

#: text fields mapped onto :class:`Qwen3Config`
TEXT_HONOURED = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                 "num_key_value_heads", "head_dim", "max_position_embeddings", "rms_norm_eps")
#: vision fields mapped onto :class:`Qwen3VLVisionConfig`
VISION_HONOURED = ("depth", "hidden_size", "hidden_act", "intermediate_size", "num_heads", "in_channels",
                   "patch_size", "spatial_merge_size", "temporal_patch_size", "out_hidden_size",
                   "num_position_embeddings", "deepstack_visual_indexes")
#: fields that do not change the trained function (initialisation, inference cache, bookkeeping)
IRRELEVANT = ("initializer_range", "use_cache", "pad_token_id", "bos_token_id", "eos_token_id", "dtype",
              "torch_dtype", "model_type", "architectures", "transformers_version", "attention_dropout",
              "output_attentions", "output_hidden_states", "return_dict", "base_config_key", "_name_or_path",
              "chunk_size_feed_forward", "is_encoder_decoder", "id2label", "label2id", "problem_type",
              "tokenizer_class", "task_specific_params", "tie_encoder_decoder", "_attn_implementation")


def _as_dict(cfg: Any) -> Dict[str, Any]:
    return dict(cfg) if isinstance(cfg, Mapping) else cfg.to_dict()


def _refuse(where: str, key: str, value: Any, why: str) -> None:
    raise ValueError(f"config_from_hf: {where}.{key}={value!r} is not supported ({why})")


def _rope(text: Mapping[str, Any]) -> Dict[str, Any]:
    rope = dict(text.get("rope_parameters") or text.get("rope_scaling") or {})
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind != "default":
        _refuse("text_config", "rope_parameters.rope_type", kind, "only the default MRoPE is implemented")
    if rope.get("mrope_interleaved", True) is not True:
        _refuse("text_config", "rope_parameters.mrope_interleaved", rope.get("mrope_interleaved"),
                "Qwen3-VL's MRoPE is interleaved")
    theta = rope.get("rope_theta", text.get("rope_theta", 500000.0))
    return {"rope_theta": float(theta), "mrope_section": tuple(rope.get("mrope_section", (24, 20, 20)))}


def _text(text: Mapping[str, Any], tie: bool) -> Qwen3Config:
    if text.get("hidden_act", "silu") != "silu":
        _refuse("text_config", "hidden_act", text.get("hidden_act"), "the decoder's MLP is SwiGLU")
    if text.get("attention_bias"):
        _refuse("text_config", "attention_bias", True, "the attention projections have no bias")
    kwargs = {k: text[k] for k in TEXT_HONOURED if text.get(k) is not None}
    return Qwen3Config(tie_word_embeddings=tie, rope_theta=_rope(text)["rope_theta"], **kwargs)


def _vision(vision: Mapping[str, Any]) -> Qwen3VLVisionConfig:
    for key in ("patch_size", "temporal_patch_size"):
        if not isinstance(vision.get(key, 1), int):
            _refuse("vision_config", key, vision.get(key), "a single int is implemented")
    kwargs = {k: vision[k] for k in VISION_HONOURED if vision.get(k) is not None}
    kwargs["deepstack_visual_indexes"] = tuple(kwargs.get("deepstack_visual_indexes", (8, 16, 24)))
    rope = dict(vision.get("rope_parameters") or {})
    if rope.get("rope_type", "axial") != "axial":
        _refuse("vision_config", "rope_parameters.rope_type", rope.get("rope_type"), "the vision rotary is axial")
    return Qwen3VLVisionConfig(rope_theta=float(rope.get("rope_theta", 10000.0)), **kwargs)


def config_from_hf(hf_config: Any) -> Qwen3VLConfig:
    """Our configuration from a ``transformers.Qwen3VLConfig`` (or its ``to_dict()``); unsupported settings
    raise ``ValueError`` naming the field and value."""
    cfg = _as_dict(hf_config)
    text, vision = _as_dict(cfg.get("text_config") or {}), _as_dict(cfg.get("vision_config") or {})
    tie = bool(cfg.get("tie_word_embeddings", text.get("tie_word_embeddings", False)))
    ids = {k: cfg[k] for k in ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id")
           if cfg.get(k) is not None}
    return Qwen3VLConfig(text=_text(text, tie), vision=_vision(vision), mrope_section=_rope(text)["mrope_section"],
                         **ids)


def config_to_hf(config: Qwen3VLConfig) -> Dict[str, Any]:
    """The ``config.json`` dictionary ``transformers.Qwen3VLConfig(**d)`` reads back to the same model."""
    t, v = config.text, config.vision
    text = {k: getattr(t, k) for k in TEXT_HONOURED}
    text.update(hidden_act="silu", attention_bias=False, model_type="qwen3_vl_text",
                rope_parameters={"rope_type": "default", "rope_theta": t.rope_theta,
                                 "mrope_section": list(config.mrope_section), "mrope_interleaved": True})
    vision = {k: getattr(v, k) for k in VISION_HONOURED}
    vision.update(deepstack_visual_indexes=list(v.deepstack_visual_indexes), model_type="qwen3_vl_vision",
                  rope_parameters={"rope_type": "axial", "rope_theta": v.rope_theta})
    return {"architectures": ["Qwen3VLForConditionalGeneration"], "model_type": "qwen3_vl", "text_config": text,
            "vision_config": vision, "image_token_id": config.image_token_id,
            "video_token_id": config.video_token_id, "vision_start_token_id": config.vision_start_token_id,
            "vision_end_token_id": config.vision_end_token_id, "tie_word_embeddings": t.tie_word_embeddings}


#: a vision block's fused (Hugging Face) or split (ours) attention input projection, with any prefix
_HF_QKV = re.compile(r"^(.*\bblocks\.\d+\.attn)\.qkv\.(weight|bias)$")
_OUR_QKV = re.compile(r"^(.*\bblocks\.\d+\.attn)\.q_proj\.(weight|bias)$")
_OUR_KV = re.compile(r"^.*\bblocks\.\d+\.attn\.[kv]_proj\.(weight|bias)$")
_SPLIT = ("q_proj", "k_proj", "v_proj")


def vision_qkv_from_hf(hf_sd: Mapping[str, Any]) -> Dict[str, Any]:
    """Hugging Face's fused vision ``<prefix>blocks.<i>.attn.qkv.{weight,bias}`` (rows laid out ``[3, heads,
    head_dim]``) split into our ``q_proj`` / ``k_proj`` / ``v_proj`` (copies of the three row blocks, so the result
    saves as separate tensors); every other entry unchanged."""
    out: Dict[str, Any] = {}
    for key, value in hf_sd.items():
        m = _HF_QKV.match(key)
        if m is None:
            out[key] = value
            continue
        if value.shape[0] % 3:
            raise ValueError(f"vision_qkv_from_hf: {key} has shape {tuple(value.shape)}; expected 3 x hidden_size rows "
                             f"(q, k, v)")
        for name, part in zip(_SPLIT, value.chunk(3, dim=0)):
            out[f"{m.group(1)}.{name}.{m.group(2)}"] = part.clone()
    return out


def vision_qkv_to_hf(state_dict: Mapping[str, Any]) -> Dict[str, Any]:
    """Our vision ``q_proj`` / ``k_proj`` / ``v_proj`` concatenated into Hugging Face's fused ``qkv`` (the inverse of
    :func:`vision_qkv_from_hf`, bit-exact); every other entry unchanged."""
    import torch  # pylint: disable=import-outside-toplevel
    out: Dict[str, Any] = {}
    for key, value in state_dict.items():
        m = _OUR_QKV.match(key)
        if m is not None:
            parts = [f"{m.group(1)}.{name}.{m.group(2)}" for name in _SPLIT]
            missing = [p for p in parts if p not in state_dict]
            if missing:
                raise ValueError(f"vision_qkv_to_hf: {key} without {missing[0]} (the fused qkv needs all three)")
            out[f"{m.group(1)}.qkv.{m.group(2)}"] = torch.cat([state_dict[p] for p in parts], dim=0)
        elif _OUR_KV.match(key) is None:  # k_proj / v_proj are folded into qkv with their q_proj
            out[key] = value
    return out


def hf_state_dict(state_dict: Mapping[str, Any], config: Qwen3VLConfig) -> Dict[str, Any]:
    """Our state dict as ``save_pretrained`` writes it: the same names but the vision blocks' fused ``qkv``
    (:func:`vision_qkv_to_hf`), the tied ``lm_head.weight`` left out."""
    out = vision_qkv_to_hf(state_dict)
    if config.text.tie_word_embeddings:
        out.pop("lm_head.weight", None)
    return out


#: transformers' bookkeeping fields of (sub-)configurations
BOOKKEEPING = {"model_type": "the class name of the (sub-)configuration", "base_config_key": "transformers' "
               "bookkeeping of sub-configurations", "_attn_implementation": "the attention kernel: same values"}
#: ``vision_config`` of Qwen3-VL, Qwen3-VL-MoE and Qwen3.5 / Qwen3.5-MoE (the same ViT; Qwen3.5's has no
#: DeepStack): every field honoured, irrelevant or refused (:mod:`hyper_parallel.models.hf_fields`)
VISION_RULES = HFFieldRules(
    honoured=VISION_HONOURED + ("rope_parameters",),
    irrelevant={**BOOKKEEPING, "num_hidden_layers": "an alias of depth"},
    refused={"hidden_act": (lambda v: v in ("gelu_pytorch_tanh", "gelu", "silu", "quick_gelu"),
                            "the vision MLP implements gelu_pytorch_tanh, gelu, silu and quick_gelu")})


def vision_config_from_hf(vision_config: Any, what: str = "vision_config") -> Qwen3VLVisionConfig:
    """:class:`Qwen3VLVisionConfig` of a Hugging Face vision config (Qwen3-VL's, or Qwen3.5's
    ``Qwen3_5VisionConfig``: no ``deepstack_visual_indexes`` there means no DeepStack); every field checked by
    :data:`VISION_RULES` (one line naming ``what``, the field and the value when refused)."""
    vision = _as_dict(vision_config)
    check_hf_fields(VISION_RULES, vision, what)
    return _vision({**vision, "deepstack_visual_indexes": list(vision.get("deepstack_visual_indexes") or [])})


class Qwen3VLStateDictAdapter:
    """The registry's adapter of Qwen3-VL (``[model] init_from`` / ``[checkpoint] export_hf``): names are
    already Hugging Face's (:func:`hf_state_dict`: a tied head left out on export, the embedding on import);
    ``config_from_hf`` / ``hf_config``: :func:`config_from_hf` / :func:`config_to_hf`."""

    hf_architecture = "Qwen3VLForConditionalGeneration"

    @staticmethod
    def config_writer(config: Any) -> Dict[str, Any]:
        """:func:`config_to_hf` of this module."""
        return config_to_hf(config)

    @staticmethod
    def config_reader(hf_config: Any) -> Qwen3VLConfig:
        """:func:`config_from_hf` of this module."""
        return config_from_hf(hf_config)

    def __init__(self, config: Qwen3VLConfig, dtype: Any = None) -> None:
        self.model_config = config
        self.dtype = dtype

    def to_hf(self, state_dict: Mapping[str, Any]) -> Dict[str, Any]:
        """Our keys -> Hugging Face keys (the same names but the vision blocks' fused ``qkv``; no
        ``lm_head.weight`` when tied)."""
        return hf_state_dict(state_dict, self.model_config)

    def from_hf(self, hf_sd: Mapping[str, Any]) -> Dict[str, Any]:
        """Hugging Face keys -> ours (the vision blocks' ``qkv`` split: :func:`vision_qkv_from_hf`; a tied
        ``lm_head.weight`` is the embedding)."""
        out = vision_qkv_from_hf(hf_sd)
        if self.model_config.text.tie_word_embeddings and "model.language_model.embed_tokens.weight" in out:
            out["lm_head.weight"] = out["model.language_model.embed_tokens.weight"]
        return out

    def hf_config(self) -> Dict[str, Any]:
        """The ``config.json`` dictionary (the class's config writer: :func:`config_to_hf` here)."""
        out = type(self).config_writer(self.model_config)
        if self.dtype:
            out["torch_dtype"] = self.dtype
        return out

    @classmethod
    def config_from_hf(cls, hf_config: Any) -> Any:
        """The class's config reader (:func:`config_from_hf` here)."""
        return cls.config_reader(hf_config)
