# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Schedule generators (pure Python): each schedule is a function of (ranks, stages per rank,
microbatches) that returns every rank's list of compute ``MetaStep`` s, ``None`` marking an idle slot.

The lists are data: ``lower()`` adds the communication, ``validate_schedule`` proves it runs without
deadlock, ``simulate_schedule`` times it, ``schedule_to_csv`` / ``schedule_from_csv`` store it and
``explain_schedule`` draws it. For the schedules torch also ships, the lists equal
``torch.distributed.pipelining``'s ``pipeline_order`` (checked in the unit tests).

Stage placement: ``loop`` puts stage ``s`` on rank ``s % p`` (GPipe, 1F1B, interleaved, looped BFS);
``v`` (ZBV, DualPipeV) puts stages ``r`` and ``2p - 1 - r`` on rank ``r``.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from hyper_parallel.pipeline.mpipe import mpipe_ops
from hyper_parallel.pipeline.steps import MetaStep, MetaStepType

__all__ = ["Schedule", "ScheduleConstraintError", "SCHEDULES", "generate_schedule", "custom_schedule",
           "canonical_schedule_name", "mpipe_schedule",
           "stage_to_rank_map", "check_constraints", "pair_forward_backward"]

F, I, W, B = MetaStepType.F, MetaStepType.I, MetaStepType.W, MetaStepType.B
Slot = Optional[MetaStep]


class ScheduleConstraintError(ValueError):
    """The schedule cannot be built for these sizes; the message names the schedule, ``n_microbatches``,
    the stage count and what would be accepted."""


@dataclass(frozen=True)
class Schedule:
    """Every rank's compute list for one step of a pipeline schedule.

    Attributes:
        name: the schedule's canonical name (``"1F1B"``, ``"ZBVZeroBubble"`` … or ``"custom"``).
        num_ranks: pipeline ranks ``p``.
        num_stages: stages in all (``p * stages_per_rank``).
        n_microbatches: microbatches per step ``m``.
        stage_to_rank: rank of every stage.
        compute: rank -> list of compute steps (``None`` = idle slot, as in torch's ``pipeline_order``).
    """

    name: str
    num_ranks: int
    num_stages: int
    n_microbatches: int
    stage_to_rank: Tuple[int, ...]
    compute: Dict[int, Tuple[Slot, ...]] = field(hash=False)

    @property
    def stages_per_rank(self) -> int:
        """Stages each rank holds (``v``)."""
        return self.num_stages // self.num_ranks

    def stages_of(self, rank: int) -> Tuple[int, ...]:
        """The stages held by ``rank``, ascending."""
        return tuple(s for s, r in enumerate(self.stage_to_rank) if r == rank)

    def steps(self, rank: int) -> List[MetaStep]:
        """``rank``'s compute steps without the idle slots."""
        return [a for a in self.compute[rank] if a is not None]

    def forward_only(self) -> "Schedule":
        """The same schedule without its backward work (for ``eval()``): each rank keeps its forward steps
        in order (the forward half of an ``OVERLAP_F_B`` too); the name stays, so every rank agrees on it."""
        compute = {r: tuple(leaf for a in self.compute[r] if a is not None for leaf in a.leaves()
                            if leaf.type is MetaStepType.F) for r in self.compute}
        return Schedule(self.name, self.num_ranks, self.num_stages, self.n_microbatches, self.stage_to_rank, compute)

    def lowered(self, *, fsdp: bool = False):
        """Every rank's full list: compute, SEND/RECV, REDUCE_GRAD (and UNSHARD/RESHARD with ``fsdp``)."""
        from hyper_parallel.pipeline.lowering import lower  # pylint: disable=import-outside-toplevel
        return lower(self, fsdp=fsdp)

    def __str__(self) -> str:
        return (f"{self.name} schedule: {self.num_ranks} ranks, {self.num_stages} stages, "
                f"{self.n_microbatches} microbatches")


def stage_to_rank_map(num_ranks: int, num_stages: int, style: str = "loop") -> Tuple[int, ...]:
    """Rank of every stage: ``loop`` (``s % p``) or ``v`` (stages ``r`` and ``2p-1-r`` on rank ``r``)."""
    if style == "loop":
        return tuple(s % num_ranks for s in range(num_stages))
    if style == "v":
        if num_stages != 2 * num_ranks:
            raise ScheduleConstraintError(f"the 'v' stage placement needs exactly 2 stages per rank, got "
                                          f"{num_stages} stages on {num_ranks} ranks")
        return tuple(s if s < num_ranks else 2 * num_ranks - 1 - s for s in range(num_stages))
    raise ValueError(f"stage placement style: expected 'loop' or 'v', got {style!r}")


# ---------------------------------------------------------------------- single stage per rank
def _gpipe(p: int, m: int, r: int) -> List[Slot]:
    ops: List[Slot] = [None] * r
    ops += [MetaStep(r, F, k) for k in range(m)]
    ops += [None] * (3 * (p - 1 - r))
    ops += [MetaStep(r, B, k) for k in range(m)]
    return ops


def _one_f_one_b(p: int, m: int, r: int) -> List[Slot]:
    warm = min(m, p - 1 - r)
    ops: List[Slot] = [None] * r
    ops += [MetaStep(r, F, k) for k in range(warm)]
    ops += [None] * (2 * (p - 1 - r))
    fwd, bwd = warm, 0
    while fwd < m:
        ops += [MetaStep(r, F, fwd), MetaStep(r, B, bwd)]
        fwd += 1
        bwd += 1
    while bwd < m:
        ops += [None, MetaStep(r, B, bwd)]
        bwd += 1
    return ops


# ---------------------------------------------------------------------- several stages per rank
def _rounds(name: str, p: int, m: int, num_stages: int) -> Tuple[int, int]:
    rounds = max(1, m // p)
    if m % rounds:
        ok = sorted({k for k in range(1, 4 * p + 1) if k % max(1, k // p) == 0})
        raise ScheduleConstraintError(
            f"{name}: n_microbatches={m} with {num_stages} stages on {p} ranks is not allowed: the microbatches "
            f"run in max(1, m // p) = {rounds} rounds and m must be a multiple of that; accepted m up to {4 * p}: "
            f"{ok}")
    return rounds, m // rounds


def _interleaved_ops(p: int, v: int, m: int, r: int, zero_bubble: bool) -> List[Slot]:  # pylint: disable=too-many-locals
    _, per_round = _rounds("Interleaved", p, m, p * v)
    factor = 1 if zero_bubble else 2
    warm = min((v - 1) * per_round + factor * (p - 1 - r), m * v)
    total = v * m
    steady = total - warm

    def fwd_stage(k: int) -> int:
        return ((k // per_round) % v) * p + r

    def bwd_stage(k: int) -> int:
        return (v - 1 - ((k - warm) // per_round) % v) * p + r

    count: Dict[Tuple[MetaStepType, int], int] = defaultdict(int)

    def step(kind: MetaStepType, stage: int) -> MetaStep:
        mb = count[(kind, stage)]
        count[(kind, stage)] = mb + 1
        return MetaStep(stage, kind, mb)

    bwd_kind = I if zero_bubble else B
    ops: List[Slot] = [None] * r
    backward_ops: List[int] = []
    weights_done = 0
    idle_after_warmup = (p - r - 1) if zero_bubble else (v * p + 2 * (p - 1 - r)) - (warm + r)
    for k in range(warm + steady + warm):
        if k < warm:
            ops.append(step(F, fwd_stage(k)))
            if k == warm - 1:
                ops += [None] * max(0, idle_after_warmup)
            continue
        if k < warm + steady:
            ops.append(step(F, fwd_stage(k)))
        elif not zero_bubble:
            ops.append(None)
        ops.append(step(bwd_kind, bwd_stage(k)))
        backward_ops.append(k)
        if zero_bubble and k - warm >= r:
            ops.append(step(W, bwd_stage(backward_ops[weights_done])))
            weights_done += 1
    while zero_bubble and weights_done < len(backward_ops):
        ops.append(step(W, bwd_stage(backward_ops[weights_done])))
        weights_done += 1
    return ops


def _add_dependency_idles(compute: Dict[int, List[Slot]], num_stages: int) -> Dict[int, List[Slot]]:
    """Insert idle slots where a rank's next forward (or full backward) needs a step another rank has
    not finished in an earlier time slot (all ranks advance one slot per tick)."""
    done: set = set()
    out: Dict[int, List[Slot]] = {r: [] for r in compute}
    ptr = {r: 0 for r in compute}
    while any(ptr[r] < len(compute[r]) for r in compute):
        new = set()
        for r in sorted(compute):
            if ptr[r] >= len(compute[r]):
                continue
            a = compute[r][ptr[r]]
            if a is not None and _waits(a, done, num_stages):
                out[r].append(None)
                continue
            out[r].append(a)
            if a is not None:
                new.add((a.stage_index, a.type, a.microbatch_index))
            ptr[r] += 1
        done |= new
    return out


def _waits(a: MetaStep, done: set, num_stages: int) -> bool:
    if a.type is F:
        return a.stage_index > 0 and (a.stage_index - 1, F, a.microbatch_index) not in done
    if a.type is B:
        if a.stage_index == num_stages - 1:
            return (a.stage_index, F, a.microbatch_index) not in done
        return (a.stage_index + 1, B, a.microbatch_index) not in done
    return False


def _looped_bfs(p: int, v: int, m: int, r: int) -> List[Slot]:
    stages = list(range(r, p * v, p))
    ops: List[Slot] = [None] * r
    for s in stages:
        ops += [MetaStep(s, F, k) for k in range(m)]
    ops += [None] * (2 * (p - 1 - r))
    for s in reversed(stages):
        ops += [MetaStep(s, B, k) for k in reversed(range(m))]
    return ops


def _zbv(p: int, m: int, r: int) -> List[Slot]:  # pylint: disable=too-many-locals
    """ZB-V (zero bubble paper, section 6): V placement, F/I/W of two chunks interleaved."""
    n = max(2 * p - 1, m)
    s0, s1 = r, 2 * p - 1 - r
    nxt = defaultdict(int)

    def take(kind: MetaStepType, stage: int) -> MetaStep:
        mb = nxt[(kind, stage)]
        nxt[(kind, stage)] = mb + 1
        return MetaStep(stage, kind, mb)

    ops: List[Slot] = [None] * r
    ops += [take(F, s0) for _ in range(2 * (p - r) - 1)]
    for _ in range(r):
        ops += [take(F, s1), take(F, s0)]
    for _ in range(p - r):
        ops += [take(F, s1), take(I, s1), take(W, s1)]
    while nxt[(F, s1)] < nxt[(F, s0)] or nxt[(F, s0)] < n:
        if nxt[(F, s0)] < n:
            ops.append(take(F, s0))
        ops += [take(I, s0), take(W, s0), take(F, s1), take(I, s1), take(W, s1)]
    for _ in range(r):
        ops += [take(I, s0), take(I, s1)]
    for _ in range(p - r):
        ops += [take(I, s0), take(W, s0)]
    while nxt[(W, s1)] < nxt[(I, s1)]:
        ops.append(take(W, s1))
    while nxt[(W, s0)] < nxt[(I, s0)]:
        ops.append(take(W, s0))
    return [a if a is not None and a.microbatch_index < m else None for a in ops]


def _dualpipev(p: int, m: int, r: int) -> List[Slot]:  # pylint: disable=too-many-locals
    """DualPipeV (DeepSeek's DualPipe folded onto a V placement): 8 phases per rank."""
    s0, s1 = r, 2 * p - 1 - r
    nxt = defaultdict(int)
    pending_w: List[Tuple[int, int]] = []
    ops: List[Slot] = []

    def fwd(stage: int) -> MetaStep:
        mb = nxt[(F, stage)]
        nxt[(F, stage)] = mb + 1
        return MetaStep(stage, F, mb)

    def bwd(stage: int, split: bool) -> MetaStep:
        mb = nxt[(I, stage)]
        nxt[(I, stage)] = mb + 1
        if split:
            pending_w.append((stage, mb))
            return MetaStep(stage, I, mb)
        return MetaStep(stage, B, mb)

    def weight() -> None:
        if pending_w:
            stage, mb = pending_w.pop(0)
            ops.append(MetaStep(stage, W, mb))

    ops += [fwd(s0) for _ in range(2 * (p - r - 1))]
    for _ in range(r + 1):
        ops += [fwd(s0), fwd(s1)]
    for _ in range(p - r - 1):
        ops.append(bwd(s1, True))
        weight()
        ops.append(fwd(s1))
    for i in range(m - 2 * p + r + 1):
        if i == 0 and r == p - 1:
            ops += [fwd(s0), bwd(s1, False)]
        else:
            ops.append(MetaStep.overlap(fwd(s0), bwd(s1, False)))
        ops.append(MetaStep.overlap(fwd(s1), bwd(s0, False)))
    for _ in range(p - r - 1):
        ops.append(bwd(s1, False))
        ops.append(MetaStep.overlap(fwd(s1), bwd(s0, False)))
    split = False
    for i in range(r + 1):
        if i == (r + 1) // 2 and r % 2 == 1:
            split = True
        ops.append(bwd(s1, split))
        if i == (r + 1) // 2 and r % 2 == 0:
            split = True
        ops.append(bwd(s0, split))
    for _ in range(p - r - 1):
        weight()
        ops.append(bwd(s0, split))
    for _ in range(r + 1):
        weight()
    return ops


# ---------------------------------------------------------------------- registry
@dataclass(frozen=True)
class _Kind:
    name: str
    multi: bool           # several stages per rank
    style: str            # stage placement
    build: Callable[[int, int, int, int], List[Slot]]  # (p, v, m, rank) -> ops
    fixed_v: Optional[int] = None


SCHEDULES: Dict[str, _Kind] = {k.name: k for k in (
    _Kind("GPipe", False, "loop", lambda p, v, m, r: _gpipe(p, m, r)),
    _Kind("1F1B", False, "loop", lambda p, v, m, r: _one_f_one_b(p, m, r)),
    _Kind("Interleaved1F1B", True, "loop", lambda p, v, m, r: _interleaved_ops(p, v, m, r, False)),
    _Kind("LoopedBFS", True, "loop", _looped_bfs),
    _Kind("InterleavedZeroBubble", True, "loop", lambda p, v, m, r: _interleaved_ops(p, v, m, r, True)),
    _Kind("ZBVZeroBubble", True, "v", lambda p, v, m, r: _zbv(p, m, r), fixed_v=2),
    _Kind("DualPipeV", True, "v", lambda p, v, m, r: _dualpipev(p, m, r), fixed_v=2),
    _Kind("Mpipe", False, "loop", lambda p, v, m, r: mpipe_ops(p, m, r)),
)}
_ALIASES = {"zbv": "ZBVZeroBubble", "zbh1": "InterleavedZeroBubble", "zb1p": "InterleavedZeroBubble",
            "interleavedzb": "InterleavedZeroBubble", "interleaved": "Interleaved1F1B"}


def canonical_schedule_name(name: str) -> str:
    """The registered name for ``name`` (case-insensitive; aliases ``zbv``, ``zbh1``, ``zb1p``)."""
    if not isinstance(name, str):
        raise TypeError(f"schedule name: expected a string, got {type(name).__name__}")
    low = name.strip().lower()
    for key in SCHEDULES:
        if key.lower() == low:
            return key
    if low in _ALIASES:
        return _ALIASES[low]
    raise ValueError(f"unknown schedule {name!r}; expected one of {sorted(SCHEDULES)} (case-insensitive)")


def check_constraints(name: str, num_ranks: int, n_microbatches: int, stages_per_rank: int) -> None:
    """Raise :class:`ScheduleConstraintError` when ``name`` cannot run with these sizes."""
    kind = SCHEDULES[canonical_schedule_name(name)]
    p, m, v = num_ranks, n_microbatches, stages_per_rank
    for label, value in (("num_ranks", p), ("n_microbatches", m), ("stages_per_rank", v)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ScheduleConstraintError(f"{kind.name}: {label} must be a positive int, got {value!r}")
    stages = p * v
    if not kind.multi and v != 1:
        raise ScheduleConstraintError(f"{kind.name} runs one stage per rank; got {v} stages per rank ({stages} "
                                      f"stages on {p} ranks): use Interleaved1F1B, LoopedBFS or a V schedule")
    if kind.fixed_v is not None and v != kind.fixed_v:
        raise ScheduleConstraintError(f"{kind.name} needs exactly {kind.fixed_v} stages per rank (V placement); got "
                                      f"{stages} stages on {p} ranks")
    if kind.name in ("Interleaved1F1B", "InterleavedZeroBubble"):
        _rounds(kind.name, p, m, stages)
    if kind.name == "Mpipe" and p < 2:
        raise ScheduleConstraintError(f"Mpipe: num_ranks={p}: it needs the encoder position and at least one "
                                      "language-model position (num_ranks >= 2)")
    if kind.name == "DualPipeV" and m < stages:
        raise ScheduleConstraintError(f"DualPipeV: n_microbatches={m} with {stages} stages on {p} ranks is not "
                                      f"allowed: it needs n_microbatches >= num_stages = {stages}")


def generate_schedule(name: str, num_ranks: int, n_microbatches: int, stages_per_rank: Optional[int] = None
                      ) -> Schedule:
    """Every rank's compute list of schedule ``name`` (constraints checked first, with a clear error).

    ``stages_per_rank`` defaults to 1 for single-stage schedules and 2 for the others.
    """
    kind = SCHEDULES[canonical_schedule_name(name)]
    v = stages_per_rank if stages_per_rank is not None else (2 if kind.multi else 1)
    check_constraints(kind.name, num_ranks, n_microbatches, v)
    stages = num_ranks * v
    compute = {r: kind.build(num_ranks, v, n_microbatches, r) for r in range(num_ranks)}
    if kind.name == "InterleavedZeroBubble":
        compute = _add_dependency_idles(compute, stages)
    mapping = stage_to_rank_map(num_ranks, stages, kind.style)
    return Schedule(kind.name, num_ranks, stages, n_microbatches, mapping,
                    {r: tuple(ops) for r, ops in compute.items()})


def mpipe_schedule(num_ranks: int, n_microbatches: int, encoder_ahead: Optional[int] = None) -> Schedule:
    """The Mpipe schedule (``pipeline/mpipe.py``) with the encoder ``encoder_ahead`` forwards ahead
    (``None``: all of them); ``generate_schedule("Mpipe", ...)`` is this with the default."""
    check_constraints("Mpipe", num_ranks, n_microbatches, 1)
    if encoder_ahead is not None and encoder_ahead < min(n_microbatches, num_ranks - 1):
        raise ScheduleConstraintError(f"Mpipe: encoder_ahead={encoder_ahead} with {num_ranks} positions: the encoder "
                                      f"must run at least num_ranks - 1 = {num_ranks - 1} forwards ahead (the first "
                                      "LM stage's 1F1B warm-up needs them before any backward returns)")
    compute = {r: tuple(mpipe_ops(num_ranks, n_microbatches, r, encoder_ahead)) for r in range(num_ranks)}
    return Schedule("Mpipe", num_ranks, num_ranks, n_microbatches, stage_to_rank_map(num_ranks, num_ranks), compute)


def _stage_owners(compute: Dict[int, Sequence[Slot]]) -> Dict[int, int]:
    owner: Dict[int, int] = {}
    for r in sorted(compute):
        for leaf in (x for a in compute[r] if a is not None for x in a.leaves()):
            if owner.setdefault(leaf.stage_index, r) != r:
                raise ValueError(f"custom_schedule: stage {leaf.stage_index} appears on rank "
                                 f"{owner[leaf.stage_index]} and on rank {r} (a stage lives on one rank)")
    return owner


def custom_schedule(compute: Dict[int, Sequence[Slot]], n_microbatches: int, num_stages: Optional[int] = None,
                    name: str = "custom") -> Schedule:
    """A :class:`Schedule` from hand-written per-rank lists; the stage placement is read off the lists."""
    if not isinstance(compute, dict) or not compute:
        raise ValueError("custom_schedule(compute): expected a non-empty dict rank -> list of MetaStep/None")
    ranks = sorted(compute)
    if ranks != list(range(len(ranks))):
        raise ValueError(f"custom_schedule(compute): ranks must be 0..{len(ranks) - 1}, got {ranks}")
    owner = _stage_owners(compute)
    n = num_stages if num_stages is not None else (max(owner) + 1 if owner else len(ranks))
    missing = [s for s in range(n) if s not in owner]
    if missing:
        raise ValueError(f"custom_schedule: stages {missing} of 0..{n - 1} have no step on any rank")
    mapping = tuple(owner[s] for s in range(n))
    return Schedule(name, len(ranks), n, n_microbatches, mapping, {r: tuple(compute[r]) for r in ranks})


# ---------------------------------------------------------------------- overlap_b_f pairing
def _pair_candidates(ops: Sequence[Slot]) -> List[int]:
    """Indices ``i`` where ``ops[i]`` is a forward and ``ops[i + 1]`` a backward (B or I) of another
    microbatch: the two are independent (a backward of microbatch b waits only on b's own forwards and
    later backwards), so they may run at the same time."""
    out = []
    for i in range(len(ops) - 1):
        a, b = ops[i], ops[i + 1]
        if a is not None and b is not None and a.type is F and b.type in (B, I) \
                and a.microbatch_index != b.microbatch_index:
            out.append(i)
    return out


def _with_pairs(compute: Dict[int, Tuple[Slot, ...]], chosen: Dict[int, set]) -> Dict[int, Tuple[Slot, ...]]:
    out = {}
    for r, ops in compute.items():
        new: List[Slot] = []
        i = 0
        while i < len(ops):
            if i in chosen[r]:
                new.append(MetaStep.overlap(ops[i], ops[i + 1]))
                i += 2
            else:
                new.append(ops[i])
                i += 1
        out[r] = tuple(new)
    return out


def _runs(schedule: "Schedule") -> bool:
    """True when ``schedule`` lowers and validates (no deadlock)."""
    from hyper_parallel.pipeline.validate import (ScheduleValidationError,  # pylint: disable=import-outside-toplevel
                                                  validate_schedule)
    try:
        validate_schedule(schedule)
    except ScheduleValidationError:
        return False
    return True


def pair_forward_backward(schedule: Schedule) -> Schedule:
    """``schedule`` with adjacent forward/backward steps of different microbatches fused into
    ``OVERLAP_F_B`` steps (what ``overlap_b_f=True`` runs on two compute threads).

    A pair is kept only if the whole schedule still lowers and validates with it (pairs are tried in
    list order, rank by rank; one that would make two ranks wait on each other is left unpaired), so
    the result is deadlock-free by the validator's proof. Steps already paired (DualPipeV) stay as
    they are; a schedule without candidates is returned unchanged.
    """
    compute = {r: tuple(ops) for r, ops in schedule.compute.items()}
    candidates = {r: _pair_candidates(ops) for r, ops in compute.items()}
    chosen: Dict[int, set] = {r: set() for r in compute}

    def build(pairs: Dict[int, set]) -> Schedule:
        return Schedule(schedule.name, schedule.num_ranks, schedule.num_stages, schedule.n_microbatches,
                        schedule.stage_to_rank, _with_pairs(compute, pairs))

    everything = {r: set(_non_overlapping(c)) for r, c in candidates.items()}
    if _runs(build(everything)):
        return build(everything)
    for r in sorted(candidates):
        for i in _non_overlapping(candidates[r]):
            trial = {q: set(v) for q, v in chosen.items()}
            trial[r].add(i)
            if _runs(build(trial)):
                chosen = trial
    return build(chosen)


def _non_overlapping(indices: Sequence[int]) -> List[int]:
    """Candidate starts with no two sharing a step (``i`` and ``i + 1`` cannot both start a pair)."""
    out: List[int] = []
    for i in indices:
        if not out or i > out[-1] + 1:
            out.append(i)
    return out
