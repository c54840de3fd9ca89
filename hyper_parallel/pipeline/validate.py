# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The schedule validator (pure Python): a schedule is accepted only with a proof that it runs.

``validate_schedule`` checks, before anything runs:

1. placement: every step's stage exists and lives on the rank whose list holds it;
2. completeness and order per stage: one F per microbatch, then either one B or one I followed by
   one W, on the stage's rank in that order;
3. data: every compute step that needs another rank's output has its RECV earlier in its list, and
   every cross-rank output is sent (SEND after the producing step) exactly once;
4. matching: per directed rank pair, the sends and the receives name the same messages in the same
   order (so tagless FIFO transports pair them correctly);
5. deadlock freedom: the lists are executed with the strictest semantics — a SEND completes only
   together with its RECV (rendezvous) — and the execution must finish. It returns that execution as
   the global order; otherwise the error names the first pair of steps that wait on each other.

Rendezvous-safety implies safety for the asynchronous runtime (posted sends, waited receives) too.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from hyper_parallel.pipeline.lowering import lower, message_of, peer_of
from hyper_parallel.pipeline.steps import MetaStep, MetaStepType

__all__ = ["ScheduleValidationError", "ValidationReport", "validate_schedule", "validate_lists"]

T = MetaStepType
_RECV_FOR = {T.F: T.RECV_F, T.I: T.RECV_B, T.B: T.RECV_B}


class ScheduleValidationError(ValueError):
    """A schedule was rejected before running; the message says which rule failed and where."""


@dataclass(frozen=True)
class ValidationReport:
    """A proof that the lists run: ``global_order`` lists ``(rank, position, step)`` in one valid
    execution order (each SEND immediately followed by its RECV)."""

    lists: Dict[int, Tuple[MetaStep, ...]]
    global_order: Tuple[Tuple[int, int, MetaStep], ...]

    @property
    def num_steps(self) -> int:
        """Steps over all ranks."""
        return len(self.global_order)


def _where(rank: int, pos: int, a: MetaStep) -> str:
    return f"rank {rank} position {pos} ({a})"


def _check_placement(lists, stage_to_rank, n_micro) -> None:
    n = len(stage_to_rank)
    for r, steps in lists.items():
        for pos, a in enumerate(steps):
            if not isinstance(a, MetaStep):
                raise ScheduleValidationError(f"rank {r} position {pos}: expected a MetaStep, got {a!r}")
            for leaf in a.leaves():
                if not 0 <= leaf.stage_index < n:
                    raise ScheduleValidationError(f"{_where(r, pos, a)}: stage {leaf.stage_index} is out of range "
                                                  f"0..{n - 1}")
                if stage_to_rank[leaf.stage_index] != r:
                    raise ScheduleValidationError(f"{_where(r, pos, a)}: stage {leaf.stage_index} lives on rank "
                                                  f"{stage_to_rank[leaf.stage_index]}, not on rank {r}")
                mb = leaf.microbatch_index
                if mb is not None and not 0 <= mb < n_micro:
                    raise ScheduleValidationError(f"{_where(r, pos, a)}: microbatch {mb} is out of range "
                                                  f"0..{n_micro - 1}")


def _stage_positions(steps, s: int, r: int) -> Dict[Tuple[MetaStepType, int], int]:
    pos: Dict[Tuple[MetaStepType, int], int] = {}
    for i, a in enumerate(steps):
        for leaf in a.leaves():
            if leaf.stage_index != s or not leaf.is_compute:
                continue
            key = (leaf.type, leaf.microbatch_index)
            if key in pos:
                raise ScheduleValidationError(f"{_where(r, i, leaf)}: stage {s} runs {leaf.type.value} of "
                                              f"microbatch {leaf.microbatch_index} twice")
            pos[key] = i
    return pos


def _check_microbatch(pos, what: str, mb: int, forward_only: bool = False) -> None:
    f, b, inp, w = (pos.get((k, mb)) for k in (T.F, T.B, T.I, T.W))
    if f is None:
        raise ScheduleValidationError(f"{what}: no forward (F) step")
    if forward_only:
        if (b, inp, w) != (None, None, None):
            raise ScheduleValidationError(f"{what}: a forward-only list holds a backward step")
        return
    if b is None and (inp is None or w is None):
        raise ScheduleValidationError(f"{what}: needs a full backward (B) or a backward-input (I) and a "
                                      f"backward-weight (W); has B={b is not None}, I={inp is not None}, "
                                      f"W={w is not None}")
    if b is not None and (inp is not None or w is not None):
        raise ScheduleValidationError(f"{what}: has both a full backward B and a split I/W backward")
    first_bwd = b if b is not None else inp
    if first_bwd < f:
        raise ScheduleValidationError(f"{what}: backward at position {first_bwd} runs before its forward at "
                                      f"position {f}")
    if w is not None and w < inp:
        raise ScheduleValidationError(f"{what}: W at position {w} runs before its I at position {inp}")


def _check_stage_order(lists, stage_to_rank, n_micro, forward_only: bool = False) -> None:
    for s, r in enumerate(stage_to_rank):
        pos = _stage_positions(lists[r], s, r)
        for mb in range(n_micro):
            _check_microbatch(pos, f"stage {s} (rank {r}), microbatch {mb}", mb, forward_only)


def _check_data(lists, stage_to_rank) -> Dict[Tuple[int, int], List[MetaStep]]:
    """Every cross-rank input is received before use and sent once after it is produced; returns the
    per directed pair sequence of sent messages."""
    sent: Dict[Tuple[int, int], List[MetaStep]] = defaultdict(list)
    for r, steps in lists.items():
        have = set()
        produced = set()
        for i, a in enumerate(steps):
            if a.type in (T.RECV_F, T.RECV_B):
                have.add((a.stage_index, a.type, a.microbatch_index))
            elif a.type in (T.SEND_F, T.SEND_B):
                key = (a.stage_index, a.type, a.microbatch_index)
                if key not in produced:
                    raise ScheduleValidationError(f"{_where(r, i, a)}: sends a message that is not produced earlier "
                                                  "on this rank (or sends it twice)")
                produced.discard(key)
                sent[(r, peer_of(a, stage_to_rank))].append(a)
            for leaf in (a.leaves() if a.is_compute else ()):
                _need_input(leaf, r, i, have, stage_to_rank)
                msg = message_of(leaf, stage_to_rank)
                if msg is not None:
                    produced.add((msg[0].stage_index, msg[0].type, msg[0].microbatch_index))
        if produced:
            left = sorted(f"{s}{t.value}{mb}" for s, t, mb in produced)
            raise ScheduleValidationError(f"rank {r}: outputs are produced but never sent: {left}")
    return sent


def _need_input(leaf: MetaStep, r: int, i: int, have: set, stage_to_rank) -> None:
    s, n = leaf.stage_index, len(stage_to_rank)
    if leaf.type is T.F and s > 0 and stage_to_rank[s - 1] != r:
        key = (s, T.RECV_F, leaf.microbatch_index)
    elif leaf.type in (T.I, T.B) and s < n - 1 and stage_to_rank[s + 1] != r:
        key = (s, T.RECV_B, leaf.microbatch_index)
    else:
        return
    if key not in have:
        raise ScheduleValidationError(f"{_where(r, i, leaf)}: needs {key[0]}{key[1].value}{key[2]} from rank "
                                      f"{stage_to_rank[s - 1] if leaf.type is T.F else stage_to_rank[s + 1]} "
                                      "but no such RECV comes before it on this rank")


def _counterpart(a: MetaStep) -> MetaStep:
    """The step on the peer that completes SEND/RECV ``a``."""
    if a.type is T.SEND_F:
        return MetaStep(a.stage_index + 1, T.RECV_F, a.microbatch_index)
    if a.type is T.RECV_F:
        return MetaStep(a.stage_index - 1, T.SEND_F, a.microbatch_index)
    if a.type is T.SEND_B:
        return MetaStep(a.stage_index - 1, T.RECV_B, a.microbatch_index)
    return MetaStep(a.stage_index + 1, T.SEND_B, a.microbatch_index)


def _check_matching(lists, stage_to_rank, sent) -> None:
    received: Dict[Tuple[int, int], List[MetaStep]] = defaultdict(list)
    for r, steps in lists.items():
        for a in steps:
            if a.type in (T.RECV_F, T.RECV_B):
                received[(peer_of(a, stage_to_rank), r)].append(_counterpart(a))
    for pair in sorted(set(sent) | set(received)):
        s_list, r_list = sent.get(pair, []), received.get(pair, [])
        for k in range(max(len(s_list), len(r_list))):
            a = s_list[k] if k < len(s_list) else None
            b = r_list[k] if k < len(r_list) else None
            if a != b:
                raise ScheduleValidationError(
                    f"rank {pair[0]} -> rank {pair[1]}: message #{k} is sent as {a} but received as the counterpart "
                    f"of {b}; sends and receives between two ranks must name the same messages in the same order")


def _rendezvous_run(lists, stage_to_rank):
    ptr = {r: 0 for r in lists}
    order: List[Tuple[int, int, MetaStep]] = []
    while True:
        progress = False
        for r in sorted(lists):
            while ptr[r] < len(lists[r]) and not lists[r][ptr[r]].is_comm:
                order.append((r, ptr[r], lists[r][ptr[r]]))
                ptr[r] += 1
                progress = True
            if ptr[r] >= len(lists[r]):
                continue
            a = lists[r][ptr[r]]
            q = peer_of(a, stage_to_rank)
            if ptr[q] < len(lists[q]) and lists[q][ptr[q]] == _counterpart(a):
                first, second = ((r, a), (q, lists[q][ptr[q]])) if a.type in (T.SEND_F, T.SEND_B) else \
                    ((q, lists[q][ptr[q]]), (r, a))
                for rr, step in (first, second):
                    order.append((rr, ptr[rr], step))
                    ptr[rr] += 1
                progress = True
        if all(ptr[r] >= len(lists[r]) for r in lists):
            return order
        if not progress:
            raise ScheduleValidationError(_deadlock_message(lists, ptr, stage_to_rank))


def _deadlock_message(lists, ptr, stage_to_rank) -> str:
    waits = {}
    for r in sorted(lists):
        if ptr[r] < len(lists[r]):
            a = lists[r][ptr[r]]
            waits[r] = (a, peer_of(a, stage_to_rank), _counterpart(a))
    start = min(waits)
    seen: List[int] = []
    r: Optional[int] = start
    while r is not None and r not in seen:
        seen.append(r)
        r = waits[r][1] if waits[r][1] in waits else None
    if r is None:
        a, q, want = waits[seen[-1]]
        return (f"deadlock: rank {seen[-1]} waits at {a} for {want} on rank {q}, which has already finished its "
                "list")
    cycle = seen[seen.index(r):]
    first, second = cycle[0], cycle[1 % len(cycle)]
    a, _, want_a = waits[first]
    b, _, want_b = waits[second]
    chain = " -> ".join(f"rank {x} at {waits[x][0]}" for x in cycle)
    return (f"deadlock: rank {first} waits at {a} (position {ptr[first]}) for {want_a} on rank {second}, while "
            f"rank {second} waits at {b} (position {ptr[second]}) for {want_b}; wait cycle: {chain}")


def validate_lists(lists: Dict[int, Sequence[MetaStep]], stage_to_rank: Sequence[int],
                   n_microbatches: int, *, forward_only: bool = False) -> ValidationReport:
    """Validate executable (lowered) per-rank lists; see the module docstring. ``forward_only``: lists of
    an ``eval()`` (every microbatch's forward on every stage, no backward step)."""
    if not isinstance(lists, dict) or sorted(lists) != list(range(len(lists))):
        raise ScheduleValidationError(f"expected a dict with ranks 0..N-1 as keys, got {type(lists).__name__} "
                                      f"with keys {sorted(lists) if isinstance(lists, dict) else None}")
    stage_to_rank = tuple(stage_to_rank)
    bad = [r for r in stage_to_rank if r not in lists]
    if bad:
        raise ScheduleValidationError(f"stage placement names ranks {sorted(set(bad))} that have no list")
    lists = {r: tuple(a for a in steps if a is not None) for r, steps in lists.items()}
    _check_placement(lists, stage_to_rank, n_microbatches)
    _check_stage_order(lists, stage_to_rank, n_microbatches, forward_only)
    sent = _check_data(lists, stage_to_rank)
    _check_matching(lists, stage_to_rank, sent)
    order = _rendezvous_run(lists, stage_to_rank)
    return ValidationReport(lists, tuple(order))


def validate_schedule(schedule, *, fsdp: bool = False) -> ValidationReport:
    """Lower ``schedule`` (a :class:`~hyper_parallel.pipeline.schedules.Schedule`) and validate the lists.

    Raises :class:`ScheduleValidationError` naming the broken rule; for a deadlock, the first pair of
    steps that wait on each other."""
    try:
        lists = lower(schedule, fsdp=fsdp)
    except ValueError as exc:
        raise ScheduleValidationError(f"{schedule}: {exc}") from exc
    try:
        return validate_lists(lists, schedule.stage_to_rank, schedule.n_microbatches)
    except ScheduleValidationError as exc:
        raise ScheduleValidationError(f"{schedule}: {exc}") from exc
