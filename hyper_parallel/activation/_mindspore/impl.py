# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""MindSpore activation checkpointing (``mindspore.recompute``) and disk swap (see the package docstring)."""
from __future__ import annotations

import contextlib
import itertools
from typing import Any, List, Optional, Tuple

import mindspore as ms
import numpy as np

from hyper_parallel.activation._mindspore.schedule import _apply_layer, _layers
from hyper_parallel.activation.plan import ActivationPlan
from hyper_parallel.activation.config import ActivationConfig, resolve_layer_modes
from hyper_parallel.activation.manager import SwapError, SwapManager
from hyper_parallel.activation.policy import OpPolicy, op_policy, resolve_policy
from hyper_parallel.activation.schedule import LayerRecompute
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
        f"{what}: checkpoint(fn, ...) on MindSpore recomputes the whole cell (mindspore.recompute); a selective "
        "policy is decided per block of a cell: use checkpoint_wrapper(cell, policy) or apply_recompute_schedule")


def _block_policy(policy, what: str):
    """None for full recompute, else the ``OpPolicy`` that decides the blocks (swap and policy functions are
    refused: MindSpore PyNative has no per-op interception to run them)."""
    policy = resolve_policy(policy, what)
    if isinstance(policy, OpPolicy) and not policy.needs_dispatch:
        return None
    if not isinstance(policy, OpPolicy):
        raise ActivationBackendError(f"{what}: a policy function needs per-op interception, which MindSpore PyNative "
                                     "does not expose; give 'op', a list of op names or an OpPolicy (decided per "
                                     "block: see hyper_parallel.activation.schedule)")
    if policy.swaps:
        raise ActivationBackendError(f"{what}: MUST_SWAP of single ops is torch-only; on MindSpore swap whole layers "
                                     "(swap_wrapper)")
    return policy


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
    """Full recompute (``policy`` None / ``"full"``): ``module.recompute(use_reentrant=False, **kwargs)``, the cell
    recomputes its forward in backward. A selective policy (``"op"``, a list of op names or groups, an
    ``OpPolicy``): every block of ``module`` whose op the policy does not keep recomputes
    (``hyper_parallel.activation.schedule``). In place; returns ``module``."""
    if not isinstance(module, ms.nn.Cell):
        raise TypeError(f"checkpoint_wrapper(module): expected a mindspore.nn.Cell, got {type(module).__name__}")
    selective = _block_policy(policy, "checkpoint_wrapper(policy)")
    if getattr(module, "_hp_activation_checkpoint", False):
        raise ValueError(f"checkpoint_wrapper: {type(module).__name__} is already checkpointed")
    if selective is not None:
        _apply_layer(module, LayerRecompute("blocks", selective))
    else:
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
def apply_activation_policy(model, cfg: ActivationConfig, *, example_inputs=None, loss_fn=None,  # pylint: disable=unused-argument
                            manager: Optional[SwapManager] = None) -> ActivationPlan:
    """Apply ``cfg`` to ``model``'s layer cells: none, full, selective-op (decided per block, see
    ``hyper_parallel.activation.schedule``), every-k and swap; ``auto`` and ``swap_ops`` raise."""
    if cfg.mode == "auto" or cfg.swap_ops:
        raise ActivationBackendError(f"activation.mode: {cfg.mode!r} / swap_ops (per-op swap, the auto planner's "
                                     "profile) are torch-only; MindSpore supports none, full, selective-op, every-k "
                                     "and swap")
    layers = _layers(model, cfg.layers)
    modes = resolve_layer_modes(cfg, [n for n, _ in layers])
    if "swap" in modes.values() and manager is None:
        manager = SwapManager.from_config(cfg.swap)
    for name, cell in layers:
        if modes[name] == "full":
            checkpoint_wrapper(cell)
        elif modes[name] == "selective-op":
            checkpoint_wrapper(cell, op_policy(list(cfg.save_ops)))
        elif modes[name] == "swap":
            swap_wrapper(cell, manager, group=name)
    used = manager if "swap" in modes.values() else None
    return ActivationPlan(layers=dict(modes), excluded=(), manager=used)
