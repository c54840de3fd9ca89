# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Tracked allocations on CPU: the allocator's live bytes at chosen points and the peak between them.

torch's profiler with ``profile_memory=True`` reports every allocation and free of the CPU allocator
with the allocator's process-wide running total of live bytes. :class:`AllocationTracker` records a
session and places *marks*: each mark allocates (and frees) a buffer of a unique, unusual size, so
the mark is found in the event stream and the running total just before it is the live bytes at
that point. Frees made on other threads (a swap writer releasing a tensor) update the same total.

Used by the activation tests (bytes of saved activations held in process memory) and benchmarks
(peak memory per mode). torch is imported only inside the methods.
"""
from __future__ import annotations

from typing import Dict, List, Tuple

__all__ = ["AllocationTracker"]

_BASE = 7_777_777  # mark sizes are _BASE + 8 * k bytes: far from any tensor size a test allocates


class AllocationTracker:
    """Context manager: ``with AllocationTracker() as tr: ...; tr.mark("a") ...``; then
    ``tr.live("a")`` (live bytes at mark ``a``, relative to the session start), ``tr.peak("a", "b")``
    (the highest live bytes between two marks) — available after the context exits."""

    def __init__(self) -> None:
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
        for n in events:
            f = n.extra_fields
            name = marks.get(abs(f.alloc_size))
            if name is not None:
                if f.alloc_size > 0:
                    self._live[name] = f.total_allocated - f.alloc_size
                    self._pos[name] = len(series)
                continue
            series.append((n.start_time_ns, f.total_allocated))
        missing = [m for m in self._names if m not in self._live]
        if missing:
            raise RuntimeError(f"AllocationTracker: marks {missing} were not seen by the profiler")
        base = self._live["__start__"]
        self._live = {k: v - base for k, v in self._live.items()}
        self._series = [(t, v - base) for t, v in series]

    def live(self, name: str) -> int:
        """Live bytes at mark ``name`` relative to the session start."""
        return self._live[name]

    def peak(self, start: str, end: str) -> int:
        """Highest live bytes (relative to the session start) between marks ``start`` and ``end``."""
        lo, hi = self._pos[start], self._pos[end]
        vals = [v for _, v in self._series[lo:hi]]
        return max([self._live[start], self._live[end], *vals])


def _walk(nodes):
    for n in nodes:
        yield n
        yield from _walk(n.children)
