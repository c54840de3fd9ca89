# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Qwen3.5 (dense) configuration and flavor table (pure Python: no framework import).

Qwen3.5's text model is a hybrid: ``layer_types`` mixes ``"linear_attention"`` layers (Gated DeltaNet: a
causal depthwise conv1d over the packed q/k/v channels, L2-normalised q/k, a gated delta-rule recurrence
with ``linear_num_key_heads`` key heads and ``linear_num_value_heads`` value heads, a gated RMSNorm) with
``"full_attention"`` layers (GQA with a sigmoid output gate, per-head QK-norm, partial RoPE over
``partial_rotary_factor * head_dim`` dims, multimodal RoPE sections ``mrope_section``). Every RMSNorm of the
decoder is zero-centred (applied as ``1 + weight``). Field names are Hugging Face's ``Qwen3_5TextConfig``.
"""
from __future__ import annotations
# pylint: disable=invalid-name  # Hugging Face's class names (Qwen3_5...) are the contract

from dataclasses import dataclass, field
from typing import Dict, Tuple

from hyper_parallel.models.llama3.args import LlamaConfig

__all__ = ["Qwen3_5Config", "FLAVORS", "LAYER_TYPES", "hybrid_layer_types"]

#: the token mixers a decoder layer may use
LAYER_TYPES = ("linear_attention", "full_attention")


def hybrid_layer_types(num_layers: int, full_attention_interval: int = 4) -> Tuple[str, ...]:
    """Hugging Face's default pattern: every ``full_attention_interval``-th layer is full attention, the
    others linear attention (``interval=4``: L L L F L L L F ...)."""
    return tuple("full_attention" if (i + 1) % full_attention_interval == 0 else "linear_attention"
                 for i in range(num_layers))


@dataclass(frozen=True)
class Qwen3_5Config(LlamaConfig):  # pylint: disable=too-many-instance-attributes
    """Qwen3.5 text-model size (defaults: Hugging Face's ``Qwen3_5TextConfig()``). ``layer_types`` empty =
    :func:`hybrid_layer_types` of ``full_attention_interval``. ``chunk_size`` is the delta rule's chunk length
    (ours, not Hugging Face's: any value gives the same result up to fp32 rounding)."""

    vocab_size: int = 248320
    hidden_size: int = 4096
    intermediate_size: int = 12288
    num_hidden_layers: int = 32
    num_attention_heads: int = 16
    num_key_value_heads: int = 4
    head_dim: int = 256
    max_position_embeddings: int = 32768
    rope_theta: float = 10000.0
    qk_norm: bool = True
    layer_types: Tuple[str, ...] = ()
    #: only derives ``layer_types`` when that is empty (not compared: the layer types are)
    full_attention_interval: int = field(default=4, compare=False)
    linear_conv_kernel_dim: int = 4
    linear_key_head_dim: int = 128
    linear_value_head_dim: int = 128
    linear_num_key_heads: int = 16
    linear_num_value_heads: int = 32
    partial_rotary_factor: float = 0.25
    mrope_section: Tuple[int, ...] = (11, 11, 10)
    chunk_size: int = 64

    rope_types = ("default",)

    def __post_init__(self) -> None:
        super().__post_init__()
        name = type(self).__name__
        self._check_ints(name)
        types = tuple(self.layer_types) or hybrid_layer_types(self.num_hidden_layers, self.full_attention_interval)
        object.__setattr__(self, "layer_types", types)
        object.__setattr__(self, "mrope_section", tuple(self.mrope_section))
        self._check_layers(name, types)

    def _check_ints(self, name: str) -> None:
        for field_name in ("full_attention_interval", "linear_conv_kernel_dim", "linear_key_head_dim",
                           "linear_value_head_dim", "linear_num_key_heads", "linear_num_value_heads", "chunk_size"):
            value = getattr(self, field_name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}({field_name}): expected a positive int, got {value!r}")

    def _check_layers(self, name: str, types) -> None:
        bad = sorted({t for t in types if t not in LAYER_TYPES})
        if bad or len(types) != self.num_hidden_layers:
            raise ValueError(f"{name}(layer_types): expected {self.num_hidden_layers} entries from {LAYER_TYPES}, got "
                             f"{len(types)} entries{' with ' + str(bad) if bad else ''}")
        if self.linear_num_value_heads % self.linear_num_key_heads:
            raise ValueError(f"{name}: linear_num_value_heads={self.linear_num_value_heads} is not a multiple of "
                             f"linear_num_key_heads={self.linear_num_key_heads}")
        rotary = self.rotary_dim
        if rotary < 2 or rotary % 2 or rotary > self.head_dim:
            raise ValueError(f"{name}(partial_rotary_factor): {self.partial_rotary_factor} x head_dim {self.head_dim} "
                             f"gives {rotary} rotary dims; expected an even number in [2, head_dim]")
        # sections may cover more than the rotary_dim / 2 frequencies: the interleaving stops at the last one,
        # as transformers' does (its default [11, 11, 10] with a small head_dim; text positions never mix them)
        if len(self.mrope_section) != 3 or any(isinstance(v, bool) or not isinstance(v, int) or v < 0
                                               for v in self.mrope_section):
            raise ValueError(f"{name}(mrope_section): expected 3 non-negative ints (temporal, height, width), got "
                             f"{list(self.mrope_section)}")

    @property
    def rotary_dim(self) -> int:
        """Dims of each head that RoPE rotates (``int(head_dim * partial_rotary_factor)``)."""
        return int(self.head_dim * self.partial_rotary_factor)

    def is_linear_layer(self, index: int) -> bool:
        """Whether decoder layer ``index`` is a Gated DeltaNet (linear attention) layer."""
        return self.layer_types[index] == "linear_attention"


_REAL = {"vocab_size": 248320, "head_dim": 256, "max_position_embeddings": 262144, "rope_theta": 10000000.0,
         "linear_key_head_dim": 128, "linear_value_head_dim": 128}

#: ``debug`` (every layer kind, seconds on CPU); ``0.8B`` is Qwen/Qwen3.5-0.8B's text model; ``hf_default`` is
#: ``Qwen3_5TextConfig()`` (the 9B-style defaults). The published sizes are for meta-device construction only.
FLAVORS: Dict[str, Qwen3_5Config] = {
    "debug": Qwen3_5Config(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                           num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=256,
                           linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
                           linear_value_head_dim=16, partial_rotary_factor=0.5, mrope_section=(3, 3, 2),
                           full_attention_interval=2, chunk_size=8),
    "0.8B": Qwen3_5Config(hidden_size=1024, intermediate_size=3584, num_hidden_layers=24, num_attention_heads=8,
                          num_key_value_heads=2, linear_num_key_heads=16, linear_num_value_heads=16,
                          tie_word_embeddings=True, **_REAL),
    "hf_default": Qwen3_5Config(),
}
