# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Which kernel calls a (query shard, key block) pair needs under a causal mask (pure Python).

Queries and keys are given as runs of global positions in local order (see
:mod:`hyper_parallel.cp.load_balance`). Runs of one partition are disjoint intervals, so a key run
is entirely before a query run (every key visible: a *full* block), entirely after it (skipped),
or the same run (the diagonal: a *causal* block, square and top-left aligned as SDPA's
``is_causal``). :func:`plan_block` turns that into a short list of :class:`Task` s over local
offsets, merging neighbours so that head-tail ring steps need one kernel call each:

* the diagonal step of a rank whose runs are sorted is one causal call over the whole shard;
* queries whose visible keys are the same are one call; adjacent key runs are one slice.

:func:`pair_count` counts the (query, key) pairs a task list computes (the attention work), which
:mod:`hyper_parallel.cp.cost` uses to show that head-tail balances causal work exactly.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

__all__ = ["Task", "plan_block", "pair_count", "visible_pairs"]

Run = Tuple[int, int]


@dataclass(frozen=True)
class Task:
    """One kernel call: queries ``[q_off, q_off+q_len)`` (local) against the key segments
    ``((k_off, k_len), ...)`` (local, concatenated), causal (diagonal) or full."""

    q_off: int
    q_len: int
    k_segs: Tuple[Run, ...]
    causal: bool

    @property
    def k_len(self) -> int:
        """Total number of keys."""
        return sum(n for _, n in self.k_segs)


def _offsets(runs: Sequence[Run]) -> List[int]:
    offs, acc = [], 0
    for _, n in runs:
        offs.append(acc)
        acc += n
    return offs


def _sorted(runs: Sequence[Run]) -> bool:
    return all(a[0] + a[1] <= b[0] for a, b in zip(runs, runs[1:]))


def _segments(ids: Sequence[int], k_offs: Sequence[int], k_runs: Sequence[Run]) -> Tuple[Run, ...]:
    """Local key segments of runs ``ids`` (increasing local order), adjacent ones joined."""
    segs: List[List[int]] = []
    for j in ids:
        off, n = k_offs[j], k_runs[j][1]
        if segs and segs[-1][0] + segs[-1][1] == off:
            segs[-1][1] += n
        else:
            segs.append([off, n])
    return tuple((a, b) for a, b in segs)


def _classify(q_run: Run, k_run: Run) -> str:
    qs, ql = q_run
    ks, kl = k_run
    if ks + kl <= qs:
        return "full"
    if ks >= qs + ql:
        return "skip"
    if (ks, kl) == (qs, ql):
        return "diag"
    raise ValueError(f"plan_block: key run {k_run} partly overlaps query run {q_run}; runs must come from one "
                     "partition of the sequence")


def _q_run_needs(q_run: Run, k_runs: Sequence[Run]) -> Tuple[Tuple[int, ...], Optional[int]]:
    """(key runs fully visible to ``q_run``, the identical key run or None)."""
    kinds = [_classify(q_run, k_run) for k_run in k_runs]
    full = tuple(j for j, kind in enumerate(kinds) if kind == "full")
    diag = [j for j, kind in enumerate(kinds) if kind == "diag"]
    return full, (diag[0] if diag else None)


def _group_runs(q_runs: Sequence[Run], k_runs: Sequence[Run]) -> List[Tuple[int, int, Tuple[int, ...], Optional[int]]]:
    """``(q_off, q_len, full key runs, diagonal key run)`` per group of adjacent query runs that see the
    same full key runs and have no diagonal."""
    groups: List[Tuple[int, int, Tuple[int, ...], Optional[int]]] = []
    off = 0
    for q_run in q_runs:
        full, diag = _q_run_needs(q_run, k_runs)
        joins = bool(groups) and groups[-1][2] == full and groups[-1][3] is None and diag is None
        if joins and groups[-1][0] + groups[-1][1] == off:
            first = groups.pop()
            groups.append((first[0], first[1] + q_run[1], full, None))
        else:
            groups.append((off, q_run[1], full, diag))
        off += q_run[1]
    return groups


def plan_block(q_runs: Sequence[Run], k_runs: Sequence[Run], causal: bool) -> List[Task]:
    """Kernel calls for local queries ``q_runs`` against a key block ``k_runs``."""
    q_total = sum(n for _, n in q_runs)
    k_total = sum(n for _, n in k_runs)
    if not q_total or not k_total:
        return []
    if not causal:
        return [Task(0, q_total, ((0, k_total),), False)]
    if tuple(q_runs) == tuple(k_runs) and _sorted(q_runs):
        return [Task(0, q_total, ((0, k_total),), True)]
    k_offs = _offsets(k_runs)
    tasks: List[Task] = []
    for q_off, q_len, full, diag in _group_runs(q_runs, k_runs):
        if full:
            tasks.append(Task(q_off, q_len, _segments(full, k_offs, k_runs), False))
        if diag is not None:
            tasks.append(Task(q_off, q_len, ((k_offs[diag], k_runs[diag][1]),), True))
    return tasks


def pair_count(tasks: Sequence[Task]) -> int:
    """(query, key) pairs the tasks compute (a causal task counts its lower triangle)."""
    return sum(t.q_len * (t.q_len + 1) // 2 if t.causal else t.q_len * t.k_len for t in tasks)


def visible_pairs(q_positions: Sequence[int], k_positions: Sequence[int], causal: bool) -> int:
    """Brute-force count of visible (query, key) pairs (the oracle for :func:`pair_count`)."""
    if not causal:
        return len(q_positions) * len(k_positions)
    return sum(1 for qp in q_positions for kp in k_positions if kp <= qp)
