# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Activation swap on torch: ``saved_tensors_hooks`` that move saved activations off the device.

Targets (``SwapManager(target=...)``):

* **host** (accelerators): each saved activation is copied on a side stream into pinned host memory
  while the main stream goes on (``record_stream`` keeps the device block alive until the copy ran);
  in backward it is copied back on the side stream one group ahead and the main stream waits on an
  event before use.
* **disk** (the default for CPU tensors, so swap is real on CPU-only machines): the bytes go to a
  memory-mapped file per record on a background thread; the tensor is released once written. In
  backward the record's segments are read back into fresh buffers on a reader thread, one group ahead.

What is swapped: dense strided saved tensors of at least ``min_bytes``, one transfer per *storage*
(views sharing a storage — a matmul's reshaped input and the norm output it comes from — move once
and come back as views of one restored storage; a small view of a large storage is copied compactly).
Kept in place: parameters (``nn.Parameter``, leaves requiring grad and views of them, and every
storage of the wrapped module's parameters and buffers — FSDP's unsharded parameters included),
tiny tensors, and tensor subclasses other than our DTensor (a DTensor comes back as a DTensor with
the same spec). Saved tensors below ``fusion_bytes`` are fused: packed into one buffer when the
group's forward ends and moved in one transfer.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import itertools
from typing import Any, Dict, List, Optional, Tuple

import torch
from torch._C import DisableTorchFunctionSubclass

from hyper_parallel.activation.manager import SwapError, SwapManager, default_manager
from hyper_parallel.activation.swap_plan import is_swappable_size
from hyper_parallel.platform.torch.dtensor import DTensor, as_dtensor

__all__ = ["TorchSwapEngine", "swap", "swap_wrapper", "swap_tensor_wrapper", "SwapTensor", "default_manager",
           "module_storages", "swap_region"]

_ALIGN = 64
_TB = torch._C.TensorBase
_GROUP_IDS = itertools.count()


def module_storages(module: torch.nn.Module) -> frozenset:
    """Data pointers of the storages of ``module``'s parameters and buffers (never swapped)."""
    out = set()
    with DisableTorchFunctionSubclass():
        for t in itertools.chain(module.parameters(), module.buffers()):
            if t is not None and t.layout == torch.strided and t.device.type != "meta":
                out.add(t.untyped_storage().data_ptr())
    return frozenset(out)


def _is_param_like(t: torch.Tensor) -> bool:
    if isinstance(t, torch.nn.Parameter) or (t.is_leaf and t.requires_grad):
        return True
    base = t._base
    return base is not None and (isinstance(base, torch.nn.Parameter) or (base.is_leaf and base.requires_grad))


class _Segment:
    """One transfer: a large storage alone, or the fused small ones of a record (per device)."""

    __slots__ = ("nbytes", "device", "blocks", "path", "offset", "write_job", "host", "write_event", "buffer",
                 "read_job", "read_event")

    def __init__(self, nbytes: int, device: torch.device) -> None:
        self.nbytes = nbytes
        self.device = device
        self.blocks: list = []
        self.path: Optional[str] = None
        self.offset = 0
        self.write_job = None
        self.host: Optional[torch.Tensor] = None
        self.write_event = None
        self.buffer: Optional[torch.Tensor] = None
        self.read_job = None
        self.read_event = None


class _Block:
    """One swapped storage (or compact copy) of a record; its bytes live at ``start`` in a segment."""

    __slots__ = ("record", "nbytes", "segment", "start", "handles", "unpacked", "done")

    def __init__(self, record: "_RecordData", nbytes: int) -> None:
        self.record = record
        self.nbytes = nbytes
        self.segment: Optional[_Segment] = None
        self.start = 0
        self.handles = 0
        self.unpacked = 0
        self.done = False


class _Handle:
    """What autograd keeps instead of a swapped tensor: its block and how to view it."""

    __slots__ = ("block", "dtype", "offset", "size", "stride", "spec")

    def __init__(self, block: _Block, dtype, offset: int, size, stride, spec) -> None:
        self.block = block
        self.dtype = dtype
        self.offset = offset
        self.size = size
        self.stride = stride
        self.spec = spec


class _RecordData:
    """Engine-side state of one record."""

    __slots__ = ("rid", "group", "blocks", "alive", "pending", "segments", "loading", "started", "remaining", "path",
                 "released")

    def __init__(self, rid: int, group: str) -> None:
        self.rid = rid
        self.group = group
        # storage key -> block while the record's forward runs; ``alive`` keeps those storages alive
        # until then, so a freed storage's address cannot be reused by a new tensor and alias its block
        self.blocks: Dict[Any, _Block] = {}
        self.alive: List[torch.Tensor] = []
        self.pending: Dict[torch.device, List[Tuple[_Block, torch.Tensor]]] = {}
        self.segments: List[_Segment] = []
        self.loading = False
        self.started = False
        self.remaining = 0
        self.path: Optional[str] = None
        self.released = False


def _meta(t: torch.Tensor):
    """(local size, stride, storage offset, untyped storage) of ``t`` (a DTensor's local view)."""
    with DisableTorchFunctionSubclass():
        return tuple(_TB.size(t)), tuple(_TB.stride(t)), _TB.storage_offset(t), t.untyped_storage()


def _span_bytes(size, stride, itemsize: int) -> int:
    if any(s == 0 for s in size):
        return 0
    return (1 + sum((s - 1) * st for s, st in zip(size, stride))) * itemsize


def _buffer(t: torch.Tensor):
    """A buffer-protocol view of contiguous CPU uint8 tensor ``t``'s bytes for the disk threads. Not
    ``Tensor.numpy()``: that marks the storage non-resizable, which would break in-place swapping
    (``resize_``) and code such as FSDP that resizes storages. The caller keeps ``t`` alive until the
    job that uses the view finished."""
    return (ctypes.c_ubyte * t.numel()).from_address(t.data_ptr()) if t.numel() else bytearray()


def _as_bytes(storage) -> torch.Tensor:
    with torch.no_grad():
        return torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)


class TorchSwapEngine:
    """Packs saved torch tensors into a :class:`SwapManager`'s records and brings them back."""

    def __init__(self, manager: SwapManager) -> None:
        self.manager = manager
        self.config = manager.config
        self._streams: Dict[Any, Any] = {}
        # (job, tensor) of writes in flight: the tensor is released here, on the thread that made it,
        # once its job is done (frees on other threads escape the CPU allocator's profiler accounting)
        self._inflight: List[Tuple[Any, torch.Tensor]] = []

    def _reap(self) -> None:
        if self._inflight:
            self._inflight = [(job, t) for job, t in self._inflight if not job.done()]

    # ------------------------------------------------------------------ target
    def _target(self, device: torch.device) -> str:
        target = self.config.target
        if target == "auto":
            return "disk" if device.type == "cpu" else "host"
        if target == "host" and device.type == "cpu":
            raise SwapError("SwapManager(target='host'): these activations are CPU tensors already in host memory; "
                            "use target='disk' (or 'auto') to move them out of the process on a CPU-only machine")
        return target

    def _side_stream(self, device: torch.device):
        key = (device.type, device.index)
        s = self._streams.get(key)
        if s is None:
            s = self._streams[key] = torch.get_device_module(device.type).Stream(device=device)
        return s

    # ------------------------------------------------------------------ records
    def new_record(self, rec) -> _RecordData:
        """Engine data of a new record."""
        return _RecordData(rec.rid, rec.group)

    def _eligible(self, t: torch.Tensor, exclude: frozenset) -> bool:
        if type(t) not in (torch.Tensor, DTensor) or t.layout != torch.strided or t.device.type == "meta":
            return False
        if _is_param_like(t):
            return False
        return t.untyped_storage().data_ptr() not in exclude

    def pack_for(self, rid: int, t: torch.Tensor, exclude: frozenset = frozenset()):
        """Swap ``t`` out as part of record ``rid``: a handle, or ``t`` itself when it stays."""
        stats = self.manager.stats
        self._reap()
        if not self._eligible(t, exclude):
            stats.kept_tensors += 1
            return t
        size, stride, offset, storage = _meta(t)
        itemsize = t.element_size()
        span = _span_bytes(size, stride, itemsize)
        compact = storage.nbytes() > 2 * span + _ALIGN
        nbytes = span if compact else storage.nbytes()
        if not is_swappable_size(nbytes, self.config.min_bytes):
            stats.kept_tensors += 1
            return t
        data = self.manager.data(rid)
        key = ("view", storage.data_ptr(), offset, size, stride) if compact else ("storage", storage.data_ptr())
        block = data.blocks.get(key)
        if block is None:
            block = self._new_block(data, t, storage, compact, nbytes)
            data.blocks[key] = block
        block.handles += 1
        stats.swapped_tensors += 1
        spec = t._spec if type(t) is DTensor else None  # pylint: disable=unidiomatic-typecheck
        if compact:
            contiguous = tuple(itertools.accumulate((1,) + size[:0:-1], lambda a, b: a * b))[::-1] if size else ()
            return _Handle(block, t.dtype, 0, size, contiguous, spec)
        return _Handle(block, t.dtype, offset, size, stride, spec)

    def _new_block(self, data: _RecordData, t, storage, compact: bool, nbytes: int) -> _Block:
        block = _Block(data, nbytes)
        data.remaining += 1
        if compact:
            with torch.no_grad(), DisableTorchFunctionSubclass():
                src = t.detach().contiguous().view(-1).view(torch.uint8)
        else:
            src = _as_bytes(storage)
        data.alive.append(src)
        if nbytes >= self.config.fusion_bytes:
            seg = _Segment(nbytes, src.device)
            self._start_out(data, seg, [(block, src)])
        else:
            data.pending.setdefault(src.device, []).append((block, src))
        return block

    def flush(self, data: _RecordData) -> None:
        """Forward of the record ended: move its small tensors in one fused transfer per device."""
        self._reap()
        pending, data.pending = data.pending, {}
        data.blocks, data.alive = {}, []
        for device, items in pending.items():
            total = 0
            for _, src in items:
                total = -(-total // _ALIGN) * _ALIGN + src.numel()
            self.manager.stats.fused_tensors += len(items)
            self._start_out(data, _Segment(total, device), items)

    def _start_out(self, data: _RecordData, seg: _Segment, items) -> None:
        stats = self.manager.stats
        pos = 0
        for block, src in items:
            pos = -(-pos // _ALIGN) * _ALIGN
            block.segment, block.start = seg, pos
            seg.blocks.append(block)
            pos += src.numel()
        payload = items[0][1] if len(items) == 1 else self._pack_bytes(items, seg)
        data.segments.append(seg)
        stats.transfers_out += 1
        stats.bytes_out += seg.nbytes
        if self._target(seg.device) == "disk":
            self._write_disk(data, seg, payload)
        else:
            self._write_host(seg, payload)

    @staticmethod
    def _pack_bytes(items, seg: _Segment) -> torch.Tensor:
        with torch.no_grad():
            buf = torch.empty(seg.nbytes, dtype=torch.uint8, device=seg.device)
            for block, src in items:
                buf[block.start:block.start + src.numel()].copy_(src)
        return buf

    def _write_disk(self, data: _RecordData, seg: _Segment, payload: torch.Tensor) -> None:
        store = self.manager.disk()
        if data.path is None:
            data.path = store.new_file(f"{data.group}")
            self.manager.stats.files_created += 1
        if payload.device.type != "cpu":
            payload = payload.to("cpu")
        seg.path = data.path
        seg.offset = store.reserve(data.path, seg.nbytes)
        seg.write_job = store.write(data.path, seg.offset, _buffer(payload))
        self._inflight.append((seg.write_job, payload))

    def _write_host(self, seg: _Segment, payload: torch.Tensor) -> None:
        dev = payload.device
        mod = torch.get_device_module(dev.type)
        side = self._side_stream(dev)
        side.wait_stream(mod.current_stream(dev))
        seg.host = torch.empty(seg.nbytes, dtype=torch.uint8, pin_memory=True)
        with mod.stream(side):
            seg.host.copy_(payload, non_blocking=True)
            seg.write_event = mod.Event()
            seg.write_event.record(side)
        payload.record_stream(side)

    # ------------------------------------------------------------------ backward
    def load(self, data: _RecordData) -> None:
        """Start bringing record ``data`` back (idempotent)."""
        self._reap()
        if data.loading or data.released:
            return
        data.loading = True
        self.flush(data)
        stats = self.manager.stats
        for seg in data.segments:
            stats.transfers_in += 1
            stats.bytes_in += seg.nbytes
            if seg.path is not None:
                seg.buffer = torch.empty(seg.nbytes, dtype=torch.uint8)
                seg.read_job = self.manager.disk().read(seg.path, seg.offset, _buffer(seg.buffer), after=seg.write_job)
            else:
                self._read_host(seg)

    def _read_host(self, seg: _Segment) -> None:
        dev = seg.device
        mod = torch.get_device_module(dev.type)
        side = self._side_stream(dev)
        with mod.stream(side):
            side.wait_event(seg.write_event)
            seg.buffer = torch.empty(seg.nbytes, dtype=torch.uint8, device=dev)
            seg.buffer.copy_(seg.host, non_blocking=True)
            seg.read_event = mod.Event()
            seg.read_event.record(side)

    def _ready(self, seg: _Segment) -> torch.Tensor:
        if seg.read_job is not None:
            seg.read_job.wait()
            seg.read_job = None
        elif seg.read_event is not None:
            mod = torch.get_device_module(seg.device.type)
            cur = mod.current_stream(seg.device)
            cur.wait_event(seg.read_event)
            seg.buffer.record_stream(cur)
            seg.read_event = None
        if seg.buffer is None:
            raise SwapError("activation swap: a segment was used after its record was released")
        return seg.buffer

    def unpack(self, handle):
        """Autograd wants a saved tensor back: restore it (waiting for its prefetch if needed)."""
        if isinstance(handle, torch.Tensor):
            return handle
        block = handle.block
        data = block.record
        if data.released:
            raise SwapError(f"activation swap: an activation of group {data.group!r} was used after it was consumed "
                            "or cleared (a second backward through a swapped region, or after SwapManager.step())")
        if not data.started:
            data.started = True
            self.manager.start_backward(data.rid)
        buf = self._ready(block.segment)
        itemsize = handle.dtype.itemsize
        with torch.no_grad(), DisableTorchFunctionSubclass():
            out = torch.empty(0, dtype=handle.dtype, device=buf.device).set_(
                buf.untyped_storage(), (buf.storage_offset() + block.start) // itemsize + handle.offset, handle.size,
                handle.stride)
        if handle.spec is not None:
            out = as_dtensor(out, handle.spec)
        block.unpacked += 1
        if not block.done and block.unpacked >= block.handles:
            block.done = True
            data.remaining -= 1
            if data.remaining == 0:
                self.manager.finish_record(data.rid)
        return out

    def release(self, data: _RecordData) -> None:
        """Drop the record's buffers and files."""
        data.released = True
        if data.path is not None:
            self.manager.disk().remove(data.path)
            self.manager.stats.files_removed += 1
            data.path = None
        for seg in data.segments:
            if seg.read_job is not None and not seg.read_job.done():
                self._inflight.append((seg.read_job, seg.buffer))  # the reader still writes into it
            seg.host = None
            seg.buffer = None
        data.pending.clear()

    def synchronize(self) -> None:
        """Wait for every side-stream copy and disk write; release the tensors they were reading."""
        for s in self._streams.values():
            s.synchronize()
        for job, _ in self._inflight:
            job.wait()
        self._reap()


@contextlib.contextmanager
def swap_region(manager: SwapManager, group: str, exclude: frozenset = frozenset()):
    """Saved tensors created inside go to a new record of ``group`` (``exclude``: storages to keep)."""
    engine = manager.attach(TorchSwapEngine)
    rid = manager.open_record(group)
    pack = functools.partial(engine.pack_for, rid, exclude=exclude)
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, engine.unpack):
            yield rid
    except BaseException:
        manager.discard_record(rid)
        raise
    manager.close_record(rid)


def swap(fn, *args, manager: Optional[SwapManager] = None, group: Optional[str] = None, **kwargs):
    """Run ``fn(*args, **kwargs)`` with its saved activations swapped out (see the module docstring)."""
    if not torch.is_grad_enabled():
        return fn(*args, **kwargs)
    manager = manager if manager is not None else default_manager()
    module = fn if isinstance(fn, torch.nn.Module) else getattr(fn, "__self__", None)
    exclude = module_storages(module) if isinstance(module, torch.nn.Module) else frozenset()
    name = group or f"{getattr(fn, '__qualname__', type(fn).__name__)}#{next(_GROUP_IDS)}"
    with swap_region(manager, name, exclude):
        return fn(*args, **kwargs)


def _swapped_forward(orig_forward, module_ref, manager, group, *args, **kwargs):
    if not torch.is_grad_enabled():
        return orig_forward(*args, **kwargs)
    mgr = manager if manager is not None else default_manager()
    with swap_region(mgr, group, module_storages(module_ref)):
        return orig_forward(*args, **kwargs)


def swap_wrapper(module: torch.nn.Module, manager: Optional[SwapManager] = None, group: Optional[str] = None):
    """Swap ``module``'s saved activations out in forward and back in backward, in place (the module
    is returned; its parameters and buffers are never swapped). Each call opens a new record of swap
    group ``group`` (default: the module's class name and a number)."""
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"swap_wrapper(module): expected a torch.nn.Module, got {type(module).__name__}")
    if manager is not None and not isinstance(manager, SwapManager):
        raise TypeError(f"swap_wrapper(manager): expected a SwapManager, got {type(manager).__name__}")
    kinds = module.__dict__.get("_hp_activation", ())
    if "swap" in kinds:
        raise ValueError(f"swap_wrapper: {type(module).__name__} is already swapped")
    name = group or f"{type(module).__name__}#{next(_GROUP_IDS)}"
    module.forward = functools.partial(_swapped_forward, module.forward, module, manager, name)
    module.__dict__["_hp_activation"] = tuple(kinds) + ("swap",)
    return module


class SwapTensor:
    """A tensor whose storage is moved out and back *in place*: the tensor object, and every tensor
    sharing its storage (autograd's saved copies included), stays the same; only the storage's bytes
    leave (``resize_(0)``) and return. For activations a pipeline stage holds while other
    microbatches run (see ``swap_tensor_wrapper``)."""

    def __init__(self, tensor: torch.Tensor, manager: SwapManager, group: str) -> None:
        if not isinstance(tensor, torch.Tensor) or tensor.layout != torch.strided:
            raise TypeError(f"swap_tensor_wrapper(tensor): expected a dense torch.Tensor, got {type(tensor).__name__}")
        if isinstance(tensor, torch.nn.Parameter):
            raise ValueError("swap_tensor_wrapper(tensor): parameters are not swapped (they are needed by every step)")
        self.tensor = tensor
        self.manager = manager
        self.group = group
        self.nbytes = tensor.untyped_storage().nbytes()
        self.state = "resident"
        self._seg: Optional[_Segment] = None
        self._engine = manager.attach(TorchSwapEngine)

    def swap_out(self) -> "SwapTensor":
        """Start moving the bytes out; the storage is freed when the copy finished (:meth:`wait`)."""
        if self.state != "resident":
            raise SwapError(f"SwapTensor({self.group}): swap_out while {self.state}")
        storage = self.tensor.untyped_storage()
        seg = _Segment(self.nbytes, self.tensor.device)
        payload = _as_bytes(storage)
        data = _RecordData(-1, self.group)
        if self._engine._target(seg.device) == "disk":
            self._engine._write_disk(data, seg, payload)
        else:
            self._engine._write_host(seg, payload)
        self._seg = seg
        self.manager.stats.bytes_out += self.nbytes
        self.manager.stats.transfers_out += 1
        self.state = "out-pending"
        return self

    def wait(self) -> "SwapTensor":
        """Finish the pending transfer: after ``swap_out`` the storage is freed, after ``swap_in`` restored."""
        seg = self._seg
        if self.state == "out-pending":
            if seg.write_job is not None:
                seg.write_job.wait()
            elif seg.write_event is not None:
                seg.write_event.synchronize()
            self.tensor.untyped_storage().resize_(0)
            self.state = "out"
        elif self.state == "in-pending":
            buf = self._engine._ready(seg)
            storage = self.tensor.untyped_storage()
            storage.resize_(self.nbytes)
            with torch.no_grad():
                _as_bytes(storage).copy_(buf)
            self._finish()
            self.state = "resident"
        return self

    def swap_in(self) -> "SwapTensor":
        """Start bringing the bytes back (call :meth:`wait` before using the tensor)."""
        if self.state == "out-pending":
            self.wait()
        if self.state != "out":
            raise SwapError(f"SwapTensor({self.group}): swap_in while {self.state}")
        seg = self._seg
        if seg.path is not None:
            if seg.path not in self.manager.live_files():
                raise SwapError(f"SwapTensor({self.group}): its swap file was removed (SwapManager.clear/step ended)")
            seg.buffer = torch.empty(seg.nbytes, dtype=torch.uint8)
            seg.read_job = self.manager.disk().read(seg.path, seg.offset, _buffer(seg.buffer), after=seg.write_job)
        else:
            self._engine._read_host(seg)
        self.manager.stats.bytes_in += self.nbytes
        self.manager.stats.transfers_in += 1
        self.state = "in-pending"
        return self

    def _finish(self) -> None:
        seg, self._seg = self._seg, None
        if seg is not None and seg.path is not None:
            self.manager.disk().remove(seg.path)
            self.manager.stats.files_removed += 1

    def __repr__(self) -> str:
        return f"SwapTensor(group={self.group!r}, nbytes={self.nbytes}, state={self.state!r})"


def swap_tensor_wrapper(tensor: torch.Tensor, manager: Optional[SwapManager] = None,
                        group: Optional[str] = None) -> SwapTensor:
    """Wrap ``tensor`` so that its storage can be swapped out and back in place (identity preserved)."""
    manager = manager if manager is not None else default_manager()
    return SwapTensor(tensor, manager, group or f"tensor#{next(_GROUP_IDS)}")
