# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Hugging Face ``Qwen3_5ForCausalLM`` adapter (``config.json`` model type ``qwen3_5_text``).

Names are Hugging Face's except the Gated DeltaNet's packed tensors, which we hold per section: ``to_hf``
concatenates ``in_proj_q`` / ``in_proj_k`` / ``in_proj_v`` into ``in_proj_qkv`` and ``conv_q`` / ``conv_k`` /
``conv_v`` into ``conv1d`` (``[q | k | v]`` along dim 0), ``from_hf`` splits them (views: bit-exact both
ways). Every ``config.json`` field is honoured, irrelevant or refused with one line naming it
(:data:`QWEN3_5_FIELDS`, the same mechanism as the other models). ``text_prefix="model.language_model."`` reads and
writes the text model of a ``Qwen3_5ForConditionalGeneration`` checkpoint (the published ones);
:meth:`Qwen3_5StateDictAdapter.for_hf_config` picks it from a folder's ``config.json`` (one with a
``text_config``), so ``[model] name = "qwen3_5"`` trains the language model of such a folder (its
``model.visual.*`` tensors are not read) and exports a text-only ``Qwen3_5ForCausalLM`` folder.
"""
from __future__ import annotations
# pylint: disable=invalid-name  # Hugging Face's class names (Qwen3_5...) are the contract

import re
from typing import Any, Dict, List, Optional, Tuple

from hyper_parallel.models.hf_fields import HFFieldRules, check_hf_fields, off
from hyper_parallel.models.llama3.state_dict_adapter import LlamaStateDictAdapter, decoder_rules
from hyper_parallel.models.qwen3_5.args import Qwen3_5Config

__all__ = ["Qwen3_5StateDictAdapter", "QWEN3_5_FIELDS", "VL_TEXT_PREFIX"]

_LAYER = "model.layers.{}."
#: where a ``Qwen3_5ForConditionalGeneration`` checkpoint keeps its language model (``lm_head.weight`` at the top)
VL_TEXT_PREFIX = "model.language_model."
_LINEAR = ("in_proj_z.weight", "in_proj_b.weight", "in_proj_a.weight", "out_proj.weight", "dt_bias", "A_log",
           "norm.weight")
_SECTIONS = re.compile(r"^(model\.layers\.\d+\.linear_attn)\.(in_proj|conv)_([qkv])\.weight$")
_PACKED = re.compile(r"^(model\.layers\.\d+\.linear_attn)\.(in_proj_qkv|conv1d)\.weight$")

#: the Qwen3.5 text ``config.json`` fields (see ``hyper_parallel.models.hf_fields``); rope values are checked
#: inside ``rope_parameters`` (:meth:`Qwen3_5StateDictAdapter._rope_kwargs`)
QWEN3_5_FIELDS = HFFieldRules(
    honoured=("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads", "head_dim", "max_position_embeddings", "rms_norm_eps", "tie_word_embeddings",
              "hidden_act", "layer_types", "full_attention_interval", "linear_conv_kernel_dim", "linear_key_head_dim",
              "linear_value_head_dim", "linear_num_key_heads", "linear_num_value_heads", "rope_parameters",
              "rope_scaling", "rope_theta", "partial_rotary_factor", "model_type"),
    irrelevant={"mtp_num_hidden_layers": "the multi-token-prediction layers: transformers drops them too",
                "mtp_use_dedicated_embeddings": "the multi-token-prediction layers: transformers drops them too",
                "keys_to_ignore_at_inference": "generation bookkeeping"},
    refused={"hidden_act": (lambda v: v == "silu", "the gated MLP and the linear-attention gate use silu"),
             "attention_bias": (off, "the attention projections have no bias"),
             "attention_dropout": (off, "no attention dropout"),
             "attn_output_gate": (lambda v: v is True, "the full-attention output gate is always on"),
             "mamba_ssm_dtype": (lambda v: v == "float32", "the delta-rule state is kept in float32"),
             "layer_types": (lambda v: all(t in ("linear_attention", "full_attention") for t in v),
                             "layers are linear_attention or full_attention")})
#: the ``rope_parameters`` entries accepted only with these values (anything else is refused by name)
_FIXED = {"mrope_interleaved": (True,), "rope_type": ("default",), "type": ("default",)}
_ROPE_FIELDS = {"rope_theta", "partial_rotary_factor", "mrope_section", "rope_type", "type", "mrope_interleaved"}


def text_config_of(hf_config: Dict[str, Any]) -> Dict[str, Any]:
    """The language model's ``config.json`` fields: ``hf_config`` itself, or the ``text_config`` of a
    ``Qwen3_5ForConditionalGeneration`` config with its top-level ``tie_word_embeddings`` (which ties the head)."""
    text = hf_config.get("text_config")
    if not isinstance(text, dict):
        return hf_config
    if "tie_word_embeddings" in hf_config:
        return dict(text, tie_word_embeddings=bool(hf_config["tie_word_embeddings"]))
    return text


def _check_fixed(where: str, key: str, value: Any) -> None:
    if key in _FIXED and value not in _FIXED[key]:
        raise ValueError(f"{where}: {key}={value!r} is not supported (expected one of {list(_FIXED[key])})")


class Qwen3_5StateDictAdapter(LlamaStateDictAdapter):
    """Qwen3.5 <-> Hugging Face ``Qwen3_5ForCausalLM`` (see the module docstring)."""

    hf_architecture = "Qwen3_5ForCausalLM"
    hf_model_type = "qwen3_5_text"
    config_cls = Qwen3_5Config
    hf_fields = QWEN3_5_FIELDS

    def __init__(self, config: Qwen3_5Config, dtype: Optional[str] = None, text_prefix: str = "model.") -> None:
        self.text_prefix = text_prefix
        super().__init__(config, dtype)

    @classmethod
    def for_hf_config(cls, config: Qwen3_5Config, hf_config: Dict[str, Any],
                      dtype: Optional[str] = None) -> "Qwen3_5StateDictAdapter":
        """The adapter that reads the checkpoint of ``hf_config`` (a ``config.json`` dict): a vision-language
        one (with a ``text_config``) keeps the language model under :data:`VL_TEXT_PREFIX`."""
        vl = isinstance(hf_config.get("text_config"), dict)
        return cls(config, dtype, text_prefix=VL_TEXT_PREFIX if vl else "model.")

    def _rules(self) -> List[Tuple[str, str]]:
        rules = [r for r in decoder_rules(qk_norm=True) if "mlp." not in r[0] or self.model_config.moe is None]
        rules += [(_LAYER + f"linear_attn.{n}", _LAYER + f"linear_attn.{n}") for n in _LINEAR]
        if self.model_config.moe is not None:
            rules += [(_LAYER + "mlp.router.gate.weight", _LAYER + "mlp.gate.weight"),
                      (_LAYER + "mlp.shared_experts.expert_gate.weight", _LAYER + "mlp.shared_expert_gate.weight")]
            rules += [(_LAYER + f"mlp.shared_experts.{p}.weight", _LAYER + f"mlp.shared_expert.{p}.weight")
                      for p in ("gate_proj", "up_proj", "down_proj")]
        return rules

    def _rope_parameters(self) -> Dict[str, Any]:
        c = self.model_config
        return {"rope_type": "default", "rope_theta": c.rope_theta, "partial_rotary_factor": c.partial_rotary_factor,
                "mrope_section": list(c.mrope_section), "mrope_interleaved": True}

    def _hf_config(self) -> Dict[str, Any]:
        out = super()._hf_config()
        c = self.model_config
        for key in ("rope_theta", "mlp_bias"):
            out.pop(key, None)
        out.update(layer_types=list(c.layer_types), linear_conv_kernel_dim=c.linear_conv_kernel_dim,
                   linear_key_head_dim=c.linear_key_head_dim, linear_value_head_dim=c.linear_value_head_dim,
                   linear_num_key_heads=c.linear_num_key_heads, linear_num_value_heads=c.linear_num_value_heads,
                   attention_dropout=0.0)
        return out

    def _sizes(self) -> Tuple[int, int, int]:
        c = self.model_config
        key = c.linear_num_key_heads * c.linear_key_head_dim
        return key, key, c.linear_num_value_heads * c.linear_value_head_dim

    def _prefixed(self, sd: Dict[str, Any], old: str, new: str) -> Dict[str, Any]:
        if old == new:
            return sd
        return {(new + k[len(old):] if k.startswith(old) else k): v for k, v in sd.items()}

    def to_hf(self, state_dict):
        """Model keys -> Hugging Face keys (packed ``in_proj_qkv`` / ``conv1d``; see the module docstring)."""
        import torch
        rest, groups = {}, {}
        for key, value in state_dict.items():
            m = _SECTIONS.match(key)
            if m is None:
                rest[key] = value
            else:
                name = "in_proj_qkv" if m.group(2) == "in_proj" else "conv1d"
                groups.setdefault(f"{m.group(1)}.{name}.weight", {})[m.group(3)] = value
        out = super().to_hf(rest)
        for key, parts in groups.items():
            if sorted(parts) != ["k", "q", "v"]:
                raise KeyError(f"to_hf: {key}: sections {sorted(parts)} of q, k, v are present")
            full = [p.full_tensor() if hasattr(p, "full_tensor") else p for p in (parts["q"], parts["k"], parts["v"])]
            out[key] = torch.cat(full, dim=0)
        return self._prefixed(out, "model.", self.text_prefix)

    def from_hf(self, hf_state_dict):
        """Hugging Face keys -> model keys (``in_proj_qkv`` / ``conv1d`` split into their q, k, v sections)."""
        hf_state_dict = self._prefixed(dict(hf_state_dict), self.text_prefix, "model.")
        rest, packed = {}, {}
        for key, value in hf_state_dict.items():
            m = _PACKED.match(key)
            if m is None:
                rest[key] = value
                continue
            expected = sum(self._sizes())
            if value.shape[0] != expected:
                raise ValueError(f"from_hf: {key} has {value.shape[0]} rows; the config's q, k, v sections need "
                                 f"{expected}")
            stem = "in_proj" if m.group(2) == "in_proj_qkv" else "conv"
            for name, part in zip("qkv", value.split(list(self._sizes()), dim=0)):
                packed[f"{m.group(1)}.{stem}_{name}.weight"] = part
        out = super().from_hf(rest)
        out.update(packed)
        return out

    @classmethod
    def _rope_kwargs(cls, hf_config: Dict[str, Any], where: str) -> Dict[str, Any]:
        rope = dict(hf_config.get("rope_parameters") or hf_config.get("rope_scaling") or {})
        for key in ("rope_theta", "partial_rotary_factor"):  # the legacy top-level spellings
            if key in hf_config and key not in rope:
                rope[key] = hf_config[key]
        unknown = sorted(set(rope) - _ROPE_FIELDS)
        if unknown:
            raise ValueError(f"{where}: rope_parameters fields {unknown} are not supported (known: "
                             f"{sorted(_ROPE_FIELDS)})")
        for key, value in rope.items():
            _check_fixed(where, key, value)
        out = {k: rope[k] for k in ("rope_theta", "partial_rotary_factor") if k in rope}
        if "mrope_section" in rope:
            out["mrope_section"] = tuple(rope["mrope_section"])
        return out

    @classmethod
    def config_from_hf(cls, hf_config: Dict[str, Any]):
        """A config from a Hugging Face ``config.json`` dict (see :meth:`config_kwargs_from_hf`)."""
        return cls.config_cls(**cls.config_kwargs_from_hf(hf_config))

    @classmethod
    def config_kwargs_from_hf(cls, hf_config: Dict[str, Any]) -> Dict[str, Any]:
        """Our config fields from a Hugging Face ``config.json`` dict (a ``Qwen3_5ForConditionalGeneration``
        config's ``text_config`` is used); every field is classified by :data:`QWEN3_5_FIELDS`: an unknown field
        (unless off) or an unsupported value is refused in one line naming it."""
        hf_config = text_config_of(hf_config)
        where = f"{cls.config_cls.__name__} from Hugging Face"
        check_hf_fields(cls.hf_fields, hf_config, where)
        import dataclasses
        names = {f.name for f in dataclasses.fields(cls.config_cls)}
        kwargs = {k: v for k, v in hf_config.items()
                  if k in names and k not in ("moe", "rope_theta", "partial_rotary_factor")}
        if "layer_types" in kwargs:
            kwargs["layer_types"] = tuple(kwargs["layer_types"])
        kwargs.update(cls._rope_kwargs(hf_config, where))
        return kwargs
