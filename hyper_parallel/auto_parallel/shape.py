# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""What the estimators need to know about a model (:class:`ModelShape`), read from a model config (pure).

A decoder-only transformer: token embedding, ``num_layers`` blocks of (RMSNorm, grouped-query
attention, RMSNorm, SwiGLU MLP or mixture-of-experts), a final norm and the LM head. ``model_shape``
reads any config object with the Hugging Face / ``hyper_parallel.models`` field names
(``hidden_size``, ``intermediate_size``, ``num_hidden_layers``, ``num_attention_heads``,
``num_key_value_heads``, ``vocab_size``, optional ``head_dim``, ``tie_word_embeddings``, ``moe``
with ``num_experts``/``top_k``/``hidden_dim``/``num_shared_experts`` and ``first_k_dense_layers``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

__all__ = ["ModelShape", "model_shape", "PUBLISHED_SHAPES"]


@dataclass(frozen=True)
class ModelShape:  # pylint: disable=too-many-instance-attributes
    """Sizes of a decoder-only transformer (see the module docstring)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    tie_embeddings: bool = False
    num_experts: int = 0
    top_k: int = 0
    expert_hidden: int = 0
    num_shared_experts: int = 0
    first_k_dense: int = 0
    name: str = "model"

    def __post_init__(self) -> None:
        for f in ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads",
                  "head_dim"):
            value = getattr(self, f)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"ModelShape.{f}: expected a positive int, got {value!r}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"ModelShape: num_heads {self.num_heads} is not a multiple of num_kv_heads "
                             f"{self.num_kv_heads}")
        if self.num_experts and not 1 <= self.top_k <= self.num_experts:
            raise ValueError(f"ModelShape.top_k: expected 1..{self.num_experts}, got {self.top_k}")

    @property
    def is_moe(self) -> bool:
        """Whether some layers are mixture-of-experts layers."""
        return self.num_experts > 0

    def is_moe_layer(self, index: int) -> bool:
        """Whether layer ``index`` is a mixture-of-experts layer."""
        return self.is_moe and index >= self.first_k_dense

    @property
    def q_size(self) -> int:
        """Width of the query projection (``heads * head_dim``)."""
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        """Width of each of the key and value projections."""
        return self.num_kv_heads * self.head_dim

    def attention_params(self) -> int:
        """Parameters of one attention block (q, k, v, o projections, no bias)."""
        h = self.hidden_size
        return h * self.q_size * 2 + h * self.kv_size * 2

    def dense_mlp_params(self) -> int:
        """Parameters of one SwiGLU MLP."""
        return 3 * self.hidden_size * self.intermediate_size

    def expert_params(self) -> int:
        """Parameters of the routed experts of one MoE layer (all experts)."""
        return 3 * self.num_experts * self.hidden_size * self.expert_hidden

    def moe_other_params(self) -> int:
        """Router and shared-expert parameters of one MoE layer."""
        shared = 3 * self.hidden_size * self.expert_hidden * self.num_shared_experts
        return self.hidden_size * self.num_experts + shared

    def layer_params(self, index: int) -> Tuple[int, int]:
        """``(dense, expert)`` parameter counts of layer ``index`` (norms included in dense)."""
        base = self.attention_params() + 2 * self.hidden_size
        if self.is_moe_layer(index):
            return base + self.moe_other_params(), self.expert_params()
        return base + self.dense_mlp_params(), 0

    def embedding_params(self) -> int:
        """Token embedding parameters."""
        return self.vocab_size * self.hidden_size

    def head_params(self) -> int:
        """LM head + final norm parameters (the head shares the embedding when tied)."""
        return (0 if self.tie_embeddings else self.vocab_size * self.hidden_size) + self.hidden_size

    def total_params(self) -> int:
        """All parameters."""
        layers = sum(sum(self.layer_params(i)) for i in range(self.num_layers))
        return self.embedding_params() + layers + self.head_params()

    def active_params(self) -> int:
        """Parameters one token passes through (routed experts count ``top_k`` of ``num_experts``)."""
        total = self.embedding_params() + self.head_params()
        for i in range(self.num_layers):
            dense, expert = self.layer_params(i)
            total += dense + (expert * self.top_k // self.num_experts if expert else 0)
        return total


def _get(config: Any, *names: str, default: Any = None) -> Any:
    for name in names:
        if isinstance(config, dict) and name in config:
            return config[name]
        if not isinstance(config, dict) and hasattr(config, name):
            return getattr(config, name)
    return default


def model_shape(config: Any, name: Optional[str] = None) -> ModelShape:
    """The :class:`ModelShape` of a model config object or dict (a ``ModelShape`` is returned as it is)."""
    if isinstance(config, ModelShape):
        return config
    hidden = _get(config, "hidden_size", "dim")
    heads = _get(config, "num_attention_heads", "n_heads")
    missing = [n for n, v in (("hidden_size", hidden), ("num_attention_heads", heads),
                              ("intermediate_size", _get(config, "intermediate_size")),
                              ("num_hidden_layers", _get(config, "num_hidden_layers", "n_layers")),
                              ("vocab_size", _get(config, "vocab_size"))) if v is None]
    if missing:
        raise ValueError(f"model_shape({type(config).__name__}): missing fields {missing}; expected a decoder config "
                         "with hidden_size, intermediate_size, num_hidden_layers, num_attention_heads, vocab_size")
    moe = _get(config, "moe")
    head_dim = _get(config, "head_dim") or hidden // heads
    return ModelShape(
        vocab_size=_get(config, "vocab_size"), hidden_size=hidden, intermediate_size=_get(config, "intermediate_size"),
        num_layers=_get(config, "num_hidden_layers", "n_layers"), num_heads=heads,
        num_kv_heads=_get(config, "num_key_value_heads", "n_kv_heads", default=heads), head_dim=head_dim,
        tie_embeddings=bool(_get(config, "tie_word_embeddings", default=False)),
        num_experts=_get(moe, "num_experts", default=0) if moe is not None else 0,
        top_k=_get(moe, "top_k", default=0) if moe is not None else 0,
        expert_hidden=_get(moe, "hidden_dim", default=0) if moe is not None else 0,
        num_shared_experts=_get(moe, "num_shared_experts", default=0) if moe is not None else 0,
        first_k_dense=_get(config, "first_k_dense_layers", default=0) if moe is not None else 0,
        name=name or _get(config, "name", default=type(config).__name__))


# Published sizes (Hugging Face config.json of each model) for planning at scale without instantiating
# anything. MLA (DeepSeek-V3) is approximated by GQA of the same q width: its parameters differ by the
# low-rank projections (< 2 % of the total).
PUBLISHED_SHAPES: Dict[str, ModelShape] = {
    "llama3-8b": ModelShape(128256, 4096, 14336, 32, 32, 8, 128, name="llama3-8b"),
    "llama3-70b": ModelShape(128256, 8192, 28672, 80, 64, 8, 128, name="llama3-70b"),
    "qwen3-8b": ModelShape(151936, 4096, 12288, 36, 32, 8, 128, name="qwen3-8b"),
    "qwen3-32b": ModelShape(151936, 5120, 25600, 64, 64, 8, 128, name="qwen3-32b"),
    "qwen3-30b-a3b": ModelShape(151936, 2048, 6144, 48, 32, 4, 128, num_experts=128, top_k=8, expert_hidden=768,
                               name="qwen3-30b-a3b"),
    "qwen3-235b-a22b": ModelShape(151936, 4096, 12288, 94, 64, 4, 128, num_experts=128, top_k=8, expert_hidden=1536,
                                 name="qwen3-235b-a22b"),
    "deepseek-v3": ModelShape(129280, 7168, 18432, 61, 128, 128, 128, num_experts=256, top_k=8, expert_hidden=2048,
                             num_shared_experts=1, first_k_dense=3, name="deepseek-v3"),
}
