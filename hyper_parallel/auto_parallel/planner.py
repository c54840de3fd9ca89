# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The ND plan search (pure Python): :func:`search`.

Enumerate ``dp_replicate x dp_shard x tp x pp x cp x ep x microbatches x activation x schedule`` with
``dp_replicate * dp_shard * tp * pp * cp = devices``; drop illegal plans (divisibility of heads, kv
heads, sequence, batch, experts, layers; schedule constraints), estimate memory and drop what does
not fit, estimate the step time of the rest and rank them. Every rejection is kept with its reason
(:attr:`SearchResult.rejected`), so the CLI can say why the others lost.
"""
from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from hyper_parallel.auto_parallel.cluster import ClusterSpec, GIB
from hyper_parallel.auto_parallel.memory import MemoryEstimate, check_divisible, estimate_memory
from hyper_parallel.auto_parallel.plan import ACTIVATION_POLICIES, ParallelPlan, TrainConfig
from hyper_parallel.auto_parallel.shape import ModelShape, model_shape
from hyper_parallel.auto_parallel.time_model import TimeEstimate, estimate_step_time

__all__ = ["RankedPlan", "SearchResult", "NoPlanFitsError", "search", "enumerate_plans", "SCHEDULES"]

# schedule name -> stages per rank
SCHEDULES: Dict[str, int] = {"1F1B": 1, "GPipe": 1, "Interleaved1F1B": 2, "ZBVZeroBubble": 2}
_DIMS = ("dp_replicate", "dp_shard", "tp", "pp", "cp", "ep")
_CONSTRAINT_KEYS = (*_DIMS, "microbatches", "activation", "schedule")


class NoPlanFitsError(ValueError):
    """No legal plan fits the device memory; the message names the smallest peak any plan needs."""


@dataclass(frozen=True)
class RankedPlan:
    """A plan that fits, with its estimates (``rank`` 1 = fastest)."""

    rank: int
    plan: ParallelPlan
    memory: MemoryEstimate
    time: TimeEstimate


class SearchResult(list):
    """The ranked plans (a list of :class:`RankedPlan`, fastest first) plus ``rejected``: ``[(plan, reason)]``
    and ``evaluated``: how many candidate plans were looked at."""

    def __init__(self, ranked: Sequence[RankedPlan], rejected: List[Tuple[ParallelPlan, str]], evaluated: int) -> None:
        super().__init__(ranked)
        self.rejected = rejected
        self.evaluated = evaluated

    def rejection_summary(self) -> List[Tuple[str, int]]:
        """Reasons (the kind, without the numbers of each plan) with their counts, most frequent first."""
        return Counter(reason.split(":")[0] for _, reason in self.rejected).most_common()


def _divisors(n: int) -> List[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _allowed(constraints: Mapping[str, Any], key: str, candidates: Sequence[Any]) -> List[Any]:
    if key not in constraints:
        return list(candidates)
    want = constraints[key]
    values = list(want) if isinstance(want, (list, tuple, set, frozenset)) else [want]
    return [c for c in candidates if c in values]


def _check_constraints(constraints: Mapping[str, Any]) -> None:
    unknown = sorted(set(constraints) - set(_CONSTRAINT_KEYS))
    if unknown:
        raise ValueError(f"search(constraints): unknown keys {unknown}; expected some of {list(_CONSTRAINT_KEYS)} "
                         "(a value or a list of allowed values, e.g. {'tp': 8, 'pp': 1})")


def _mesh_dims(devices: int, spec: ModelShape, constraints: Mapping[str, Any]) -> Iterator[Tuple[int, ...]]:
    divs = _divisors(devices)
    for r, f, t, p in itertools.product(*(_allowed(constraints, k, divs) for k in _DIMS[:4])):
        rest = devices // (r * f * t * p) if devices % (r * f * t * p) == 0 else 0
        if rest == 0 or rest not in _allowed(constraints, "cp", [rest]):
            continue
        eps = [e for e in _divisors(f * rest * t) if e == 1 or (spec.is_moe and spec.num_experts % e == 0)]
        for e in _allowed(constraints, "ep", eps):
            yield r, f, t, p, rest, e


def enumerate_plans(spec: ModelShape, devices: int, global_batch: int,
                    constraints: Optional[Mapping[str, Any]] = None) -> Iterator[ParallelPlan]:
    """Every candidate plan for ``devices`` (before legality and memory checks)."""
    constraints = constraints or {}
    for r, f, t, p, c, e in _mesh_dims(devices, spec, constraints):
        local = global_batch // (r * f) if global_batch % (r * f) == 0 else global_batch
        if p == 1:
            options = [("1F1B", 1, 1)]
        else:
            options = [(name, v, m) for name, v in SCHEDULES.items() for m in (p, 2 * p, 4 * p, 8 * p)
                       if m <= local]
        for (name, v, m), act in itertools.product(options, ACTIVATION_POLICIES):
            if (p > 1 and name not in _allowed(constraints, "schedule", [name])) or \
                    m not in _allowed(constraints, "microbatches", [m]) or \
                    act not in _allowed(constraints, "activation", [act]):
                continue
            yield ParallelPlan(dp_replicate=r, dp_shard=f, tp=t, pp=p, cp=c, ep=e, microbatches=m, activation=act,
                               schedule=name, stages_per_rank=v)


def _legal(spec: ModelShape, plan: ParallelPlan, train: TrainConfig) -> Optional[str]:
    try:
        check_divisible(spec, plan, train)
        if plan.pp > 1:
            from hyper_parallel.pipeline.schedules import check_constraints  # pylint: disable=import-outside-toplevel
            check_constraints(plan.schedule, plan.pp, plan.microbatches, plan.stages_per_rank)
            if spec.num_layers < plan.num_stages:
                return f"too few layers: {spec.num_layers} layers for {plan.num_stages} stages"
    except ValueError as err:
        text = str(err).split(": ", 1)[-1]
        return f"illegal split: {text}"
    return None


def search(model_config, cluster: ClusterSpec, global_batch: int, seq_len: int,
           constraints: Optional[Mapping[str, Any]] = None, *, train: Optional[TrainConfig] = None,
           top: Optional[int] = None) -> SearchResult:
    """Ranked plans (fastest first) for ``model_config`` on ``cluster.num_devices`` devices.

    ``constraints``: fixed values or allowed lists per dim (``{"tp": 8}``, ``{"pp": 1}`` forbids PP,
    ``{"activation": "none"}``, ``{"schedule": ["1F1B"]}``). ``train`` overrides the optimizer/dtypes
    (its batch and sequence are replaced by ``global_batch``/``seq_len``). Raises :class:`NoPlanFitsError`
    when legal plans exist but none fits ``cluster.device_memory``."""
    spec = model_shape(model_config)
    constraints = dict(constraints or {})
    _check_constraints(constraints)
    base = train or TrainConfig(global_batch, seq_len)
    train = TrainConfig(global_batch, seq_len, base.optimizer, base.param_bytes, base.grad_bytes, base.compute_bytes,
                        base.moe_imbalance)
    ranked: List[Tuple[float, ParallelPlan, MemoryEstimate, TimeEstimate]] = []
    rejected: List[Tuple[ParallelPlan, str]] = []
    smallest: Optional[Tuple[int, ParallelPlan]] = None
    evaluated = 0
    for plan in enumerate_plans(spec, cluster.num_devices, global_batch, constraints):
        evaluated += 1
        reason = _legal(spec, plan, train)
        if reason:
            rejected.append((plan, reason))
            continue
        mem = estimate_memory(spec, plan, train)
        if smallest is None or mem.peak_bytes < smallest[0]:  # pylint: disable=unsubscriptable-object
            smallest = (mem.peak_bytes, plan)
        if mem.peak_bytes > cluster.device_memory:
            rejected.append((plan, f"out of memory: needs {mem.peak_bytes / GIB:.2f} GiB > "
                                   f"{cluster.device_memory / GIB:.2f} GiB"))
            continue
        est = estimate_step_time(spec, plan, train, cluster)
        ranked.append((est.step_s, plan, mem, est))
    if not ranked:
        if smallest is None:
            raise NoPlanFitsError(f"no legal plan for {spec.name} on {cluster.num_devices} devices with "
                                  f"global_batch={global_batch}, seq_len={seq_len} and constraints {constraints}: "
                                  f"{Counter(r for _, r in rejected).most_common(3)}")
        need, plan = smallest
        raise NoPlanFitsError(f"no plan fits; smallest needs {need / GIB:.2f} GiB per device "
                              f"({plan.label()}), the devices have {cluster.device_memory / GIB:.2f} GiB")
    ranked.sort(key=lambda x: x[0])
    keep = ranked if top is None else ranked[:top]
    out = [RankedPlan(i + 1, p, m, t) for i, (_, p, m, t) in enumerate(keep)]
    return SearchResult(out, rejected, evaluated)
