# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``SwapManager``: named swap groups, their prefetch links, the swap target and the step lifecycle.

The manager is backend-free: it owns the configuration, the :class:`SwapSchedule` (records and
prefetch order), the disk store and the counters. The tensors are handled by a backend *engine*
(``hyper_parallel.activation._torch.swap.TorchSwapEngine`` or the MindSpore one), attached on first
use, which packs saved tensors into per-record data and brings them back.

Lifecycle of one record (one group's activations of one forward):
``open`` (forward of the group starts) -> tensors packed (large ones start their transfer at once,
small ones wait to be fused) -> ``close`` (the fused transfer starts) -> first use in backward
(``start_backward``: load it if no prefetch did, and prefetch the next records in backward order)
-> every tensor used -> ``finish`` (files removed, buffers dropped).
"""
from __future__ import annotations

import contextlib
from typing import Any, Dict, Hashable, Iterator, List, Optional, Sequence

from hyper_parallel.activation.config import SwapConfig, _parse_swap
from hyper_parallel.activation.disk import DiskStore
from hyper_parallel.activation.swap_plan import SwapSchedule, SwapStats

__all__ = ["SwapManager", "SwapError", "default_manager"]

_DEFAULT: List["SwapManager"] = []


class SwapError(RuntimeError):
    """Swapped activations are unavailable (already consumed, discarded, or a transfer failed)."""


def _config(target, directory, min_bytes, fusion_bytes, prefetch, io) -> SwapConfig:
    """The same checks and messages as the config block (``SwapManager.min_bytes: expected ...``)."""
    block: Dict[str, Any] = {"target": target, "min_bytes": min_bytes, "fusion_bytes": fusion_bytes,
                             "prefetch": prefetch, "io": io}
    if directory is not None:
        block["dir"] = directory
    return _parse_swap(block, "SwapManager")


class SwapManager:
    """Swaps saved activations of named groups (layers) out of the device and back, one group ahead.

    Args:
        target: ``"auto"`` (pinned host memory for accelerator tensors, disk for CPU tensors), ``"host"``
            or ``"disk"``.
        directory: where disk swap files go (default: a fresh directory under the system temp dir,
            removed when the manager closes).
        min_bytes: saved tensors smaller than this stay in place.
        fusion_bytes: saved tensors smaller than this are packed with the group's other small ones
            into one transfer when the group's forward ends (swap fusion).
        prefetch: how many groups ahead of backward are brought back (0: on demand only).
        io: disk I/O path, ``"pread"`` (``pwrite``/``preadv``) or ``"mmap"`` (memory-mapped copies).
    """

    def __init__(self, target: str = "auto", directory: Optional[str] = None, *, min_bytes: int = 64 * 1024,
                 fusion_bytes: int = 1024 * 1024, prefetch: int = 1, io: str = "pread") -> None:
        cfg = _config(target, directory, min_bytes, fusion_bytes, prefetch, io)
        self.config = cfg
        self.schedule = SwapSchedule(cfg.prefetch)
        self.stats = SwapStats()
        self._store: Optional[DiskStore] = None
        self._engine: Any = None
        self._data: Dict[int, Any] = {}
        self._open: List[int] = []
        self._microbatch: Hashable = 0
        self._closed = False

    @classmethod
    def from_config(cls, cfg: SwapConfig) -> "SwapManager":
        """A manager for a parsed ``activation.swap`` block."""
        return cls(cfg.target, cfg.directory, min_bytes=cfg.min_bytes, fusion_bytes=cfg.fusion_bytes,
                   prefetch=cfg.prefetch, io=cfg.io)

    # ------------------------------------------------------------------ user API
    def set_forward_prefetch_layer(self, layer: str, prefetch_layer: str) -> None:
        """When group ``layer``'s backward starts, bring back group ``prefetch_layer``'s activations
        (default without links: the group that ran just before it in forward)."""
        self.schedule.link(layer, prefetch_layer)

    def set_backward_order(self, microbatches: Sequence[Hashable]) -> None:
        """The order in which microbatches run backward (a pipeline schedule's order; default: the
        order of their forwards)."""
        self.schedule.set_backward_order(microbatches)

    @contextlib.contextmanager
    def microbatch(self, microbatch: Hashable) -> Iterator[None]:
        """Tag the groups that run forward inside this context with ``microbatch``."""
        prev = self._microbatch
        self._microbatch = microbatch
        try:
            yield
        finally:
            self._microbatch = prev

    def prefetch(self, group: str, microbatch: Hashable = 0) -> bool:
        """Start bringing back ``group``'s activations of ``microbatch`` now (a pipeline runtime calls
        this from its schedule); False when there is nothing pending or it is already on its way."""
        rid = self.schedule.find(group, microbatch)
        if rid is None or not self.schedule.mark_prefetched(rid):
            return False
        self._engine.load(self._data[rid])
        return True

    def pending_groups(self, microbatch: Hashable) -> List[str]:
        """Groups of ``microbatch`` with swapped activations not used yet, in forward order."""
        return [self.schedule.records[r].group for r in self.schedule.pending(microbatch)]

    @contextlib.contextmanager
    def step(self) -> Iterator["SwapManager"]:
        """One training step: whatever happens inside (an exception included), every swap file and
        buffer of the step is gone when the context exits."""
        try:
            yield self
        finally:
            self.clear()

    def wait(self) -> None:
        """Block until every transfer started so far finished (raises a transfer's error)."""
        if self._store is not None:
            self._store.drain()
        if self._engine is not None:
            self._engine.synchronize()

    def clear(self) -> None:
        """Drop every record (files removed, buffers released); their activations can no longer be used."""
        for rid in list(self._data):
            self._release(rid)
        self.schedule.clear()
        self._open.clear()
        if self._store is not None:
            self.stats.files_removed += self._store.remove_all()

    def close(self) -> None:
        """:meth:`clear`, then stop the disk threads and remove the manager's own directory."""
        if self._closed:
            return
        self.clear()
        if self._store is not None:
            self._store.close()
        self._closed = True

    def live_files(self) -> List[str]:
        """Swap files that exist right now."""
        return self._store.live_files() if self._store is not None else []

    @property
    def directory(self) -> Optional[str]:
        """The directory of the disk swap files (None before the first disk swap)."""
        return self._store.directory if self._store is not None else self.config.directory

    @property
    def prefetch_log(self) -> List[tuple]:
        """(group, microbatch) in the order prefetches were issued."""
        return list(self.schedule.prefetch_log)

    @property
    def backward_log(self) -> List[tuple]:
        """(group, microbatch) in the order their backward started."""
        return list(self.schedule.backward_log)

    def __enter__(self) -> "SwapManager":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        c = self.config
        return (f"SwapManager(target={c.target!r}, directory={self.directory!r}, min_bytes={c.min_bytes}, "
                f"fusion_bytes={c.fusion_bytes}, prefetch={c.prefetch}, records={len(self._data)})")

    # ------------------------------------------------------------------ engine-facing
    def attach(self, engine_factory) -> Any:
        """The manager's engine (created by ``engine_factory(manager)`` on first use)."""
        if self._closed:
            raise SwapError("SwapManager is closed")
        if self._engine is None:
            self._engine = engine_factory(self)
        return self._engine

    def disk(self) -> DiskStore:
        """The disk store (created on first use)."""
        if self._store is None:
            self._store = DiskStore(self.config.directory, io=self.config.io)
        return self._store

    def open_record(self, group: str) -> int:
        """A new record of ``group`` in the current microbatch; returns its id."""
        rec = self.schedule.open(group, self._microbatch)
        self._data[rec.rid] = self._engine.new_record(rec)
        self._open.append(rec.rid)
        return rec.rid

    def close_record(self, rid: int) -> None:
        """Forward of the record's group ended: start its fused transfer."""
        if rid in self._open:
            self._open.remove(rid)
        data = self._data.get(rid)
        if data is not None:
            self._engine.flush(data)
        self.schedule.close(rid)

    def discard_record(self, rid: int) -> None:
        """Forward of the record's group failed: drop what it swapped."""
        if rid in self._open:
            self._open.remove(rid)
        self._release(rid)
        self.schedule.finish(rid)

    def current_record(self) -> Optional[int]:
        """The innermost record whose forward is running."""
        return self._open[-1] if self._open else None

    def data(self, rid: int) -> Any:
        """The engine data of record ``rid`` (raises :class:`SwapError` once it was released)."""
        data = self._data.get(rid)
        if data is None:
            raise SwapError("activation swap: a swapped activation was used after its group was cleared "
                            "(SwapManager.clear/step() ended, or backward ran twice over a swapped region)")
        return data

    def start_backward(self, rid: int) -> None:
        """First use of record ``rid`` in backward: load it and prefetch the next ones."""
        todo = self.schedule.start_backward(rid)
        self._engine.load(self._data[rid])
        for nxt in todo:
            self._engine.load(self._data[nxt])

    def finish_record(self, rid: int) -> None:
        """Every activation of record ``rid`` was used: release it."""
        self._release(rid)
        self.schedule.finish(rid)

    def _release(self, rid: int) -> None:
        data = self._data.pop(rid, None)
        if data is not None:
            self._engine.release(data)


def default_manager() -> SwapManager:
    """The process-wide :class:`SwapManager` used when none is given (created on first use)."""
    if not _DEFAULT:
        _DEFAULT.append(SwapManager())
    return _DEFAULT[0]
