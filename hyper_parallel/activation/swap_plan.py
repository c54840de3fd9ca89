# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Swap bookkeeping without tensors (pure): records, prefetch order, fusion and eligibility.

A *record* is one forward execution of one swap group (a layer) for one microbatch: the saved
activations it swapped out. Backward consumes records in the reverse order of their forward within a
microbatch, unless ``link(a, b)`` says that group ``b``'s record is needed right after ``a``'s; across
microbatches, backward follows the microbatch order (first forwarded, first backwarded — what GPipe
and 1F1B do) unless ``set_backward_order`` gives the pipeline schedule's order. When a record's
backward starts, the next ``depth`` records in that order are prefetched: this module returns which.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Hashable, List, Optional, Sequence, Tuple

__all__ = ["SwapSchedule", "Record", "SwapStats", "fusion_split", "is_swappable_size"]

FORWARD, CLOSED, STARTED, DONE = "forward", "closed", "started", "done"


@dataclass
class Record:
    """One group's saved activations of one forward (state: forward -> closed -> started -> done)."""

    rid: int
    group: str
    microbatch: Hashable
    state: str = FORWARD
    prefetched: bool = False


@dataclass
class SwapStats:
    """Counters of a swap manager (bytes and transfers in each direction, tensors kept in place)."""

    swapped_tensors: int = 0
    kept_tensors: int = 0
    bytes_out: int = 0
    bytes_in: int = 0
    transfers_out: int = 0
    transfers_in: int = 0
    fused_tensors: int = 0
    files_created: int = 0
    files_removed: int = 0

    def as_dict(self) -> Dict[str, int]:
        """The counters as a dict."""
        return dict(self.__dict__)


def is_swappable_size(nbytes: int, min_bytes: int) -> bool:
    """Tensors smaller than ``min_bytes`` stay where they are (a transfer costs more than it frees)."""
    return nbytes >= max(1, min_bytes)


def fusion_split(sizes: Sequence[int], fusion_bytes: int) -> Tuple[List[int], List[int]]:
    """Indices of tensors transferred alone (``size >= fusion_bytes``) and of those fused into one
    transfer per record (the rest), each in input order."""
    alone = [i for i, s in enumerate(sizes) if s >= fusion_bytes]
    fused = [i for i, s in enumerate(sizes) if s < fusion_bytes]
    return alone, fused


class SwapSchedule:
    """Records, links between groups, the backward order and the prefetch decisions."""

    def __init__(self, depth: int = 1) -> None:
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 0:
            raise ValueError(f"SwapSchedule(depth): expected an integer >= 0, got {depth!r}")
        self.depth = depth
        self.records: Dict[int, Record] = {}
        self._by_mb: Dict[Hashable, List[int]] = {}
        self._mb_order: List[Hashable] = []
        self._explicit_order: Optional[List[Hashable]] = None
        self._links: Dict[str, str] = {}
        self._next_id = 0
        self.prefetch_log: List[Tuple[str, Hashable]] = []
        self.backward_log: List[Tuple[str, Hashable]] = []

    # ------------------------------------------------------------------ configuration
    def link(self, group: str, prefetch_group: str) -> None:
        """When ``group``'s backward starts, prefetch ``prefetch_group`` (of the same microbatch)."""
        for what, g in (("layer", group), ("prefetch_layer", prefetch_group)):
            if not isinstance(g, str) or not g:
                raise ValueError(f"set_forward_prefetch_layer({what}): expected a group name, got {g!r}")
        if group == prefetch_group:
            raise ValueError(f"set_forward_prefetch_layer: a group cannot prefetch itself ({group!r})")
        self._links[group] = prefetch_group

    def links(self) -> Dict[str, str]:
        """group -> group prefetched when its backward starts."""
        return dict(self._links)

    def set_backward_order(self, microbatches: Sequence[Hashable]) -> None:
        """The order in which microbatches run backward (a pipeline schedule); default first-in first-out."""
        order = list(microbatches)
        if len(set(order)) != len(order):
            raise ValueError(f"set_backward_order: microbatch ids repeat in {order!r}")
        self._explicit_order = order

    # ------------------------------------------------------------------ forward
    def open(self, group: str, microbatch: Hashable = 0) -> Record:
        """A new record for ``group`` in ``microbatch`` (forward is running)."""
        rec = Record(self._next_id, group, microbatch)
        self._next_id += 1
        self.records[rec.rid] = rec
        if microbatch not in self._by_mb:
            self._by_mb[microbatch] = []
            self._mb_order.append(microbatch)
        self._by_mb[microbatch].append(rec.rid)
        return rec

    def close(self, rid: int) -> None:
        """Forward of the record's group finished."""
        rec = self.records[rid]
        if rec.state == FORWARD:
            rec.state = CLOSED

    # ------------------------------------------------------------------ backward
    def _pending(self, mb: Hashable) -> List[int]:
        return [r for r in self._by_mb.get(mb, []) if self.records[r].state == CLOSED]

    def pending(self, mb: Hashable) -> List[int]:
        """Records of microbatch ``mb`` whose forward ended and whose backward has not started."""
        return self._pending(mb)

    def _mb_sequence(self) -> List[Hashable]:
        if self._explicit_order is None:
            return list(self._mb_order)
        rest = [m for m in self._mb_order if m not in self._explicit_order]
        return [m for m in self._explicit_order if m in self._by_mb] + rest

    def _successor_in_mb(self, rec: Record, exclude: set) -> Optional[int]:
        pending = [r for r in self._pending(rec.microbatch) if r not in exclude]
        if not pending:
            return None
        target = self._links.get(rec.group)
        if target is not None:
            hits = [r for r in pending if self.records[r].group == target]
            if hits:
                return hits[-1]
        earlier = [r for r in pending if r < rec.rid]
        return earlier[-1] if earlier else pending[-1]

    def _first_of_next_mb(self, mb: Hashable, exclude: set) -> Optional[int]:
        seq = self._mb_sequence()
        start = seq.index(mb) + 1 if mb in seq else 0
        for m in seq[start:] + seq[:start]:
            if m == mb:
                continue
            pending = [r for r in self._pending(m) if r not in exclude]
            if pending:
                return pending[-1]
        return None

    def order_after(self, rid: int, count: int) -> List[int]:
        """The next ``count`` records backward will need after record ``rid`` (not yet started)."""
        out: List[int] = []
        cur = self.records[rid]
        exclude = {rid}
        while len(out) < count:
            nxt = self._successor_in_mb(cur, exclude)
            if nxt is None:
                nxt = self._first_of_next_mb(cur.microbatch, exclude)
            if nxt is None:
                break
            out.append(nxt)
            exclude.add(nxt)
            cur = self.records[nxt]
        return out

    def start_backward(self, rid: int) -> List[int]:
        """Record ``rid``'s backward starts: mark it, log it, and return the records to prefetch now
        (the next ``depth`` in backward order that are not prefetched yet)."""
        rec = self.records[rid]
        rec.state = STARTED
        self.backward_log.append((rec.group, rec.microbatch))
        todo = []
        for r in self.order_after(rid, self.depth):
            nxt = self.records[r]
            if not nxt.prefetched:
                nxt.prefetched = True
                todo.append(r)
                self.prefetch_log.append((nxt.group, nxt.microbatch))
        return todo

    def mark_prefetched(self, rid: int) -> bool:
        """Mark ``rid`` prefetched by an explicit request; False if it already was."""
        rec = self.records[rid]
        if rec.prefetched:
            return False
        rec.prefetched = True
        self.prefetch_log.append((rec.group, rec.microbatch))
        return True

    def finish(self, rid: int) -> None:
        """Every activation of record ``rid`` was consumed: forget it."""
        rec = self.records.pop(rid, None)
        if rec is None:
            return
        rec.state = DONE
        lst = self._by_mb.get(rec.microbatch)
        if lst is not None:
            lst.remove(rid)
            if not lst:
                del self._by_mb[rec.microbatch]
                self._mb_order.remove(rec.microbatch)

    def find(self, group: str, microbatch: Any) -> Optional[int]:
        """The latest pending record of ``group`` in ``microbatch``."""
        hits = [r for r in self._pending(microbatch) if self.records[r].group == group]
        return hits[-1] if hits else None

    def clear(self) -> None:
        """Forget every record (the logs stay until :meth:`reset_logs`)."""
        self.records.clear()
        self._by_mb.clear()
        self._mb_order.clear()

    def reset_logs(self) -> None:
        """Empty the prefetch and backward logs."""
        self.prefetch_log.clear()
        self.backward_log.clear()
