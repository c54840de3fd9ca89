# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Lowering a compute-only schedule to the lists a runtime executes (pure Python).

``lower(schedule)`` drops the idle slots and adds, per rank:

* ``REDUCE_GRAD`` right after a stage's last backward of the step (B or W counted per microbatch);
* ``UNSHARD`` / ``RESHARD`` (with ``fsdp=True``) so that a stage's parameters are gathered before
  its first compute of the step and freed after its last one — one gather per stage per step, which
  is what ``reshard_after_forward=False`` promises under pipelining;
* ``SEND_*`` / ``RECV_*`` by one global sweep: ranks are visited in a fixed order, a compute step
  is placed only when its input has been placed, and the moment it is placed its SEND goes on its
  own rank and the matching RECV on the receiver. Every rank's list is therefore ordered by sweep
  time, with each SEND and its RECV at the same time: sending and receiving in list order can never
  wait in a cycle, even when every send waits for its receive (rendezvous); ``validate_schedule``
  checks this for any list, including hand-written ones.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Dict, List, Optional, Sequence, Tuple

from hyper_parallel.pipeline.steps import MetaStep, MetaStepType

__all__ = ["lower", "add_reduce_grad", "add_unshard_reshard", "add_send_recv", "message_of", "peer_of"]

T = MetaStepType


def add_reduce_grad(steps: Sequence[Optional[MetaStep]], n_microbatches: int) -> List[MetaStep]:
    """Drop idle slots; put ``<stage>REDUCE_GRAD`` after the stage's ``n_microbatches``-th B or W."""
    out: List[MetaStep] = []
    seen: Dict[int, int] = defaultdict(int)
    for a in steps:
        if a is None:
            continue
        out.append(a)
        for leaf in a.leaves():
            if leaf.type in (T.B, T.W):
                seen[leaf.stage_index] += 1
                if seen[leaf.stage_index] == n_microbatches:
                    out.append(MetaStep(leaf.stage_index, T.REDUCE_GRAD))
    return out


def add_unshard_reshard(steps: Sequence[MetaStep]) -> List[MetaStep]:
    """``UNSHARD`` before a stage's first compute step and ``RESHARD`` after its last one (or after its
    ``REDUCE_GRAD``, which still reads the gathered parameters' gradients)."""
    first: Dict[int, int] = {}
    last: Dict[int, int] = {}
    for i, a in enumerate(steps):
        for leaf in (a.leaves() if a.is_compute or a.type is T.REDUCE_GRAD else ()):
            if a.is_compute:
                first.setdefault(leaf.stage_index, i)
            last[leaf.stage_index] = i
    out: List[MetaStep] = []
    for i, a in enumerate(steps):
        out += [MetaStep(s, T.UNSHARD) for s in sorted(first) if first[s] == i]
        out.append(a)
        out += [MetaStep(s, T.RESHARD) for s in sorted(last) if last[s] == i]
    return out


def message_of(a: MetaStep, stage_to_rank: Sequence[int]) -> Optional[Tuple[MetaStep, MetaStep]]:
    """(SEND on this rank, RECV on the peer) produced by compute step ``a``, or None (no cross-rank edge)."""
    s, n = a.stage_index, len(stage_to_rank)
    if a.type is T.F and s < n - 1 and stage_to_rank[s + 1] != stage_to_rank[s]:
        return MetaStep(s, T.SEND_F, a.microbatch_index), MetaStep(s + 1, T.RECV_F, a.microbatch_index)
    if a.type in (T.I, T.B) and s > 0 and stage_to_rank[s - 1] != stage_to_rank[s]:
        return MetaStep(s, T.SEND_B, a.microbatch_index), MetaStep(s - 1, T.RECV_B, a.microbatch_index)
    return None


def peer_of(a: MetaStep, stage_to_rank: Sequence[int]) -> int:
    """The other rank of a SEND/RECV step."""
    s = a.stage_index
    if a.type in (T.SEND_F, T.RECV_B):
        return stage_to_rank[s + 1]
    return stage_to_rank[s - 1]


def _input_ready(a: MetaStep, placed: set, stage_to_rank: Sequence[int]) -> bool:
    """True when the data compute step ``a`` consumes is available on its rank."""
    s, mb, n = a.stage_index, a.microbatch_index, len(stage_to_rank)
    if a.type is T.F and s > 0:
        if stage_to_rank[s - 1] != stage_to_rank[s]:
            return (s, T.RECV_F, mb) in placed
        return (s - 1, T.F, mb) in placed
    if a.type in (T.I, T.B) and s < n - 1:
        if stage_to_rank[s + 1] != stage_to_rank[s]:
            return (s, T.RECV_B, mb) in placed
        return (s + 1, T.I, mb) in placed or (s + 1, T.B, mb) in placed
    return True


def _place(a: MetaStep, r: int, out, placed, stage_to_rank) -> None:
    """Append ``a`` to rank ``r``; its SEND right after it and the matching RECV on the receiver."""
    out[r].append(a)
    for leaf in a.leaves():
        placed[r].add((leaf.stage_index, leaf.type, leaf.microbatch_index))
        msg = message_of(leaf, stage_to_rank) if leaf.is_compute else None
        if msg is not None:
            send, recv = msg
            out[r].append(send)
            q = stage_to_rank[recv.stage_index]
            out[q].append(recv)
            placed[q].add((recv.stage_index, recv.type, recv.microbatch_index))


def add_send_recv(steps: Dict[int, List[MetaStep]], stage_to_rank: Sequence[int]) -> Dict[int, List[MetaStep]]:
    """Insert SEND/RECV steps by the global sweep described in the module docstring.

    Raises ``ValueError`` naming the stuck head step of every rank when the compute lists cannot be
    placed at all (a rank needs data that no rank will ever produce first)."""
    out: Dict[int, List[MetaStep]] = {r: [] for r in steps}
    placed: Dict[int, set] = {r: set() for r in steps}
    ptr = {r: 0 for r in steps}
    while any(ptr[r] < len(steps[r]) for r in steps):
        progress = False
        for r in sorted(steps):
            if ptr[r] >= len(steps[r]):
                continue
            a = steps[r][ptr[r]]
            if a.is_compute and not all(_input_ready(x, placed[r], stage_to_rank) for x in a.leaves()):
                continue
            _place(a, r, out, placed, stage_to_rank)
            ptr[r] += 1
            progress = True
        if not progress:
            heads = {r: str(steps[r][ptr[r]]) for r in sorted(steps) if ptr[r] < len(steps[r])}
            raise ValueError(f"malformed compute schedule: no rank can place its next step (heads: {heads}); "
                             "each waits for an input that no rank produces before it")
    return out


def lower(schedule, *, fsdp: bool = False) -> Dict[int, List[MetaStep]]:
    """Every rank's executable list for ``schedule`` (see the module docstring)."""
    per_rank: Dict[int, List[MetaStep]] = {}
    for r in range(schedule.num_ranks):
        steps = add_reduce_grad(schedule.compute[r], schedule.n_microbatches)
        if fsdp:
            steps = add_unshard_reshard(steps)
        per_rank[r] = steps
    return add_send_recv(per_rank, schedule.stage_to_rank)
