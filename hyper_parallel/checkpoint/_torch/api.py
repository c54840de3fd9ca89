# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``save`` / ``load`` / ``async_save`` for torch, on torch's DCP engine.

Same signatures as ``torch.distributed.checkpoint`` (code written for torch runs by changing the import);
what is added:

* ``hyper_parallel`` DTensors go through DCP as they are (the ``_Checkpointable`` protocol); ``Partial``
  values are reduced before the save (a collective: every rank calls ``save``);
* the default storage is the crash-safe, backend-free hyper-parallel format (``FileSystemWriter``);
  ``load`` recognises that format, torch's own DCP folders (``.metadata``) and Hugging Face folders;
* ``async_save`` stages into host memory with :class:`CPUStager` (no accelerator needed), persists on a
  background thread over a process group of its own (training collectives never interleave with the
  checkpoint's), makes the next ``save``/``async_save``/``load`` wait for it and raises its error
  there if nobody has looked at the returned future;
* errors that DCP gathers from all ranks are re-raised as one :class:`CheckpointError` naming the
  ranks (``CheckpointCorruptError`` when a file is damaged, naming the file).
"""
from __future__ import annotations

import functools
import os
import warnings
from concurrent.futures import Future
from typing import Any, Callable, Dict, Optional

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.stateful import Stateful

from hyper_parallel.checkpoint.format import METADATA_FILE, CheckpointCorruptError, CheckpointError
from hyper_parallel.checkpoint._torch.staging import CPUStager, map_leaves
from hyper_parallel.checkpoint._torch.storage import FileSystemReader, FileSystemWriter
from hyper_parallel.core.placement import Partial, Replicate
from hyper_parallel.platform.torch.dtensor import DTensor

__all__ = ["save", "load", "async_save", "AsyncSaveFuture", "wait_for_async_save", "storage_reader_for", "coordinator",
           "agree", "barrier",
           "prepare_for_save", "unwrap_failure"]


class AsyncSaveFuture(Future):
    """The future of an :func:`async_save`: ``result()`` waits until the checkpoint is published and
    returns DCP's metadata (or raises the background error). Looking at the outcome (``result()`` or
    ``exception()``) marks an error as seen; an unseen error is raised by the next checkpoint call."""

    def __init__(self, checkpoint_id: str) -> None:
        super().__init__()
        self.checkpoint_id = checkpoint_id
        self.observed = False

    def result(self, timeout: Optional[float] = None) -> Any:
        """Wait for the save; its metadata, or its error."""
        self.observed = True
        return super().result(timeout)

    def exception(self, timeout: Optional[float] = None) -> Optional[BaseException]:
        """Wait for the save; its error or None."""
        self.observed = True
        return super().exception(timeout)


_PENDING: Dict[str, Optional[AsyncSaveFuture]] = {"future": None}
_ASYNC_PG: Dict[str, Any] = {}
_DEFAULT_STAGER: Dict[str, CPUStager] = {}


def wait_for_async_save() -> None:
    """Wait for the pending :func:`async_save` (if any); raise its error unless its future was already
    inspected. Called by every ``save``/``async_save``/``load``."""
    fut = _PENDING["future"]
    if fut is None:
        return
    seen = fut.observed
    exc = Future.exception(fut)  # wait without marking it seen
    _PENDING["future"] = None
    if exc is not None and not seen:
        raise CheckpointError(f"the previous async_save to {fut.checkpoint_id} failed in the background: {exc}") \
            from exc


def _reduce_partial(value: Any, _path) -> Any:
    if type(value) is DTensor and value._spec.has_partial():  # pylint: disable=unidiomatic-typecheck,protected-access
        target = [Replicate() if isinstance(p, Partial) else p for p in value.placements]
        with torch.no_grad():
            return value.detach().redistribute(placements=target)
    return value


def prepare_for_save(state_dict: Dict[str, Any]) -> Dict[str, Any]:
    """Call ``state_dict()`` on top-level ``Stateful`` values and reduce ``Partial`` DTensors (collective)."""
    if not isinstance(state_dict, dict):
        raise TypeError(f"save(state_dict): expected a dict, got {type(state_dict).__name__}")
    flat = {k: (v.state_dict() if isinstance(v, Stateful) else v) for k, v in state_dict.items()}
    return map_leaves(flat, _reduce_partial)


def unwrap_failure(what: str, path: Any, exc: CheckpointException) -> CheckpointError:
    """One clear error for DCP's per-rank failures (``CheckpointCorruptError`` keeps naming the file)."""
    failures = exc.failures
    ranks = sorted(failures)
    first = failures[ranks[0]][0]
    where = f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"
    if isinstance(first, CheckpointCorruptError):
        return CheckpointCorruptError(first.path, f"{first.problem} ({what} on {where})")
    return CheckpointError(f"{what} {path} failed on {where}: {type(first).__name__}: {first}")


def _writer(checkpoint_id, storage_writer):
    if storage_writer is None:
        if checkpoint_id is None:
            raise ValueError("save(checkpoint_id): a folder path (or a storage_writer) is required")
        return FileSystemWriter(checkpoint_id)
    return storage_writer


def _quiet_single_process(fn):
    """Run ``fn`` without DCP's "assuming the intent is to ... in a single process" warning (we pass
    ``no_dist`` ourselves when there is no process group)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized")
            return fn(*args, **kwargs)
    return wrapper


@_quiet_single_process
def save(state_dict: Dict[str, Any], *, checkpoint_id: "str | os.PathLike | None" = None, storage_writer=None,
         planner=None, process_group=None, no_dist: bool = False):
    """Save ``state_dict`` (DTensor shards, tensors, objects, ``Stateful`` values) as one checkpoint.

    Every rank calls it; each writes only its own shards (replicas once). Returns DCP's ``Metadata``.
    The default writer publishes ``checkpoint_id`` atomically when every rank's data is durable.
    """
    wait_for_async_save()
    prepared = prepare_for_save(state_dict)
    no_dist = no_dist or not _dist_on()
    try:
        return dcp.save(prepared, checkpoint_id=checkpoint_id, storage_writer=_writer(checkpoint_id, storage_writer),
                        planner=planner, process_group=process_group, no_dist=no_dist)
    except CheckpointException as exc:
        raise unwrap_failure("save to", checkpoint_id, exc) from exc


def storage_reader_for(checkpoint_id: "str | os.PathLike"):
    """The DCP storage reader for a folder: ours (``metadata.json``), torch's (``.metadata``) or Hugging Face's."""
    path = os.fspath(checkpoint_id)
    if not os.path.isdir(path):
        raise CheckpointError(f"load: checkpoint folder {path} does not exist")
    if os.path.isfile(os.path.join(path, METADATA_FILE)):
        return FileSystemReader(path)
    if os.path.isfile(os.path.join(path, ".metadata")):
        return dcp.FileSystemReader(path)
    if any(n.endswith(".safetensors") for n in os.listdir(path)):
        from torch.distributed.checkpoint import HuggingFaceStorageReader
        return HuggingFaceStorageReader(path)
    raise CheckpointError(f"load: {path} holds no checkpoint (expected {METADATA_FILE} of hyper-parallel, "
                          ".metadata of torch DCP, or Hugging Face *.safetensors files)")


@_quiet_single_process
def load(state_dict: Dict[str, Any], *, checkpoint_id: "str | os.PathLike | None" = None, storage_reader=None,
         planner=None, process_group=None, no_dist: bool = False) -> None:
    """Load a checkpoint into ``state_dict`` in place, whatever layout saved it.

    DTensors are filled shard by shard from the stored chunks that overlap them (any mesh, placements or
    world size); tensors are copied into; objects are replaced; ``Stateful`` values get
    ``load_state_dict``. A damaged file raises ``CheckpointCorruptError`` naming it.
    """
    wait_for_async_save()
    if storage_reader is None:
        if checkpoint_id is None:
            raise ValueError("load(checkpoint_id): a folder path (or a storage_reader) is required")
        storage_reader = storage_reader_for(checkpoint_id)
    if isinstance(storage_reader, FileSystemReader):
        if checkpoint_id is not None:
            storage_reader.reset(checkpoint_id)
        storage_reader.check()  # a damaged metadata.json or file raises here, naming the file
    no_dist = no_dist or not _dist_on()
    try:
        dcp.load(state_dict, checkpoint_id=checkpoint_id, storage_reader=storage_reader, planner=planner,
                 process_group=process_group, no_dist=no_dist)
    except CheckpointException as exc:
        raise unwrap_failure("load from", checkpoint_id, exc) from exc


def _async_group(process_group, no_dist: bool):
    """The process group of background saves: the caller's, or one gloo group of our own per default group."""
    if process_group is not None or no_dist or not dist.is_initialized():
        return process_group
    default = dist.distributed_c10d._get_default_group()  # pylint: disable=protected-access
    if _ASYNC_PG.get("default") is not default:
        _ASYNC_PG["group"] = dist.new_group(backend="gloo")  # collective: every rank's first async_save
        _ASYNC_PG["default"] = default
    return _ASYNC_PG["group"]


def async_save(state_dict: Dict[str, Any], *, checkpoint_id: "str | os.PathLike | None" = None, storage_writer=None,
               planner=None, process_group=None, no_dist: bool = False, stager: Optional[CPUStager] = None,
               on_published: Optional[Callable[[], None]] = None) -> AsyncSaveFuture:
    """Stage ``state_dict`` in host memory, then save it on a background thread; returns a future.

    Training may continue (and change the live tensors) as soon as this returns. ``on_published`` runs
    on the background thread after the checkpoint is published (the manager moves ``latest`` there).
    """
    wait_for_async_save()
    prepared = prepare_for_save(state_dict)
    if stager is None:
        stager = _DEFAULT_STAGER.setdefault("stager", CPUStager(cache=True))
    group = _async_group(process_group, no_dist)
    writer = _writer(checkpoint_id, storage_writer)
    out = AsyncSaveFuture(os.fspath(checkpoint_id) if checkpoint_id is not None else str(writer.checkpoint_id))
    inner = dcp.async_save(prepared, checkpoint_id=checkpoint_id, storage_writer=writer, planner=planner,
                           process_group=group, async_stager=stager, no_dist=no_dist)

    def _done(f: Future) -> None:
        try:
            result = f.result()
            if on_published is not None:
                on_published()
        except CheckpointException as exc:
            out.set_exception(unwrap_failure("async_save to", out.checkpoint_id, exc))
        except Exception as exc:  # pylint: disable=broad-except  # handed to the future, never dropped
            out.set_exception(exc)
        else:
            out.set_result(result)

    inner.add_done_callback(_done)
    _PENDING["future"] = out
    return out


def _dist_on() -> bool:
    return dist.is_available() and dist.is_initialized()


def coordinator() -> bool:
    """True on the rank that writes shared files (global rank 0, or the only process)."""
    return not _dist_on() or dist.get_rank() == 0


def agree(value: Any) -> Any:
    """Rank 0's ``value`` on every rank (a broadcast; every rank calls it)."""
    if not _dist_on() or dist.get_world_size() == 1:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def barrier() -> None:
    """Wait for every rank (no-op without a process group)."""
    if _dist_on():
        dist.barrier()
