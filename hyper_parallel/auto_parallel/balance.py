# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Pipeline stage balancing (pure Python): :func:`balance_stages`.

Split a sequence of layers (the embedding and the head included as their own entries, so a heavy
first or last layer is balanced like any other) into ``num_stages`` contiguous, non-empty ranges
minimising the largest stage time, subject to a memory limit per stage. Exact, by dynamic
programming over (layers used, stages used): ``best[k][j]`` = the smallest possible max stage
time placing the first ``j`` layers on ``k`` stages; ``O(num_stages * L^2)`` with prefix sums.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple, Union

__all__ = ["LayerCost", "balance_stages", "stage_times", "balanced_layers_per_stage"]


@dataclass(frozen=True)
class LayerCost:
    """Time (any unit) and memory (bytes) of one layer on a stage."""

    time: float
    memory: float = 0.0


def _normalise(layer_costs: Sequence[Union[float, LayerCost, Tuple[float, float]]]) -> List[LayerCost]:
    out = []
    for i, c in enumerate(layer_costs):
        if isinstance(c, LayerCost):
            item = c
        elif isinstance(c, tuple) and len(c) == 2:
            item = LayerCost(float(c[0]), float(c[1]))
        elif isinstance(c, (int, float)) and not isinstance(c, bool):
            item = LayerCost(float(c))
        else:
            raise ValueError(f"balance_stages(layer_costs[{i}]): expected a number, a (time, memory) pair or a "
                             f"LayerCost, got {c!r}")
        if item.time < 0 or item.memory < 0:
            raise ValueError(f"balance_stages(layer_costs[{i}]): time and memory must be >= 0, got {item}")
        out.append(item)
    return out


def _limits(memory_limits, num_stages: int) -> List[float]:
    if memory_limits is None:
        return [float("inf")] * num_stages
    if isinstance(memory_limits, (int, float)) and not isinstance(memory_limits, bool):
        return [float(memory_limits)] * num_stages
    limits = [float(x) for x in memory_limits]
    if len(limits) != num_stages:
        raise ValueError(f"balance_stages(memory_limits): {len(limits)} limits for {num_stages} stages")
    return limits


def _solve(t_pre: List[float], m_pre: List[float], limits: List[float]) -> Tuple[List[List[float]], List[List[int]]]:
    """``best[k][j]``: smallest max stage time of the first ``j`` layers on ``k`` stages; ``cut``: the argmin."""
    n, num_stages = len(t_pre) - 1, len(limits)
    inf = float("inf")
    best = [[inf] * (n + 1) for _ in range(num_stages + 1)]
    cut = [[-1] * (n + 1) for _ in range(num_stages + 1)]
    best[0][0] = 0.0
    for k in range(1, num_stages + 1):
        for j in range(k, n - (num_stages - k) + 1):
            for i in range(k - 1, j):
                if best[k - 1][i] == inf or m_pre[j] - m_pre[i] > limits[k - 1] + 1e-9:
                    continue
                value = max(best[k - 1][i], t_pre[j] - t_pre[i])
                if value < best[k][j] - 1e-12:
                    best[k][j], cut[k][j] = value, i
    return best, cut


def balance_stages(layer_costs: Sequence[Union[float, LayerCost, Tuple[float, float]]], num_stages: int,
                   memory_limits: Optional[Union[float, Sequence[float]]] = None) -> List[int]:
    """Layers per stage (a list of ``num_stages`` positive counts summing to ``len(layer_costs)``) that
    minimises the largest stage time; every stage's summed memory stays within its limit.

    ``layer_costs``: numbers (times) or ``(time, memory)`` pairs / :class:`LayerCost`; ``memory_limits``:
    one number for every stage or one per stage (``None``: no limit). Raises ``ValueError`` when no
    split fits, naming the smallest memory the tightest stage would need."""
    costs = _normalise(layer_costs)
    n = len(costs)
    if isinstance(num_stages, bool) or not isinstance(num_stages, int) or num_stages < 1:
        raise ValueError(f"balance_stages(num_stages): expected a positive int, got {num_stages!r}")
    if n < num_stages:
        raise ValueError(f"balance_stages: {n} layers cannot fill {num_stages} non-empty stages")
    limits = _limits(memory_limits, num_stages)
    t_pre, m_pre = [0.0], [0.0]
    for c in costs:
        t_pre.append(t_pre[-1] + c.time)
        m_pre.append(m_pre[-1] + c.memory)
    best, cut = _solve(t_pre, m_pre, limits)
    inf = float("inf")
    if best[num_stages][n] == inf:
        need = max(c.memory for c in costs)
        raise ValueError(f"balance_stages: no split of {n} layers into {num_stages} stages fits the memory limits "
                         f"{limits}; the largest single layer alone needs {need:.0f} bytes and all layers "
                         f"{m_pre[-1]:.0f}")
    sizes, j = [], n
    for k in range(num_stages, 0, -1):
        i = cut[k][j]
        sizes.append(j - i)
        j = i
    return sizes[::-1]


def stage_times(layer_costs: Sequence[Union[float, LayerCost, Tuple[float, float]]], sizes: Sequence[int]
                ) -> List[float]:
    """Summed time of every stage for the split ``sizes``."""
    costs = _normalise(layer_costs)
    if sum(sizes) != len(costs):
        raise ValueError(f"stage_times: sizes {list(sizes)} sum to {sum(sizes)}, there are {len(costs)} layers")
    out, start = [], 0
    for s in sizes:
        out.append(sum(c.time for c in costs[start:start + s]))
        start += s
    return out


def balanced_layers_per_stage(model_config, plan, train_config, cluster, memory_limits=None) -> List[int]:
    """Decoder layers per pipeline stage for ``plan`` (``ParallelPlan``): :func:`balance_stages` over the
    estimated forward + backward time of the embedding, every decoder layer and the head
    (:func:`~hyper_parallel.auto_parallel.time_model.part_costs`), the embedding counted on the first stage
    and the head on the last one; the trainer's ``parallelism.pp_layers_per_stage``."""
    from hyper_parallel.auto_parallel.time_model import part_costs  # pylint: disable=import-outside-toplevel
    if plan.num_stages < 2:
        raise ValueError(f"balanced_layers_per_stage: plan {plan.label()} has no pipeline (pp={plan.pp})")
    costs = part_costs(model_config, plan, train_config, cluster)
    if len(costs) < plan.num_stages:
        raise ValueError(f"balanced_layers_per_stage: {len(costs) - 2} layers cannot fill {plan.num_stages} stages")
    sizes = balance_stages(costs, plan.num_stages, memory_limits)
    sizes[0] -= 1  # the embedding
    sizes[-1] -= 1  # the head
    return sizes
