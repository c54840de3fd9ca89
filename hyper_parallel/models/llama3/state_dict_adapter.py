# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Hugging Face key adapter of the Llama model (``hyper_parallel.checkpoint.StateDictAdapter``).

The model already uses Hugging Face's ``LlamaForCausalLM`` parameter names, so the adapter is a strict
renaming table onto the same names (a key outside it is an error, not a silent pass-through), plus
``config.json`` for exports and tied embeddings: with ``tie_word_embeddings`` Hugging Face stores no
``lm_head.weight``, and loading ties it back to the embedding.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Dict, Optional

from hyper_parallel.checkpoint.hf import KeyMapAdapter
from hyper_parallel.models.llama3.args import LlamaConfig

__all__ = ["LlamaStateDictAdapter", "LLAMA_RULES", "debug_adapter"]

_LAYER = "model.layers.{}."
#: (model key, Hugging Face key) rules; ``{}`` is the layer index.
LLAMA_RULES = [("model.embed_tokens.weight", "model.embed_tokens.weight"),
               ("model.norm.weight", "model.norm.weight"),
               ("lm_head.weight", "lm_head.weight")] + [
    (_LAYER + name, _LAYER + name) for name in (
        "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight",
        "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
        "input_layernorm.weight", "post_attention_layernorm.weight")]


class LlamaStateDictAdapter(KeyMapAdapter):
    """Llama <-> Hugging Face ``LlamaForCausalLM`` (see the module docstring)."""

    def __init__(self, config: LlamaConfig, dtype: Optional[str] = None) -> None:
        self.model_config = config
        self.dtype = dtype
        super().__init__(LLAMA_RULES, strict=True, config=self._hf_config())

    def _hf_config(self) -> Dict[str, Any]:
        c = self.model_config
        out = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
               "head_dim": c.head_dim, **dataclasses.asdict(c)}
        if self.dtype:
            out["torch_dtype"] = self.dtype
        return out

    def to_hf(self, state_dict):
        """Model keys -> Hugging Face keys (no ``lm_head.weight`` with tied embeddings)."""
        out = super().to_hf(state_dict)
        if self.model_config.tie_word_embeddings:
            out.pop("lm_head.weight", None)
        return out

    def from_hf(self, hf_state_dict):
        """Hugging Face keys -> model keys (``lm_head.weight`` is the embedding when tied)."""
        out = super().from_hf(hf_state_dict)
        if self.model_config.tie_word_embeddings and "model.embed_tokens.weight" in out:
            out["lm_head.weight"] = out["model.embed_tokens.weight"]
        return out

    @staticmethod
    def config_from_hf(hf_config: Dict[str, Any]) -> LlamaConfig:
        """A ``LlamaConfig`` from a Hugging Face ``config.json`` dict (unknown keys ignored)."""
        names = {f.name for f in dataclasses.fields(LlamaConfig)}
        return LlamaConfig(**{k: v for k, v in hf_config.items() if k in names})


def debug_adapter() -> LlamaStateDictAdapter:
    """The adapter of the ``debug`` flavor (``hp-ckpt convert --adapter
    hyper_parallel.models.llama3.state_dict_adapter:debug_adapter``)."""
    from hyper_parallel.models.llama3.args import TINY_CONFIGS
    return LlamaStateDictAdapter(TINY_CONFIGS["debug"])
