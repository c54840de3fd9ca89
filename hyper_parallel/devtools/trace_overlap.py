# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""How long two kinds of intervals of a ``torch.profiler`` chrome trace run at the same time (pure Python).

The claim "communication overlaps computation" (or "the forward of one microbatch overlaps the backward
of another") is checked, not drawn: :func:`trace_overlap` reads the complete events (``"ph": "X"``) of a
chrome trace (``prof.export_chrome_trace(path)``), keeps those whose name matches pattern ``a`` and those
matching ``b``, and measures the time during which at least one ``a`` interval and at least one ``b``
interval are open (on different threads with ``different_threads=True``, the default: two compute
threads, or a thread computing while another waits in a transfer).

The ranges hyper-parallel records (torch backend):

* ``hp.pp.compute.<stage><F|B|I><mb>``: a pipeline stage's forward / backward of one microbatch;
* ``hp.comm.p2p.send`` / ``hp.comm.p2p.recv``: a pipeline transfer from posting to the completed wait;
* ``hp.comm.all_to_all_single``: an expert-parallel all-to-all, from issue to the completed wait
  (asynchronous dispatch) or the blocking call itself.

An in-flight range (posted, not yet waited) bounds the transfer from above: it says the transfer could
run during the other interval, while a blocking range (the thread sits inside the collective) says it
did. ::

    python -m hyper_parallel.devtools.trace_overlap trace.json --a 'hp\\.pp\\.compute\\.\\d+F' \\
        --b 'hp\\.pp\\.compute\\.\\d+[BI]'
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from typing import Any, Dict, List, Sequence, Tuple, Union

__all__ = ["Interval", "OverlapReport", "trace_intervals", "overlap_of", "trace_overlap", "main"]


@dataclass(frozen=True)
class Interval:
    """One complete trace event: ``[start_us, end_us)`` on thread ``tid`` of process ``pid``."""

    name: str
    start_us: float
    end_us: float
    pid: Any
    tid: Any


@dataclass(frozen=True)
class OverlapReport:
    """Result of :func:`overlap_of`.

    Attributes:
        a_us, b_us: total length of the union of the ``a`` / ``b`` intervals.
        both_us: time during which an ``a`` and a ``b`` interval are both open.
        pairs: (a name, b name, overlap us) of every intersecting pair, longest first.
        a_count, b_count: matched intervals.
    """

    a_us: float
    b_us: float
    both_us: float
    pairs: Tuple[Tuple[str, str, float], ...]
    a_count: int
    b_count: int

    @property
    def share_of_b(self) -> float:
        """``both_us / b_us`` (0 without ``b`` intervals): the share of ``b`` hidden under ``a``."""
        return self.both_us / self.b_us if self.b_us else 0.0

    def __str__(self) -> str:
        return (f"{self.a_count} a intervals ({self.a_us / 1e3:.2f} ms), {self.b_count} b intervals "
                f"({self.b_us / 1e3:.2f} ms); both open {self.both_us / 1e3:.2f} ms "
                f"({self.share_of_b * 100:.0f} % of b) in {len(self.pairs)} intersecting pairs")


def trace_intervals(trace: Union[str, Dict[str, Any]], pattern: str) -> List[Interval]:
    """The complete events of ``trace`` (a chrome-trace path or its loaded dict) whose name matches the
    regular expression ``pattern`` (``re.search``)."""
    if isinstance(trace, str):
        with open(trace, encoding="utf-8") as fh:
            trace = json.load(fh)
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        raise ValueError("trace_intervals(trace): expected a chrome trace (a JSON object with a 'traceEvents' "
                         "list, as torch.profiler's export_chrome_trace writes)")
    rx = re.compile(pattern)
    out = []
    for ev in trace["traceEvents"]:
        if ev.get("ph") == "X" and "dur" in ev and rx.search(str(ev.get("name", ""))):
            start = float(ev["ts"])
            out.append(Interval(str(ev["name"]), start, start + float(ev["dur"]), ev.get("pid"), ev.get("tid")))
    return out


def _union_length(intervals: Sequence[Tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for s, e in sorted(intervals):
        if e <= end:
            continue
        total += e - max(s, end)
        end = e
    return total


def overlap_of(a: Sequence[Interval], b: Sequence[Interval], *, different_threads: bool = True) -> OverlapReport:
    """How long ``a`` and ``b`` intervals are open together (see the module docstring)."""
    pieces, pairs = [], []
    for x in a:
        for y in b:
            if different_threads and (x.pid, x.tid) == (y.pid, y.tid):
                continue
            lo, hi = max(x.start_us, y.start_us), min(x.end_us, y.end_us)
            if hi > lo:
                pieces.append((lo, hi))
                pairs.append((x.name, y.name, hi - lo))
    pairs.sort(key=lambda p: -p[2])
    return OverlapReport(_union_length([(i.start_us, i.end_us) for i in a]),
                         _union_length([(i.start_us, i.end_us) for i in b]),
                         _union_length(pieces), tuple(pairs), len(a), len(b))


def trace_overlap(trace: Union[str, Dict[str, Any]], a: str, b: str, *, different_threads: bool = True
                  ) -> OverlapReport:
    """:func:`overlap_of` the events of ``trace`` matching patterns ``a`` and ``b``."""
    return overlap_of(trace_intervals(trace, a), trace_intervals(trace, b), different_threads=different_threads)


def main(argv=None) -> int:
    """CLI: print the overlap of two event patterns; exit 1 when they never overlap, 2 on bad input."""
    parser = argparse.ArgumentParser(prog="python -m hyper_parallel.devtools.trace_overlap",
                                     description="time during which two kinds of trace intervals are both open")
    parser.add_argument("trace", help="chrome trace JSON (torch.profiler export_chrome_trace)")
    parser.add_argument("--a", required=True, help="regular expression of the first kind of event names")
    parser.add_argument("--b", required=True, help="regular expression of the second kind")
    parser.add_argument("--same-thread", action="store_true", help="count intervals of one thread too")
    args = parser.parse_args(argv)
    try:
        report = trace_overlap(args.trace, args.a, args.b, different_threads=not args.same_thread)
    except (OSError, ValueError, re.error) as exc:
        print(f"trace_overlap: {exc}", file=sys.stderr)
        return 2
    print(report)
    for x, y, us in report.pairs[:10]:
        print(f"  {x} | {y}: {us / 1e3:.3f} ms")
    return 0 if report.both_us > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
