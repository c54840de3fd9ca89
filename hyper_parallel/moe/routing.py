# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Router math, backend-free: the exact semantics every backend's ``TokenChoiceTopKRouter`` implements.

One token at a time over Python floats, so it reads like the definition and serves as the oracle
the vectorised routers are tested against:

1. scores: ``softmax(logits)`` over the experts, or ``sigmoid(logits)`` per expert;
2. selection scores: ``scores + expert_bias`` (the bias steers *which* experts are picked, never the
   combine weights);
3. group-limited routing (``n_groups > 1``): a group's score is the sum of its top-2 selection scores
   (top-1 for one-expert groups); the ``topk_groups`` best groups stay eligible, the others are
   masked out;
4. the ``k`` eligible experts with the highest selection scores, in descending order (ties go to the
   lower expert index);
5. combine weights: the *unbiased* scores of those experts, divided by their sum when ``route_norm``
   (plus 1e-20), times ``route_scale``.
"""
from __future__ import annotations

import math
from typing import List, Optional, Sequence, Tuple

__all__ = ["scores_of", "group_scores", "route_token", "route_tokens", "routing_probabilities", "ROUTE_NORM_EPS"]

ROUTE_NORM_EPS = 1e-20


def scores_of(logits: Sequence[float], score_func: str) -> List[float]:
    """Router scores of one token from its ``E`` logits."""
    if score_func == "softmax":
        top = max(logits)
        exps = [math.exp(v - top) for v in logits]
        total = sum(exps)
        return [e / total for e in exps]
    if score_func == "sigmoid":
        return [1.0 / (1.0 + math.exp(-v)) for v in logits]
    raise ValueError(f"score_func: expected 'softmax' or 'sigmoid', got {score_func!r}")


def group_scores(selection: Sequence[float], n_groups: int) -> List[float]:
    """Score of each of ``n_groups`` equal expert groups: the sum of its top-2 selection scores."""
    size = len(selection) // n_groups
    out = []
    for g in range(n_groups):
        members = sorted(selection[g * size:(g + 1) * size], reverse=True)
        out.append(sum(members[:min(2, size)]))
    return out


def _top(values: Sequence[float], k: int, eligible: Optional[Sequence[bool]] = None) -> List[int]:
    """Indices of the ``k`` largest eligible values, descending, ties to the lower index."""
    idx = [i for i in range(len(values)) if eligible is None or eligible[i]]
    return sorted(idx, key=lambda i: (-values[i], i))[:k]


def route_token(logits: Sequence[float], *, top_k: int, score_func: str = "softmax", route_norm: bool = False,
                route_scale: float = 1.0, n_groups: int = 1, topk_groups: int = 1,
                expert_bias: Optional[Sequence[float]] = None) -> Tuple[List[int], List[float]]:
    """``(experts, weights)`` of one token: the ``top_k`` selected experts and their combine weights."""
    scores = scores_of(logits, score_func)
    selection = scores if expert_bias is None else [s + b for s, b in zip(scores, expert_bias)]
    eligible = None
    if n_groups > 1:
        size = len(scores) // n_groups
        keep = set(_top(group_scores(selection, n_groups), topk_groups))
        eligible = [i // size in keep for i in range(len(scores))]
    experts = _top(selection, top_k, eligible)
    weights = [scores[e] for e in experts]
    if route_norm:
        total = sum(weights) + ROUTE_NORM_EPS
        weights = [w / total for w in weights]
    return experts, [w * route_scale for w in weights]


def route_tokens(logits: Sequence[Sequence[float]], **kwargs) -> Tuple[List[List[int]], List[List[float]]]:
    """:func:`route_token` for every row of ``logits`` (same keyword arguments)."""
    experts, weights = [], []
    for row in logits:
        e, w = route_token(row, **kwargs)
        experts.append(e)
        weights.append(w)
    return experts, weights


def routing_probabilities(scores: Sequence[float], score_func: str) -> List[float]:
    """The per-token expert probabilities the auxiliary loss averages (``P_i``): the softmax scores
    themselves, or the sigmoid scores normalised to sum 1 (DeepSeek-V3's sequence-wise loss)."""
    if score_func == "softmax":
        return list(scores)
    total = sum(scores)
    return [s / total for s in scores]
