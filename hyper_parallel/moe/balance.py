# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Load balancing, backend-free: the expert-bias rule, the auxiliary-loss formulas and load metrics.

* Auxiliary-loss-free balancing (DeepSeek-V3): after each optimizer step every expert's bias moves by
  ``rate * sign(mean - load_i)``, where ``load_i`` is the number of routed slots expert ``i`` took in
  the step, summed over every rank that holds distinct tokens. The rule runs on the exact integer
  counts in Python floats, so every rank computes bit-identical biases.
* Auxiliary loss (Switch/GShard form): ``alpha * E * sum_i f_i * P_i`` with ``f_i`` the fraction of the
  ``T * k`` routed slots that chose expert ``i`` and ``P_i`` the mean routing probability of expert
  ``i``; it equals ``alpha`` at perfect balance. The sequence-level variant averages it over sequences.
"""
from __future__ import annotations

from typing import List, Sequence

__all__ = ["bias_update", "aux_loss_value", "sequence_aux_loss_value", "load_ratio", "max_violation"]


def _sign(v: float) -> float:
    return 1.0 if v > 0 else (-1.0 if v < 0 else 0.0)


def bias_update(loads: Sequence[float], rate: float) -> List[float]:
    """The bias increments ``rate * sign(mean(loads) - load_i)``: under-loaded experts gain, over-loaded
    ones lose, experts exactly at the mean stay."""
    if not loads:
        raise ValueError("bias_update(loads): expected one load per expert, got none")
    mean = sum(loads) / len(loads)
    return [rate * _sign(mean - load) for load in loads]


def aux_loss_value(counts: Sequence[float], prob_sums: Sequence[float], num_tokens: int, top_k: int,
                   coeff: float) -> float:
    """``coeff * E * sum_i f_i * P_i`` with ``f_i = counts_i / (num_tokens * top_k)`` and
    ``P_i = prob_sums_i / num_tokens`` (``prob_sums_i``: routing probability of expert ``i`` summed over
    the tokens)."""
    if num_tokens <= 0:
        raise ValueError(f"aux_loss_value(num_tokens): expected a positive token count, got {num_tokens}")
    num_experts = len(counts)
    total = sum((c / (num_tokens * top_k)) * (p / num_tokens) for c, p in zip(counts, prob_sums))
    return coeff * num_experts * total


def sequence_aux_loss_value(counts: Sequence[Sequence[float]], prob_sums: Sequence[Sequence[float]],
                            seq_len: int, top_k: int, coeff: float) -> float:
    """Mean over sequences of :func:`aux_loss_value` computed on each sequence's own tokens."""
    if not counts:
        raise ValueError("sequence_aux_loss_value(counts): expected one row per sequence, got none")
    return sum(aux_loss_value(c, p, seq_len, top_k, coeff) for c, p in zip(counts, prob_sums)) / len(counts)


def load_ratio(loads: Sequence[float]) -> float:
    """``max / mean`` of the expert loads (1.0 = perfectly balanced; the step waits on the max)."""
    mean = sum(loads) / len(loads)
    return max(loads) / mean if mean else 1.0


def max_violation(loads: Sequence[float]) -> float:
    """``MaxVio = (max - mean) / mean`` (the Loss-Free Balancing paper's metric)."""
    return load_ratio(loads) - 1.0
