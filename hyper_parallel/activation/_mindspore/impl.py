# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""MindSpore activation checkpointing (``mindspore.recompute``) and disk swap (see the package docstring)."""
from __future__ import annotations

import contextlib
import itertools
from fnmatch import fnmatchcase
from typing import Any, List, Optional, Tuple

import mindspore as ms
import numpy as np

from hyper_parallel.activation.plan import ActivationPlan
from hyper_parallel.activation.config import ActivationConfig, ActivationConfigError, resolve_layer_modes
from hyper_parallel.activation.manager import SwapError, SwapManager
from hyper_parallel.activation.policy import OpPolicy, resolve_policy
from hyper_parallel.activation.swap_plan import is_swappable_size

__all__ = ["ActivationBackendError", "MindSporeSwapEngine", "checkpoint", "checkpoint_wrapper", "swap", "swap_wrapper",
           "swap_tensor_wrapper", "apply_activation_policy"]

_ALIGN = 64
_IDS = itertools.count()


class ActivationBackendError(RuntimeError):
    """The requested activation feature does not exist on this backend (the message says why)."""


def _full_only(policy, what: str) -> None:
    policy = resolve_policy(policy, what)
    if isinstance(policy, OpPolicy) and not policy.needs_dispatch:
        return
    raise ActivationBackendError(
        f"{what}: only full recompute is available on MindSpore (mindspore.recompute); selective per-op policies "
        "need dispatch-level interception of every op, which MindSpore PyNative does not expose. Use policy=None "
        "or 'full' (or the torch backend for 'op', op lists and policy functions)")


def _cell_of(fn) -> ms.nn.Cell:
    cell = fn if isinstance(fn, ms.nn.Cell) else getattr(fn, "__self__", None)
    if not isinstance(cell, ms.nn.Cell):
        raise TypeError(f"checkpoint(fn): on MindSpore fn must be an nn.Cell (mindspore.recompute recomputes cells), "
                        f"got {type(fn).__name__}")
    return cell


def checkpoint(fn, *args, policy=None, **kwargs):
    """``mindspore.recompute(cell, *args, use_reentrant=False, **kwargs)`` (full recompute only)."""
    _full_only(policy, "checkpoint(policy)")
    kwargs.setdefault("use_reentrant", False)
    return ms.recompute(_cell_of(fn), *args, **kwargs)


def checkpoint_wrapper(module, policy=None, **kwargs):
    """``module.recompute(use_reentrant=False, **kwargs)``: the cell recomputes its forward in backward
    (in place; returns ``module``)."""
    if not isinstance(module, ms.nn.Cell):
        raise TypeError(f"checkpoint_wrapper(module): expected a mindspore.nn.Cell, got {type(module).__name__}")
    _full_only(policy, "checkpoint_wrapper(policy)")
    if getattr(module, "_hp_activation_checkpoint", False):
        raise ValueError(f"checkpoint_wrapper: {type(module).__name__} is already checkpointed")
    kwargs.setdefault("use_reentrant", False)
    module.recompute(**kwargs)
    module._hp_activation_checkpoint = True
    return module


# ---------------------------------------------------------------------- swap engine
class _Seg:
    __slots__ = ("nbytes", "path", "offset", "write_job", "read_job", "buffer", "parts")

    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes
        self.path: Optional[str] = None
        self.offset = 0
        self.write_job = None
        self.read_job = None
        self.buffer: Optional[np.ndarray] = None
        self.parts: List["_Handle"] = []


class _Handle:
    __slots__ = ("data", "seg", "start", "shape", "dtype", "np_dtype", "used")

    def __init__(self, data, shape, dtype, np_dtype) -> None:
        self.data = data
        self.seg: Optional[_Seg] = None
        self.start = 0
        self.shape = shape
        self.dtype = dtype
        self.np_dtype = np_dtype
        self.used = False


class _Rec:
    __slots__ = ("rid", "group", "pending", "segs", "handles", "remaining", "loading", "started", "released", "path")

    def __init__(self, rid: int, group: str) -> None:
        self.rid, self.group = rid, group
        self.pending: List[Tuple[_Handle, np.ndarray]] = []
        self.segs: List[_Seg] = []
        self.handles = 0
        self.remaining = 0
        self.loading = self.started = self.released = False
        self.path: Optional[str] = None


class MindSporeSwapEngine:
    """Packs saved MindSpore tensors into a :class:`SwapManager`'s records on disk and brings them back."""

    def __init__(self, manager: SwapManager) -> None:
        if manager.config.target == "host":
            raise ActivationBackendError("SwapManager(target='host'): pinned host memory and side streams are "
                                         "torch-only; on MindSpore use target='disk' (or 'auto', which is disk here)")
        self.manager = manager
        self._inflight: List[Tuple[Any, Any]] = []

    def new_record(self, rec) -> _Rec:
        """Engine data of a new record."""
        return _Rec(rec.rid, rec.group)

    def pack_for(self, rid: int, t):
        """Swap ``t`` out as part of record ``rid`` (parameters and tiny tensors stay)."""
        stats = self.manager.stats
        self._inflight = [(j, a) for j, a in self._inflight if not j.done()]
        if isinstance(t, ms.Parameter) or not isinstance(t, ms.Tensor):
            stats.kept_tensors += 1
            return t
        arr = np.ascontiguousarray(t.asnumpy())
        if not is_swappable_size(arr.nbytes, self.manager.config.min_bytes):
            stats.kept_tensors += 1
            return t
        data = self.manager.data(rid)
        handle = _Handle(data, arr.shape, t.dtype, arr.dtype)
        data.handles += 1
        data.remaining += 1
        stats.swapped_tensors += 1
        if arr.nbytes >= self.manager.config.fusion_bytes:
            self._start_out(data, [(handle, arr)])
        else:
            data.pending.append((handle, arr))
        return handle

    def flush(self, data: _Rec) -> None:
        """Forward of the record ended: its small tensors go out in one fused transfer."""
        pending, data.pending = data.pending, []
        if pending:
            self.manager.stats.fused_tensors += len(pending)
            self._start_out(data, pending)

    def _start_out(self, data: _Rec, items) -> None:
        pos = 0
        layout = []
        for handle, arr in items:
            pos = -(-pos // _ALIGN) * _ALIGN
            layout.append(pos)
            pos += arr.nbytes
        seg = _Seg(pos)
        if len(items) == 1:
            payload = items[0][1].reshape(-1).view(np.uint8)
        else:
            payload = np.empty(pos, dtype=np.uint8)
            for (handle, arr), start in zip(items, layout):
                payload[start:start + arr.nbytes] = arr.reshape(-1).view(np.uint8)
        for (handle, _), start in zip(items, layout):
            handle.seg, handle.start = seg, start
            seg.parts.append(handle)
        store = self.manager.disk()
        if data.path is None:
            data.path = store.new_file(data.group)
            self.manager.stats.files_created += 1
        seg.path = data.path
        seg.offset = store.reserve(data.path, seg.nbytes)
        seg.write_job = store.write(data.path, seg.offset, payload)
        self._inflight.append((seg.write_job, payload))
        data.segs.append(seg)
        self.manager.stats.transfers_out += 1
        self.manager.stats.bytes_out += seg.nbytes

    def load(self, data: _Rec) -> None:
        """Start reading record ``data`` back (idempotent)."""
        if data.loading or data.released:
            return
        data.loading = True
        self.flush(data)
        for seg in data.segs:
            seg.buffer = np.empty(seg.nbytes, dtype=np.uint8)
            seg.read_job = self.manager.disk().read(seg.path, seg.offset, seg.buffer, after=seg.write_job)
            self.manager.stats.transfers_in += 1
            self.manager.stats.bytes_in += seg.nbytes

    def unpack(self, handle):
        """Restore a swapped tensor (waiting for its prefetch if needed)."""
        if not isinstance(handle, _Handle):
            return handle
        data = handle.data
        if data.released:
            raise SwapError(f"activation swap: an activation of group {data.group!r} was used after it was consumed "
                            "or cleared")
        if not data.started:
            data.started = True
            self.manager.start_backward(data.rid)
        seg = handle.seg
        if seg.read_job is not None:
            seg.read_job.wait()
            seg.read_job = None
        nbytes = int(np.prod(handle.shape, dtype=np.int64)) * handle.np_dtype.itemsize
        arr = seg.buffer[handle.start:handle.start + nbytes].view(handle.np_dtype).reshape(handle.shape)
        out = ms.Tensor(arr.copy(), dtype=handle.dtype)
        if not handle.used:
            handle.used = True
            data.remaining -= 1
            if data.remaining == 0:
                self.manager.finish_record(data.rid)
        return out

    def release(self, data: _Rec) -> None:
        """Drop the record's buffers and file."""
        data.released = True
        for seg in data.segs:
            if seg.read_job is not None and not seg.read_job.done():
                self._inflight.append((seg.read_job, seg.buffer))
            seg.buffer = None
        if data.path is not None:
            self.manager.disk().remove(data.path)
            self.manager.stats.files_removed += 1
            data.path = None
        data.pending.clear()

    def synchronize(self) -> None:
        """Wait for the disk writes and release what they were reading."""
        for job, _ in self._inflight:
            job.wait()
        self._inflight.clear()


def _default_manager() -> SwapManager:
    from hyper_parallel.activation.manager import default_manager
    return default_manager()


@contextlib.contextmanager
def _region(manager: SwapManager, group: str):
    engine = manager.attach(MindSporeSwapEngine)
    rid = manager.open_record(group)
    try:
        with ms.saved_tensors_hooks(lambda t: engine.pack_for(rid, t), engine.unpack):
            yield rid
    except BaseException:
        manager.discard_record(rid)
        raise
    manager.close_record(rid)


def swap(fn, *args, manager: Optional[SwapManager] = None, group: Optional[str] = None, **kwargs):
    """Run ``fn(*args, **kwargs)`` with its saved activations swapped to disk until backward."""
    manager = manager if manager is not None else _default_manager()
    name = group or f"{getattr(fn, '__qualname__', type(fn).__name__)}#{next(_IDS)}"
    with _region(manager, name):
        return fn(*args, **kwargs)


def swap_wrapper(module, manager: Optional[SwapManager] = None, group: Optional[str] = None):
    """Swap ``module``'s saved activations in every forward (forward pre/post hooks; in place)."""
    if not isinstance(module, ms.nn.Cell):
        raise TypeError(f"swap_wrapper(module): expected a mindspore.nn.Cell, got {type(module).__name__}")
    if getattr(module, "_hp_activation_swap", False):
        raise ValueError(f"swap_wrapper: {type(module).__name__} is already swapped")
    name = group or f"{type(module).__name__}#{next(_IDS)}"
    stack: list = []

    def pre(_cell, _args):
        mgr = manager if manager is not None else _default_manager()
        ctx = contextlib.ExitStack()
        ctx.enter_context(_region(mgr, name))
        stack.append(ctx)

    def post(_cell, _args, _out):
        stack.pop().close()

    module.register_forward_pre_hook(pre)
    module.register_forward_hook(post)
    module._hp_activation_swap = True
    return module


def swap_tensor_wrapper(tensor, manager=None, group=None):  # pylint: disable=unused-argument
    """Not available on MindSpore: in-place swap frees and restores a tensor's storage (torch's
    ``untyped_storage().resize_``), which MindSpore tensors do not expose."""
    raise ActivationBackendError("swap_tensor_wrapper: in-place tensor swap needs storage resizing "
                                 "(torch untyped_storage().resize_), which MindSpore tensors do not expose; use "
                                 "swap/swap_wrapper (saved activations to disk) instead")


# ---------------------------------------------------------------------- config block
def _matching(named, patterns, model) -> List[Tuple[str, Any]]:
    out: List[Tuple[str, Any]] = []
    for pattern in patterns:
        hits = [(n, c) for n, c in named if fnmatchcase(n, pattern)]
        if not hits:
            raise ActivationConfigError(f"activation.layers: {pattern!r} matches no cell of {type(model).__name__}")
        out += [h for h in hits if h not in out]
    return out


def _layers(model, patterns) -> List[Tuple[str, Any]]:
    named = [(n, c) for n, c in model.cells_and_names() if n]
    if patterns:
        return _matching(named, patterns, model)
    best: List[Tuple[str, Any]] = []
    for name, cell in named:
        if isinstance(cell, (ms.nn.CellList, ms.nn.SequentialCell)) and len(cell):
            kids = [(f"{name}.{i}", c) for i, c in enumerate(cell)]
            if len({type(c) for _, c in kids}) == 1 and len(kids) > len(best):
                best = kids
    if not best:
        raise ActivationConfigError("activation.layers: the model has no CellList/SequentialCell of same-class "
                                    "blocks; name the layer cells with activation.layers (globs)")
    return best


def apply_activation_policy(model, cfg: ActivationConfig, *, example_inputs=None, loss_fn=None,  # pylint: disable=unused-argument
                            manager: Optional[SwapManager] = None) -> ActivationPlan:
    """Apply ``cfg`` to ``model``'s layer cells: none, full (and every-k) and swap; others raise."""
    if cfg.mode in ("selective-op", "auto") or cfg.swap_ops or (cfg.mode == "every-k" and cfg.every_k_policy != "full"):
        raise ActivationBackendError(f"activation.mode: {cfg.mode!r} (selective per-op recompute) is torch-only; "
                                     "MindSpore supports none, full, every-k (full) and swap")
    layers = _layers(model, cfg.layers)
    modes = resolve_layer_modes(cfg, [n for n, _ in layers])
    if "selective-op" in modes.values():
        raise ActivationBackendError("activation.overrides: 'selective-op' is torch-only on MindSpore")
    if "swap" in modes.values() and manager is None:
        manager = SwapManager.from_config(cfg.swap)
    for name, cell in layers:
        if modes[name] == "full":
            checkpoint_wrapper(cell)
        elif modes[name] == "swap":
            swap_wrapper(cell, manager, group=name)
    used = manager if "swap" in modes.values() else None
    return ActivationPlan(layers=dict(modes), excluded=(), manager=used)
