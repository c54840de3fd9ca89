# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``save`` / ``load`` / ``async_save`` for MindSpore: the hyper-parallel format, no torch involved.

A save agrees on one staging folder (the coordinator's id, broadcast), every rank writes its part and a
fragment, the coordinator merges and publishes (see :mod:`.storage`). ``async_save`` copies this rank's
values to host memory (NumPy) on the calling thread and writes on a background thread; the rendezvous is
the file system, so the background work runs no collective. As on torch, the next
``save``/``async_save``/``load`` waits for the pending one and raises its error if nobody looked at it.
"""
from __future__ import annotations

import os
import threading
import uuid
from concurrent.futures import Future
from typing import Any, Callable, Dict, Optional

import mindspore as ms
import numpy as np

from hyper_parallel.checkpoint.format import CheckpointError
from hyper_parallel.checkpoint.manifest import read_metadata
from hyper_parallel.checkpoint.publish import staging_path
from hyper_parallel.checkpoint._mindspore.storage import flatten, merge_fragments, read_into, stage, write_rank

__all__ = ["save", "load", "async_save", "wait_for_async_save", "coordinator", "agree", "barrier", "AsyncSaveFuture"]

_PENDING: Dict[str, Any] = {"future": None}


class AsyncSaveFuture(Future):
    """Future of a MindSpore :func:`async_save` (same contract as the torch one)."""

    def __init__(self, checkpoint_id: str) -> None:
        super().__init__()
        self.checkpoint_id = checkpoint_id
        self.observed = False

    def result(self, timeout: Optional[float] = None) -> Any:
        """Wait; the metadata, or the background error."""
        self.observed = True
        return super().result(timeout)

    def exception(self, timeout: Optional[float] = None) -> Optional[BaseException]:
        """Wait; the background error or None."""
        self.observed = True
        return super().exception(timeout)


def _plat():
    from hyper_parallel.platform import get_platform
    return get_platform("mindspore")


def _dist_on() -> bool:
    return _plat().is_initialized()


def _rank_world():
    plat = _plat()
    return (plat.get_rank(), plat.get_world_size()) if _dist_on() else (0, 1)


def coordinator() -> bool:
    """True on global rank 0 (or without a process group)."""
    return _rank_world()[0] == 0


def barrier() -> None:
    """Wait for every rank (no-op without a process group)."""
    if _dist_on():
        _plat().barrier()


def agree(value: Any) -> Any:
    """Rank 0's ``value`` on every rank, for ``None`` or a non-negative int (a step); a broadcast."""
    if not _dist_on() or _rank_world()[1] == 1:
        return value
    box = ms.Tensor(np.array([-1 if value is None else int(value)], dtype=np.int64))
    out = int(_plat().broadcast(box, 0, None).asnumpy()[0])
    return None if out < 0 else out


def wait_for_async_save() -> None:
    """Wait for the pending async save; raise its error unless its future was already inspected."""
    fut = _PENDING["future"]
    if fut is None:
        return
    seen = fut.observed
    exc = Future.exception(fut)
    _PENDING["future"] = None
    if exc is not None and not seen:
        raise CheckpointError(f"the previous async_save to {fut.checkpoint_id} failed in the background: {exc}") \
            from exc


def _created_by() -> str:
    from hyper_parallel import __version__
    return f"hyper_parallel {__version__} (mindspore {ms.__version__})"


def _prepare(state_dict: Dict[str, Any], checkpoint_id: Any):
    if not isinstance(state_dict, dict):
        raise TypeError(f"save(state_dict): expected a dict, got {type(state_dict).__name__}")
    if checkpoint_id is None:
        raise ValueError("save(checkpoint_id): a folder path is required")
    resolved = {k: (v.state_dict() if hasattr(v, "state_dict") and hasattr(v, "load_state_dict") else v)
                for k, v in state_dict.items()}
    flat, paths = flatten(resolved)
    rank, world = _rank_world()
    final = os.path.abspath(os.fspath(checkpoint_id))
    save_id = agree(uuid.uuid4().int % (1 << 62) if rank == 0 else None)
    staging = staging_path(final, f"{save_id:x}")
    if rank == 0:
        os.makedirs(staging)
    barrier()
    return stage(flat, rank), paths, staging, final, rank, world


def _write(staged, paths, staging, final, rank, world):
    write_rank(staging, rank, staged, paths)
    if rank == 0:
        return merge_fragments(staging, final, world, _created_by())
    return None


def save(state_dict: Dict[str, Any], *, checkpoint_id: Any = None, **kwargs: Any):
    """Save ``state_dict`` (MindSpore DTensors, tensors, objects, ``Stateful`` values); every rank calls it.
    Returns the merged metadata on the coordinator, None elsewhere."""
    _no_extra(kwargs, "save")
    wait_for_async_save()
    args = _prepare(state_dict, checkpoint_id)
    md = _write(*args)
    barrier()
    return md


def async_save(state_dict: Dict[str, Any], *, checkpoint_id: Any = None,
               on_published: Optional[Callable[[], None]] = None, **kwargs: Any) -> AsyncSaveFuture:
    """Copy this rank's values to host memory now, write them on a background thread; returns a future."""
    _no_extra(kwargs, "async_save")
    wait_for_async_save()
    args = _prepare(state_dict, checkpoint_id)
    fut = AsyncSaveFuture(args[3])

    def run() -> None:
        try:
            md = _write(*args)
            if on_published is not None and md is not None:
                on_published()
        except Exception as exc:  # pylint: disable=broad-except  # handed to the future, never dropped
            fut.set_exception(exc)
        else:
            fut.set_result(md)

    threading.Thread(target=run, name="hp-ckpt-async", daemon=True).start()
    _PENDING["future"] = fut
    return fut


def load(state_dict: Dict[str, Any], *, checkpoint_id: Any = None, **kwargs: Any) -> None:
    """Load a checkpoint (saved by torch or MindSpore, any layout) into ``state_dict`` in place; ``Stateful``
    values get ``load_state_dict``. No collective: every rank reads its own boxes."""
    _no_extra(kwargs, "load")
    wait_for_async_save()
    if checkpoint_id is None:
        raise ValueError("load(checkpoint_id): a folder path is required")
    folder = os.fspath(checkpoint_id)
    md = read_metadata(folder)
    stateful = {k: v for k, v in state_dict.items() if hasattr(v, "state_dict") and hasattr(v, "load_state_dict")}
    resolved = {k: (v.state_dict() if k in stateful else v) for k, v in state_dict.items()}
    read_into(folder, resolved, md)
    for k, v in resolved.items():
        if k in stateful:
            stateful[k].load_state_dict(v)
        else:
            state_dict[k] = v


def _no_extra(kwargs: Dict[str, Any], what: str) -> None:
    bad = sorted(k for k, v in kwargs.items() if v is not None and v is not False)
    if bad:
        raise TypeError(f"{what} on MindSpore: options {bad} exist only on the torch path (DCP storage writers, "
                        "planners, process groups)")
