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
    #: hybrid models (Qwen3.5): ``"linear_attention"`` / ``"full_attention"`` per layer (empty: all full)
    layer_types: Tuple[str, ...] = ()
    linear_key_heads: int = 0
    linear_value_heads: int = 0
    linear_key_dim: int = 0
    linear_value_dim: int = 0
    linear_conv_kernel: int = 0
    linear_chunk: int = 64
    #: full attention with a per-head output gate (``q_proj`` twice as wide) and per-head QK-norms
    gated_attention: bool = False
    #: one shared expert of this width scaled by a sigmoid gate (Qwen3.5-MoE), instead of ``num_shared_experts``
    shared_expert_hidden: int = 0

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
        """Parameters of one attention block (q, k, v, o projections, no bias; the gate and QK-norms of a
        gated attention)."""
        h = self.hidden_size
        gated = h * self.q_size + 2 * self.head_dim if self.gated_attention else 0
        return h * self.q_size * 2 + h * self.kv_size * 2 + gated

    def is_linear_layer(self, index: int) -> bool:
        """Whether layer ``index`` is a linear-attention (Gated DeltaNet) layer."""
        return bool(self.layer_types) and self.layer_types[index] == "linear_attention"

    @property
    def linear_sizes(self) -> Tuple[int, int]:
        """``(key width, value width)`` of a linear-attention layer (``heads * head dim``)."""
        return self.linear_key_heads * self.linear_key_dim, self.linear_value_heads * self.linear_value_dim

    def linear_attention_params(self) -> int:
        """Parameters of one Gated DeltaNet block: q/k/v/z/b/a and out projections, the conv, ``A_log``,
        ``dt_bias`` and the gated norm."""
        h, (kd, vd), hv = self.hidden_size, self.linear_sizes, self.linear_value_heads
        conv = (2 * kd + vd) * self.linear_conv_kernel
        return h * (2 * kd + 2 * vd + 2 * hv) + vd * h + conv + 2 * hv + self.linear_value_dim

    def mixer_params(self, index: int) -> int:
        """Parameters of layer ``index``'s token mixer (attention or linear attention)."""
        return self.linear_attention_params() if self.is_linear_layer(index) else self.attention_params()

    def dense_mlp_params(self) -> int:
        """Parameters of one SwiGLU MLP."""
        return 3 * self.hidden_size * self.intermediate_size

    def expert_params(self) -> int:
        """Parameters of the routed experts of one MoE layer (all experts)."""
        return 3 * self.num_experts * self.hidden_size * self.expert_hidden

    def moe_other_params(self) -> int:
        """Router and shared-expert parameters of one MoE layer."""
        shared = 3 * self.hidden_size * self.expert_hidden * self.num_shared_experts
        if self.shared_expert_hidden:
            shared += 3 * self.hidden_size * self.shared_expert_hidden + self.hidden_size
        return self.hidden_size * self.num_experts + shared

    def layer_params(self, index: int) -> Tuple[int, int]:
        """``(dense, expert)`` parameter counts of layer ``index`` (norms included in dense)."""
        base = self.mixer_params(index) + 2 * self.hidden_size
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
    return ModelShape(**_hybrid_fields(config),
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


def _hybrid_fields(config: Any) -> Dict[str, Any]:
    """The linear-attention / gated-attention fields of a Qwen3.5-style config (none for other models)."""
    types = _get(config, "layer_types")
    if not types:
        return {}
    return {"layer_types": tuple(types), "linear_key_heads": _get(config, "linear_num_key_heads", default=0),
            "linear_value_heads": _get(config, "linear_num_value_heads", default=0),
            "linear_key_dim": _get(config, "linear_key_head_dim", default=0),
            "linear_value_dim": _get(config, "linear_value_head_dim", default=0),
            "linear_conv_kernel": _get(config, "linear_conv_kernel_dim", default=0),
            "linear_chunk": _get(config, "chunk_size", default=64), "gated_attention": True,
            "shared_expert_hidden": _get(config, "shared_expert_intermediate_size", default=0)}


def _qwen3_5(name: str, hidden: int, layers: int, heads: int, kv: int, lk: int, lv: int, **kw) -> ModelShape:
    types = tuple("full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(layers))
    return ModelShape(248320, hidden, kw.pop("intermediate", 512), layers, heads, kv, 256, layer_types=types,
                      linear_key_heads=lk, linear_value_heads=lv, linear_key_dim=128, linear_value_dim=128,
                      linear_conv_kernel=4, gated_attention=True, name=name, **kw)


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
    "qwen3.5-0.8b": _qwen3_5("qwen3.5-0.8b", 1024, 24, 8, 2, 16, 16, intermediate=3584, tie_embeddings=True),
    "qwen3.5-35b-a3b": _qwen3_5("qwen3.5-35b-a3b", 2048, 40, 16, 2, 16, 32, num_experts=256, top_k=8,
                                expert_hidden=512, shared_expert_hidden=512),
    "qwen3-235b-a22b": ModelShape(151936, 4096, 12288, 94, 64, 4, 128, num_experts=128, top_k=8, expert_hidden=1536,
                                 name="qwen3-235b-a22b"),
    "deepseek-v3": ModelShape(129280, 7168, 18432, 61, 128, 128, 128, num_experts=256, top_k=8, expert_hidden=2048,
                             num_shared_experts=1, first_k_dense=3, name="deepseek-v3"),
}
