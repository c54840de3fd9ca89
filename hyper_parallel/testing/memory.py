# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Tracked allocations on CPU: the allocator's live bytes at chosen points and the peak between them.

torch's profiler with ``profile_memory=True`` reports every allocation and free of the CPU allocator
with the allocator's process-wide running total of live bytes. :class:`AllocationTracker` records a
session and places *marks*: each mark allocates (and frees) a buffer of a unique, unusual size, so
the mark is found in the event stream and the running total just before it is the live bytes at
that point. Frees made on other threads (a swap writer releasing a tensor) update the same total.

The allocator's running total is not decremented for a block freed on a thread the profiler does not
see (a gloo worker thread dropping the last reference to a collective's buffer after its work ended):
it then drifts upwards by an amount that depends on thread timing. ``AllocationTracker(by_pointer=True)``
replays the allocation events by address instead (an allocation at an address that is still live means
the earlier block was freed unseen; such a block is freed with its collective's staging buffer on the
worker thread, see :func:`replay_by_pointer`), which does not drift.

Used by the activation tests (bytes of saved activations held in process memory) and benchmarks
(peak memory per mode). torch is imported only inside the methods.
"""
from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

__all__ = ["AllocationTracker", "replay_by_pointer"]

_BASE = 7_777_777  # mark sizes are _BASE + 8 * k bytes: far from any tensor size a test allocates


class AllocationTracker:
    """Context manager: ``with AllocationTracker() as tr: ...; tr.mark("a") ...``; then
    ``tr.live("a")`` (live bytes at mark ``a``, relative to the session start), ``tr.peak("a", "b")``
    (the highest live bytes between two marks) — available after the context exits."""

    def __init__(self, by_pointer: bool = False) -> None:
        self._by_pointer = by_pointer
        self._names: List[str] = []
        self._prof = None
        self._live: Dict[str, int] = {}
        self._series: List[Tuple[int, int]] = []
        self._pos: Dict[str, int] = {}

    def __enter__(self) -> "AllocationTracker":
        from torch.profiler import ProfilerActivity, profile
        self._prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
        self._prof.__enter__()
        self.mark("__start__")
        return self

    def mark(self, name: str) -> None:
        """Record the live bytes now under ``name``."""
        import torch
        if name in self._names:
            raise ValueError(f"AllocationTracker.mark: {name!r} used twice")
        self._names.append(name)
        buf = torch.empty(_BASE + 8 * len(self._names), dtype=torch.uint8)
        del buf

    def __exit__(self, *exc) -> None:
        import torch
        self._prof.__exit__(*exc)
        if exc[0] is not None:
            return
        alloc_tag = torch._C._profiler._EventType.Allocation
        events = sorted((n for n in _walk(self._prof.profiler.kineto_results.experimental_event_tree())
                         if n.tag == alloc_tag), key=lambda n: n.start_time_ns)
        marks = {_BASE + 8 * (i + 1): name for i, name in enumerate(self._names)}
        series: List[Tuple[int, int]] = []
        for n, total in zip(events, self._totals(events, marks)):
            f = n.extra_fields
            name = marks.get(abs(f.alloc_size))
            if name is not None:
                if f.alloc_size > 0:
                    self._live[name] = total - f.alloc_size
                    self._pos[name] = len(series)
                continue
            series.append((n.start_time_ns, total))
        missing = [m for m in self._names if m not in self._live]
        if missing:
            raise RuntimeError(f"AllocationTracker: marks {missing} were not seen by the profiler")
        base = self._live["__start__"]
        self._live = {k: v - base for k, v in self._live.items()}
        self._series = [(t, v - base) for t, v in series]

    def _totals(self, events, marks) -> List[int]:
        if not self._by_pointer:
            return [n.extra_fields.total_allocated for n in events]
        main = next(n.start_tid for n in events if abs(n.extra_fields.alloc_size) in marks)
        return replay_by_pointer([(n.start_tid != main, n.extra_fields.ptr, n.extra_fields.alloc_size)
                                  for n in events])

    def live(self, name: str) -> int:
        """Live bytes at mark ``name`` relative to the session start."""
        return self._live[name]

    def peak(self, start: str, end: str) -> int:
        """Highest live bytes (relative to the session start) between marks ``start`` and ``end``."""
        lo, hi = self._pos[start], self._pos[end]
        vals = [v for _, v in self._series[lo:hi]]
        return max([self._live[start], self._live[end], *vals])


def _unseen_frees(events: Sequence[Tuple[bool, int, int]]) -> Dict[int, int]:
    """``{worker free event index: allocation event index}`` for blocks allocated on the main thread whose
    free was never seen (their address was allocated again, or they outlive the session): such a block was
    the buffer of a collective whose work object, released last on the library's worker thread, freed it
    right after the work ended; it is paired with the next unpaired free of the same size on a worker
    thread (the collective's own staging buffer, freed as the work ends)."""
    live: Dict[int, int] = {}
    lost: List[int] = []
    for i, (_, ptr, size) in enumerate(events):
        if size > 0:
            if ptr in live:
                lost.append(live[ptr])
            live[ptr] = i
        else:
            live.pop(ptr, None)
    lost.extend(live.values())
    worker_frees: Dict[int, List[int]] = {}
    for i, (worker, _, size) in enumerate(events):
        if worker and size < 0:
            worker_frees.setdefault(-size, []).append(i)
    pairs: Dict[int, int] = {}
    for a in sorted(i for i in lost if not events[i][0]):
        free = next((j for j in worker_frees.get(events[a][2], ()) if j > a and j not in pairs), None)
        if free is not None:
            pairs[free] = a
    return pairs


def replay_by_pointer(events: Sequence[Tuple[bool, int, int]]) -> List[int]:
    """Live bytes after each ``(on_worker_thread, address, size)`` event (``size`` > 0 allocation, < 0 free),
    replayed by address; frees the profiler missed are placed by :func:`_unseen_frees`."""
    pairs = _unseen_frees(events)
    blocks: Dict[int, Tuple[int, int]] = {}  # address -> (allocation event index, size)
    total, out = 0, []
    for i, (_, ptr, size) in enumerate(events):
        if size > 0:
            total += size - blocks.get(ptr, (0, 0))[1]  # a live address again: its old block was freed unseen
            blocks[ptr] = (i, size)
        else:
            # a block from before the session is freed by its size; ours by what we recorded
            total -= blocks.pop(ptr, (0, -size))[1]
        if i in pairs:
            a = pairs[i]
            ptr_a = events[a][1]
            if blocks.get(ptr_a, (None,))[0] == a:
                total -= blocks.pop(ptr_a)[1]
        out.append(total)
    return out


def _walk(nodes):
    for n in nodes:
        yield n
        yield from _walk(n.children)
