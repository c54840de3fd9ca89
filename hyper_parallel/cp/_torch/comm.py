# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Transports of context-parallel attention, with byte and time accounting.

Every transfer goes through this module, which records what this rank puts on the wire (from the
sizes and dtypes of the tensors actually sent: P2P sends count their bytes, an all-gather
``(c-1)`` times the local buffer, a reduce-scatter and an all-to-all ``(c-1)/c`` of their input)
and how long the rank waited for it. ``comm_stats()`` collects the records; the benchmark compares
the bytes with :mod:`hyper_parallel.cp.cost` and the exposed wait of the async ring with the
communication time of the sync ring.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Iterator, List, Optional

import torch
import torch.distributed as dist

from hyper_parallel.platform.base import CollectiveError

def _all_gather_1(*args, **kwargs):  # looked up per call, so a wrapper of torch.distributed sees it
    return (getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor)(*args, **kwargs)
def _reduce_scatter_1(*args, **kwargs):  # looked up per call, so a wrapper of torch.distributed sees it
    return (getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor)(*args, **kwargs)

__all__ = ["CommRecord", "CommStats", "comm_stats", "RingExchange", "Pending", "all_gather_flat",
           "reduce_scatter_flat", "all_to_all"]


@dataclass
class CommRecord:
    """One transfer: what, how many bytes this rank sent, seconds from start to completion as seen by
    this rank (``span_s``) and seconds it blocked waiting (``exposed_s``); ``posted``, ``wait_start``
    and ``wait_end`` are ``time.perf_counter()`` stamps (a system-wide monotonic clock on Linux, so
    stamps of ranks on one host compare: a wait that began before the peer posted is load skew)."""

    method: str
    phase: str
    kind: str
    nbytes: int
    span_s: float
    exposed_s: float
    overlapped: bool
    posted: float = 0.0
    wait_start: float = 0.0
    wait_end: float = 0.0


@dataclass
class CommStats:
    """Records of every CP transfer made while the collector was active."""

    records: List[CommRecord] = field(default_factory=list)

    def total_bytes(self, method: Optional[str] = None, phase: Optional[str] = None) -> int:
        """Bytes sent, optionally for one method / phase (``fwd`` or ``bwd``)."""
        return sum(r.nbytes for r in self._select(method, phase))

    def exposed_seconds(self, method: Optional[str] = None, phase: Optional[str] = None) -> float:
        """Seconds spent blocked on transfers."""
        return sum(r.exposed_s for r in self._select(method, phase))

    def span_seconds(self, method: Optional[str] = None, phase: Optional[str] = None) -> float:
        """Seconds from each transfer's start to its completion (the communication time of a sync
        transfer; an upper bound, overlapping compute, for an async one)."""
        return sum(r.span_s for r in self._select(method, phase))

    def _select(self, method, phase):
        return [r for r in self.records if (method is None or r.method == method)
                and (phase is None or r.phase == phase)]

    def clear(self) -> None:
        """Forget every record."""
        self.records.clear()


_COLLECTORS: List[CommStats] = []


@contextlib.contextmanager
def comm_stats() -> Iterator[CommStats]:
    """Collect a :class:`CommStats` of the CP transfers made inside the block (on this rank)."""
    stats = CommStats()
    _COLLECTORS.append(stats)
    try:
        yield stats
    finally:
        _COLLECTORS.remove(stats)


def _record(rec: CommRecord) -> None:
    for stats in _COLLECTORS:
        stats.records.append(rec)


def _fail(what: str, group, exc: Exception) -> CollectiveError:
    return CollectiveError(f"context parallel {what} over ranks {tuple(dist.get_process_group_ranks(group))} "
                           f"failed; a peer rank may have died or diverged: {exc}")


class Pending:
    """An exchange in flight; :meth:`wait` returns the received tensor."""

    def __init__(self, works, result: torch.Tensor, rec: CommRecord, start: float, overlapped: bool,
                 what: str, group) -> None:
        self._works = works
        self._result = result
        self._rec = rec
        self._start = start
        self._overlapped = overlapped
        self._what = what
        self._group = group

    def wait(self) -> torch.Tensor:
        """Block until the transfer is done; return what arrived."""
        t0 = time.perf_counter()
        try:
            for work in self._works:
                work.wait()
        except RuntimeError as exc:
            raise _fail(self._what, self._group, exc) from exc
        end = time.perf_counter()
        self._rec.exposed_s = end - t0
        self._rec.span_s = end - self._start
        self._rec.posted, self._rec.wait_start, self._rec.wait_end = self._start, t0, end
        self._rec.overlapped = self._overlapped
        _record(self._rec)
        return self._result


class RingExchange:
    """Send to the next rank of the CP group and receive from the previous one (P2P)."""

    def __init__(self, group, method: str) -> None:
        ranks = dist.get_process_group_ranks(group)
        me = dist.get_rank(group)
        self.group = group
        self.size = len(ranks)
        self.next = ranks[(me + 1) % self.size]
        self.prev = ranks[(me - 1) % self.size]
        self.method = method

    def start(self, send: torch.Tensor, phase: str, tag: int, overlapped: bool) -> Pending:
        """Post the send of ``send`` (contiguous) and the receive of a tensor like it."""
        recv = torch.empty_like(send)
        start = time.perf_counter()
        try:
            works = [dist.irecv(recv, src=self.prev, group=self.group, tag=tag),
                     dist.isend(send, dst=self.next, group=self.group, tag=tag)]
        except RuntimeError as exc:
            raise _fail("ring exchange", self.group, exc) from exc
        rec = CommRecord(self.method, phase, "p2p", send.numel() * send.element_size(), 0.0, 0.0, overlapped)
        return Pending(works, recv, rec, start, overlapped, "ring exchange", self.group)

    def exchange(self, send: torch.Tensor, phase: str, tag: int) -> torch.Tensor:
        """Blocking :meth:`start` + :meth:`Pending.wait`."""
        return self.start(send, phase, tag, overlapped=False).wait()


def all_gather_flat(flat: torch.Tensor, group, method: str, phase: str, async_op: bool = False):
    """All-gather a 1-D buffer: returns ``[c * n]`` (rank order), or a :class:`Pending` when ``async_op``."""
    n = dist.get_world_size(group)
    out = flat.new_empty((n * flat.numel(),))
    rec = CommRecord(method, phase, "all_gather", (n - 1) * flat.numel() * flat.element_size(), 0.0, 0.0, async_op)
    start = time.perf_counter()
    try:
        work = _all_gather_1(out, flat, group=group, async_op=True)
    except RuntimeError as exc:
        raise _fail("all_gather", group, exc) from exc
    pending = Pending([work], out, rec, start, async_op, "all_gather", group)
    return pending if async_op else pending.wait()


def reduce_scatter_flat(flat: torch.Tensor, group, method: str, phase: str) -> torch.Tensor:
    """Sum ``[c * n]`` over the group and keep this rank's ``n`` elements."""
    n = dist.get_world_size(group)
    out = flat.new_empty((flat.numel() // n,))
    rec = CommRecord(method, phase, "reduce_scatter", (n - 1) * out.numel() * flat.element_size(), 0.0, 0.0, False)
    start = time.perf_counter()
    try:
        work = _reduce_scatter_1(out, flat, op=dist.ReduceOp.SUM, group=group, async_op=True)
    except RuntimeError as exc:
        raise _fail("reduce_scatter", group, exc) from exc
    return Pending([work], out, rec, start, False, "reduce_scatter", group).wait()


class _AllToAll(torch.autograd.Function):
    """Move sharding from ``concat_dim`` to ``split_dim``; the adjoint is the inverse all-to-all."""

    @staticmethod
    def forward(ctx, x, group, split_dim, concat_dim, method):  # pylint: disable=arguments-differ
        """Forward on local tensors."""
        ctx.args = (group, split_dim, concat_dim, method)
        return _a2a(x, group, split_dim, concat_dim, method, "fwd")

    @staticmethod
    def backward(ctx, grad):  # pylint: disable=arguments-differ
        """The inverse all-to-all."""
        group, split_dim, concat_dim, method = ctx.args
        return _a2a(grad, group, concat_dim, split_dim, method, "bwd"), None, None, None, None


def _a2a(x: torch.Tensor, group, split_dim: int, concat_dim: int, method: str, phase: str) -> torch.Tensor:
    n = dist.get_world_size(group)
    split_dim %= x.ndim
    concat_dim %= x.ndim
    if x.shape[split_dim] % n:
        raise ValueError(f"all_to_all: dim {split_dim} of size {x.shape[split_dim]} is not divisible by {n}")
    src = x.movedim(split_dim, 0).contiguous()  # part j (rows j*m:(j+1)*m) goes to rank j
    out = torch.empty_like(src)
    rec = CommRecord(method, phase, "all_to_all", (n - 1) * src.numel() // n * x.element_size(), 0.0, 0.0, False)
    start = time.perf_counter()
    try:
        work = dist.all_to_all_single(out, src, group=group, async_op=True)
    except RuntimeError as exc:
        raise _fail("all_to_all", group, exc) from exc
    Pending([work], out, rec, start, False, "all_to_all", group).wait()
    parts = out.movedim(0, split_dim).chunk(n, split_dim)  # part j arrived from rank j
    return torch.cat(parts, concat_dim)


def all_to_all(x: torch.Tensor, group, split_dim: int, concat_dim: int, method: str = "alltoall") -> torch.Tensor:
    """Differentiable all-to-all: split ``split_dim`` into ``c`` parts (part ``j`` to rank ``j``) and
    concatenate what arrives along ``concat_dim`` in rank order."""
    return _AllToAll.apply(x, group, split_dim, concat_dim, method)
