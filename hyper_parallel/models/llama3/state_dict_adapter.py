# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Hugging Face adapter of the Llama model (``hyper_parallel.checkpoint.StateDictAdapter``).

The model already uses Hugging Face's ``LlamaForCausalLM`` parameter names, so the adapter is a strict
renaming table onto the same names (a key outside it is an error, not a silent pass-through), plus
``config.json`` for exports and tied embeddings: with ``tie_word_embeddings`` Hugging Face stores no
``lm_head.weight``, and loading ties it back to the embedding.

The same adapter serves the models built on this decoder (Qwen3, Qwen3-MoE): QK-norm keys, and MoE
layers, whose routed experts we hold stacked (``mlp.experts.gate_proj`` ``[E, hidden, dim]``) while
Hugging Face checkpoints hold one ``nn.Linear`` per expert (``mlp.experts.{e}.gate_proj.weight``);
``mlp.router.gate.weight`` is their ``mlp.gate.weight`` and the expert bias their
``mlp.gate.e_score_correction_bias``.

Backend-free: the values may be torch tensors, MindSpore tensors or NumPy arrays; the two operations that make
new values (stacking experts, the zero expert bias) use the values' own framework (:func:`stack_values`,
:func:`zeros_like_family`), so the MindSpore models load Hugging Face folders through the same adapters
without importing torch.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any, Dict, List, Mapping, Optional, Tuple

from hyper_parallel.checkpoint.hf import KeyMapAdapter
from hyper_parallel.models.hf_fields import HFFieldRules, check_hf_fields, off
from hyper_parallel.models.llama3.args import HIDDEN_ACTS, LlamaConfig

__all__ = ["LlamaStateDictAdapter", "LLAMA_RULES", "LLAMA_FIELDS", "debug_adapter", "decoder_rules", "stack_experts",
           "unstack_experts", "stack_values", "zeros_like_family"]

_LAYER = "model.layers.{}."
#: (model key, Hugging Face key) rules; ``{}`` is the layer index.
LLAMA_RULES = [("model.embed_tokens.weight", "model.embed_tokens.weight"),
               ("model.norm.weight", "model.norm.weight"),
               ("lm_head.weight", "lm_head.weight")] + [
    (_LAYER + name, _LAYER + name) for name in (
        "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight",
        "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
        "input_layernorm.weight", "post_attention_layernorm.weight")]
_PROJS = ("gate_proj", "up_proj", "down_proj")

#: the Llama ``config.json`` fields (see ``hyper_parallel.models.hf_fields``)
LLAMA_FIELDS = HFFieldRules(
    honoured=("model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
              "num_attention_heads", "num_key_value_heads", "head_dim", "max_position_embeddings", "rms_norm_eps",
              "rope_parameters", "rope_scaling", "rope_theta", "tie_word_embeddings", "hidden_act"),
    refused={"attention_bias": (off, "biases on q/k/v/o are not implemented"),
             "mlp_bias": (off, "biases on the MLP projections are not implemented"),
             "attention_dropout": (lambda v: v in (0, 0.0, None), "attention dropout is not implemented (set 0.0)"),
             "hidden_act": (lambda v: v in HIDDEN_ACTS, f"the MLP activation is one of {sorted(HIDDEN_ACTS)}"),
             "quantization_config": (off, "quantized weights: dequantize the checkpoint first")})
_OUR_EXPERT = re.compile(r"^(model\.layers\.\d+\.mlp\.experts)\.(gate_proj|up_proj|down_proj)$")
_HF_EXPERT = re.compile(r"^(model\.layers\.\d+\.mlp\.experts)\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$")


def decoder_rules(qk_norm: bool = False, moe: bool = False, expert_bias: bool = False) -> List[Tuple[str, str]]:
    """The renaming rules of the Llama-family decoder: :data:`LLAMA_RULES` plus QK-norm and MoE
    (router, shared experts, expert bias) keys; stacked experts are handled by the adapter."""
    rules = list(LLAMA_RULES)
    if qk_norm:
        rules += [(_LAYER + f"self_attn.{n}.weight", _LAYER + f"self_attn.{n}.weight") for n in ("q_norm", "k_norm")]
    if moe:
        rules += [(_LAYER + "mlp.router.gate.weight", _LAYER + "mlp.gate.weight")]
        rules += [(_LAYER + f"mlp.shared_experts.{p}.weight", _LAYER + f"mlp.shared_experts.{p}.weight")
                  for p in _PROJS]
        if expert_bias:
            rules += [(_LAYER + "mlp.expert_bias", _LAYER + "mlp.gate.e_score_correction_bias")]
    return rules


def _framework(value: Any) -> str:
    """``"torch"``, ``"mindspore"`` or ``"numpy"`` (anything else) by the value's class or a base class (our
    DTensors subclass the framework's tensor), importing nothing."""
    for cls in type(value).__mro__:
        top = cls.__module__.split(".", 1)[0]
        if top in ("torch", "mindspore"):
            return top
    return "numpy"


def stack_values(values: List[Any]) -> Any:
    """``values`` stacked along a new first dim with their own framework (torch, MindSpore or NumPy)."""
    kind = _framework(values[0])
    if kind == "torch":
        import torch  # pylint: disable=import-outside-toplevel
        return torch.stack(values)
    if kind == "mindspore":
        from mindspore import ops  # pylint: disable=import-outside-toplevel
        return ops.stack(values)
    import numpy as np  # pylint: disable=import-outside-toplevel
    return np.stack([np.asarray(v) for v in values])


def zeros_like_family(example: Any, n: int) -> Any:
    """float32 zeros of shape ``[n]`` in ``example``'s framework."""
    kind = _framework(example)
    if kind == "torch":
        import torch  # pylint: disable=import-outside-toplevel
        return torch.zeros(n, dtype=torch.float32)
    import numpy as np  # pylint: disable=import-outside-toplevel
    if kind == "mindspore":
        import mindspore as ms  # pylint: disable=import-outside-toplevel
        return ms.Tensor(np.zeros(n, np.float32))
    return np.zeros(n, np.float32)


def unstack_experts(state_dict: Mapping[str, Any]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """Split ``state_dict`` into (the rest, Hugging Face per-expert weights ``...experts.{e}.{proj}.weight``
    cut from our stacked ``...experts.{proj}`` ``[E, ...]``)."""
    rest, experts = {}, {}
    for key, value in state_dict.items():
        m = _OUR_EXPERT.match(key)
        if m is None:
            rest[key] = value
            continue
        for e in range(value.shape[0]):
            experts[f"{m.group(1)}.{e}.{m.group(2)}.weight"] = value[e]
    return rest, experts


def stack_experts(hf_state_dict: Mapping[str, Any]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """Split ``hf_state_dict`` into (the rest, our stacked ``...experts.{proj}`` built from Hugging Face's
    per-expert weights, in their own framework); a missing expert index is an error naming the key."""
    rest, groups = {}, {}
    for key, value in hf_state_dict.items():
        m = _HF_EXPERT.match(key)
        if m is None:
            rest[key] = value
            continue
        groups.setdefault(f"{m.group(1)}.{m.group(3)}", {})[int(m.group(2))] = value
    stacked = {}
    for key, by_index in groups.items():
        missing = sorted(set(range(max(by_index) + 1)) - set(by_index))
        if missing:
            raise KeyError(f"from_hf: {key}: experts {missing} are missing from the Hugging Face state dict")
        stacked[key] = stack_values([by_index[e] for e in range(len(by_index))])
    return rest, stacked


class LlamaStateDictAdapter(KeyMapAdapter):
    """Llama-family model <-> Hugging Face (see the module docstring). Subclasses set
    ``hf_architecture`` / ``hf_model_type`` and extend :meth:`_hf_config` / :meth:`config_from_hf`."""

    hf_architecture = "LlamaForCausalLM"
    hf_model_type = "llama"
    config_cls = LlamaConfig
    #: the ``config.json`` field classification (``config_from_hf`` refuses what it cannot honour)
    hf_fields = LLAMA_FIELDS

    def __init__(self, config: LlamaConfig, dtype: Optional[str] = None) -> None:
        self.model_config = config
        self.dtype = dtype
        super().__init__(self._rules(), strict=True, config=self._hf_config())

    def _rules(self) -> List[Tuple[str, str]]:
        moe = self.model_config.moe
        return decoder_rules(self.model_config.qk_norm, moe is not None,
                             moe is not None and moe.uses_expert_bias)

    def _rope_parameters(self) -> Dict[str, Any]:
        c = self.model_config
        rope = {"rope_type": c.rope_type, "rope_theta": c.rope_theta}
        if c.rope_type == "llama3":
            rope.update(factor=c.rope_factor, low_freq_factor=c.rope_low_freq_factor,
                        high_freq_factor=c.rope_high_freq_factor,
                        original_max_position_embeddings=c.rope_original_max_position_embeddings)
        return rope

    def _hf_config(self) -> Dict[str, Any]:
        c = self.model_config
        out = {"architectures": [self.hf_architecture], "model_type": self.hf_model_type, "hidden_act": c.hidden_act,
               "vocab_size": c.vocab_size, "hidden_size": c.hidden_size, "intermediate_size": c.intermediate_size,
               "num_hidden_layers": c.num_hidden_layers, "num_attention_heads": c.num_attention_heads,
               "num_key_value_heads": c.num_key_value_heads, "head_dim": c.head_dim,
               "max_position_embeddings": c.max_position_embeddings, "rms_norm_eps": c.rms_norm_eps,
               "tie_word_embeddings": c.tie_word_embeddings, "rope_theta": c.rope_theta,
               "rope_parameters": self._rope_parameters(), "attention_bias": False, "mlp_bias": False}
        if self.dtype:
            out["torch_dtype"] = self.dtype
        return out

    def to_hf(self, state_dict):
        """Model keys -> Hugging Face keys (per-expert weights; no ``lm_head.weight`` with tied embeddings;
        no expert bias when the model does not balance by it)."""
        rest, experts = unstack_experts(state_dict)
        moe = self.model_config.moe
        if moe is not None and not moe.uses_expert_bias:
            rest = {k: v for k, v in rest.items() if not k.endswith(".mlp.expert_bias")}
        out = super().to_hf(rest)
        out.update(experts)
        if self.model_config.tie_word_embeddings:
            out.pop("lm_head.weight", None)
        return out

    def from_hf(self, hf_state_dict):
        """Hugging Face keys -> model keys (experts stacked; ``lm_head.weight`` is the embedding when tied)."""
        rest, stacked = stack_experts(hf_state_dict)
        out = super().from_hf(rest)
        out.update(stacked)
        c = self.model_config
        if c.moe is not None and not c.moe.uses_expert_bias:  # a buffer HF does not have: unused zeros
            for i in range(c.num_hidden_layers):
                gate = out.get(f"model.layers.{i}.mlp.router.gate.weight")
                if c.is_moe_layer(i) and gate is not None:
                    out[f"model.layers.{i}.mlp.expert_bias"] = zeros_like_family(gate, c.moe.num_experts)
        if self.model_config.tie_word_embeddings and "model.embed_tokens.weight" in out:
            out["lm_head.weight"] = out["model.embed_tokens.weight"]
        return out

    @classmethod
    def config_kwargs_from_hf(cls, hf_config: Dict[str, Any]) -> Dict[str, Any]:
        """Our config fields from a Hugging Face ``config.json`` dict (unknown keys ignored)."""
        names = {f.name for f in dataclasses.fields(cls.config_cls)}
        kwargs = {k: v for k, v in hf_config.items() if k in names and k != "moe"}
        rope = hf_config.get("rope_parameters") or hf_config.get("rope_scaling") or {}
        if "rope_theta" in rope:
            kwargs["rope_theta"] = rope["rope_theta"]
        if rope.get("rope_type", rope.get("type", "default")) == "llama3":
            kwargs.update(rope_type="llama3", rope_factor=rope["factor"], rope_low_freq_factor=rope["low_freq_factor"],
                          rope_high_freq_factor=rope["high_freq_factor"],
                          rope_original_max_position_embeddings=rope["original_max_position_embeddings"])
        elif rope.get("rope_type", rope.get("type", "default")) != "default":
            raise ValueError(f"config_from_hf: rope type {rope.get('rope_type')!r} is not supported by "
                             f"{cls.config_cls.__name__} (expected 'default' or 'llama3')")
        return kwargs

    @classmethod
    def config_from_hf(cls, hf_config: Dict[str, Any]) -> LlamaConfig:
        """A config from a Hugging Face ``config.json`` dict; a field the model cannot honour (see
        :attr:`hf_fields`) is refused with one line naming it and its value."""
        check_hf_fields(cls.hf_fields, hf_config, f"{cls.config_cls.__name__} from Hugging Face")
        return cls.config_cls(**cls.config_kwargs_from_hf(hf_config))


def debug_adapter() -> LlamaStateDictAdapter:
    """The adapter of the ``debug`` flavor (``hp-ckpt convert --adapter
    hyper_parallel.models.llama3.state_dict_adapter:debug_adapter``)."""
    from hyper_parallel.models.llama3.args import TINY_CONFIGS
    return LlamaStateDictAdapter(TINY_CONFIGS["debug"])
