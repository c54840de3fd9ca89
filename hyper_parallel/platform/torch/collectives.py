# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Differentiable collectives on local torch tensors, each with its explicit adjoint.

Uneven shards (``torch.chunk`` sizes, empty chunks included) are padded to the largest chunk for
the transport and trimmed afterwards; the even case takes the direct path with no extra copy.
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import Sequence

import torch
import torch.distributed as dist

from hyper_parallel.platform.adjoints import build_autograd_functions
from hyper_parallel.platform.base import CollectiveError, CollectiveHandle, check_all_to_all_splits
from hyper_parallel.platform.torch.lanes import lane_group

def _all_gather_1(*args, **kwargs):  # looked up per call, so a wrapper of torch.distributed sees it
    return (getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor)(*args, **kwargs)
def _reduce_scatter_1(*args, **kwargs):  # looked up per call, so a wrapper of torch.distributed sees it
    return (getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor)(*args, **kwargs)
_REDUCE = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}


def _ranks(group) -> tuple:
    try:
        return tuple(dist.get_process_group_ranks(group))
    except (RuntimeError, ValueError):
        return ("?",)


def group_timeout_text(group) -> str:
    """The collective timeout of ``group`` (None: the world) as its torch backend holds it, e.g. ``"30 s"``
    — also for groups created outside ``hyper_parallel.init_process_group`` — or ``"unknown"`` when the
    backend does not expose it."""
    g = group if group is not None else dist.group.WORLD
    for device in ("cpu", "cuda"):
        try:
            timeout = g._get_backend(torch.device(device)).options._timeout  # pylint: disable=protected-access
        except (RuntimeError, AttributeError, ValueError, TypeError):
            continue
        return f"{timeout.total_seconds():g} s"
    return "unknown"


def _fail(name: str, group, exc: Exception) -> CollectiveError:
    return CollectiveError(
        f"{name} over ranks {_ranks(group)} failed (collective timeout {group_timeout_text(group)}); "
        f"a peer rank may have died or diverged: {exc}")


def _pad_to(x: torch.Tensor, dim: int, size: int) -> torch.Tensor:
    cur = x.shape[dim]
    if cur == size:
        return x
    pad_shape = list(x.shape)
    pad_shape[dim] = size - cur
    return torch.cat([x, x.new_zeros(pad_shape)], dim)


# ---------------------------------------------------------------------- mesh order vs group order
#: group -> (group, position in the group of each mesh position) for groups built from an unsorted rank
#: list (torch sorts a group's ranks, so group rank i is the i-th smallest global rank)
_ORDER: dict = {}


def forget_orders() -> None:
    """On ``destroy_process_group()`` of the world (``TorchPlatform.destroy_process_group``): drop the entries
    (they keep their groups alive)."""
    _ORDER.clear()


def set_group_order(group, ranks: Sequence[int]) -> None:
    """Record that ``group`` stands for ``ranks`` in this (mesh) order; collectives along it then take and
    return their chunks in that order instead of torch's sorted group order."""
    ranks = [int(r) for r in ranks]
    srt = sorted(ranks)
    if ranks != srt:
        _ORDER[id(group)] = (group, tuple(srt.index(r) for r in ranks))  # the entry keeps the group alive


def _perm(group):
    """Group position of each mesh position, or None when they coincide."""
    entry = _ORDER.get(id(group)) if group is not None else None
    return entry[1] if entry is not None and entry[0] is group else None


def _to_group_order(chunks, perm):
    """Mesh-ordered ``chunks`` rearranged so that position g holds the chunk of the rank at group rank g."""
    inv = [0] * len(perm)
    for j, g in enumerate(perm):
        inv[g] = j
    return [chunks[j] for j in inv]


# ---------------------------------------------------------------------- raw (non-autograd) ops
#: dtypes gloo cannot transport ("Invalid scalar type"), gathered as a wider integer and cast back
_WIDEN = {torch.int16: torch.int32, torch.uint16: torch.int32, torch.uint32: torch.int64}


def _materialized(x: torch.Tensor) -> torch.Tensor:
    """``x`` with its lazy conjugate/negative bits applied to the data: collectives move storage, and a
    conjugate view (``torch.fft.ifft`` of a real tensor returns one) would arrive un-conjugated."""
    return x.resolve_conj().resolve_neg()


def raw_all_gather(x: torch.Tensor, group, dim: int, sizes: Sequence[int]) -> torch.Tensor:
    """All-gather along ``dim`` with per-rank ``sizes``; returns the concatenation."""
    x = _materialized(x)
    if x.dtype in _WIDEN:  # exact: every value of the narrow type fits the wider one
        return raw_all_gather(x.to(_WIDEN[x.dtype]), group, dim, sizes).to(x.dtype)
    n = len(sizes)
    top = max(sizes)
    even = all(s == top for s in sizes)
    src = x if even else _pad_to(x, dim, top)
    if dim != 0:
        src = src.movedim(dim, 0)
    src = src.contiguous()
    out = src.new_empty((n * src.shape[0],) + tuple(src.shape[1:]))
    try:
        _all_gather_1(out, src, group=lane_group(group))
    except RuntimeError as exc:
        raise _fail("all_gather", group, exc) from exc
    perm = _perm(group)
    if perm is not None:  # blocks arrive in group order; the mesh order is wanted
        parts = out.split(src.shape[0], 0)
        out = torch.cat([parts[g] for g in perm], 0)
    if not even:
        parts = out.split(top, 0)
        out = torch.cat([p.narrow(0, 0, s) for p, s in zip(parts, sizes)], 0)
    # contiguous like the single-device tensor it stands for: local ops that view it (flatten, take_along_dim)
    # must not fail only because the data was gathered along an inner dim
    return out if dim == 0 else out.movedim(0, dim).contiguous()


def raw_all_reduce(x: torch.Tensor, op: str, group) -> torch.Tensor:
    """All-reduce a copy of ``x`` (``avg`` = sum / n, since gloo has no AVG)."""
    out = _materialized(x).clone(memory_format=torch.contiguous_format)
    try:
        dist.all_reduce(out, op=_REDUCE["sum" if op == "avg" else op], group=lane_group(group))
    except RuntimeError as exc:
        raise _fail("all_reduce", group, exc) from exc
    if op == "avg":
        out.div_(dist.get_world_size(group))
    return out


def raw_reduce_scatter(x: torch.Tensor, op: str, group, dim: int, sizes: Sequence[int], index: int) -> torch.Tensor:
    """Reduce over the group and keep chunk ``index`` (per-rank ``sizes``) along ``dim``."""
    x = _materialized(x)
    n = len(sizes)
    if op in ("max", "min"):
        full = raw_all_reduce(x, op, group)
        start = sum(sizes[:index])
        return full.narrow(dim, start, sizes[index]).clone()
    top = max(sizes)
    even = all(s == top for s in sizes)
    src = x.movedim(dim, 0) if dim != 0 else x
    perm = _perm(group)
    if not even or perm is not None:
        chunks = [_pad_to(p, 0, top) for p in src.split(list(sizes), 0)]
        src = torch.cat(chunks if perm is None else _to_group_order(chunks, perm), 0)
    src = src.contiguous()
    out = src.new_empty((top,) + tuple(src.shape[1:]))
    try:
        _reduce_scatter_1(out, src, op=dist.ReduceOp.SUM, group=lane_group(group))
    except RuntimeError as exc:
        raise _fail("reduce_scatter", group, exc) from exc
    if not even:
        out = out.narrow(0, 0, sizes[index])
    if op == "avg":
        out = out.div_(n)
    return out if dim == 0 else out.movedim(0, dim).contiguous()


def raw_all_to_all(x: torch.Tensor, group, split_dim: int, concat_dim: int, split_sizes: Sequence[int],
                   concat_sizes: Sequence[int], index: int) -> torch.Tensor:
    """``x`` is chunk ``index`` along ``concat_dim`` and whole along ``split_dim``; return the whole
    along ``concat_dim`` and chunk ``index`` along ``split_dim``."""
    x = _materialized(x)
    n = len(split_sizes)
    ctop = max(concat_sizes)
    ceven = all(s == ctop for s in concat_sizes)
    src = x if ceven else _pad_to(x, concat_dim, ctop)
    src = src.movedim(split_dim, 0).contiguous()
    rows = split_sizes[index]
    out = src.new_empty((n * rows,) + tuple(src.shape[1:]))
    perm = _perm(group)
    in_sizes = list(split_sizes)
    if perm is not None:  # send in group order; blocks come back in group order, rearranged below
        in_sizes = _to_group_order(in_sizes, perm)
        src = torch.cat(_to_group_order(list(src.split(list(split_sizes), 0)), perm), 0)
    try:
        dist.all_to_all_single(out, src, output_split_sizes=[rows] * n, input_split_sizes=in_sizes,
                               group=lane_group(group))
    except RuntimeError as exc:
        raise _fail("all_to_all", group, exc) from exc
    if perm is not None:
        got = out.split(rows, 0) if rows else [out] * n
        out = torch.cat([got[g] for g in perm], 0) if rows else out
    # out: (n * rows, ...) where block j came from rank j and holds its concat chunk (padded)
    out = out.movedim(0, split_dim)  # now split_dim has n*rows
    blocks = out.split(rows, split_dim) if rows else [out.narrow(split_dim, 0, 0)] * n
    cdim = concat_dim
    pieces = [b if ceven else b.narrow(cdim, 0, s) for b, s in zip(blocks, concat_sizes)]
    return torch.cat(pieces, cdim)


def raw_broadcast(x: torch.Tensor, src: int, group) -> torch.Tensor:
    """In-place broadcast from global rank ``src``."""
    buf = _materialized(x)  # a conjugate/negative view is broadcast through a plain copy, then written back
    try:
        dist.broadcast(buf, src=src, group=lane_group(group))
    except RuntimeError as exc:
        raise _fail("broadcast", group, exc) from exc
    if buf is not x:
        x.copy_(buf)
    return x


def trace_range_open(name: str):
    """Open a ``torch.profiler`` range named ``name`` that may close in another function (an in-flight
    transfer: from posting to the completed wait); None, at no cost, when no profiler records."""
    # the module flag is set by every torch.profiler, also one with profile_all_threads (which the
    # thread-local _profiler_enabled() does not report)
    if not (torch.autograd.profiler._is_profiler_enabled  # pylint: disable=protected-access
            or torch.autograd._profiler_enabled()):  # pylint: disable=protected-access
        return None
    return torch.ops.profiler._record_function_enter_new(name, None)  # pylint: disable=protected-access


def trace_range_close(handle) -> None:
    """Close a range opened by :func:`trace_range_open` (None: nothing)."""
    if handle is not None:
        torch.ops.profiler._record_function_exit._RecordFunction(handle)  # pylint: disable=protected-access


class P2PHandle:
    """Handle of one posted point-to-point op: ``wait()`` returns the received tensor (None for a send).
    Under ``torch.profiler`` the op shows as a ``hp.comm.p2p.<send|recv>`` range from posting to the wait."""

    __slots__ = ("_work", "_tensor", "_recv", "_desc", "_group", "_range")

    def __init__(self, work, tensor: torch.Tensor, recv: bool, desc: str, group=None) -> None:
        self._work = work
        self._tensor = tensor
        self._recv = recv
        self._desc = desc
        self._group = group
        self._range = trace_range_open("hp.comm.p2p.recv" if recv else "hp.comm.p2p.send")

    def wait(self):
        """Block until the op completes (CollectiveError on failure or timeout)."""
        if self._work is not None:
            work, self._work = self._work, None
            try:
                work.wait()
            except RuntimeError as exc:
                raise CollectiveError(f"{self._desc} failed (collective timeout "
                                      f"{group_timeout_text(self._group)}); "
                                      f"a peer rank may have died or diverged: {exc}") from exc
            finally:
                trace_range_close(self._range)
                self._range = None
        return self._tensor if self._recv else None


def batch_isend_irecv(ops) -> list:
    """Post ``ops`` (``P2POp``: op, tensor, peer, group, tag) as isend/irecv; one handle per op."""
    handles = []
    for op in ops:
        if op.op not in ("send", "recv"):
            raise ValueError(f"batch_isend_irecv: op must be 'send' or 'recv', got {op.op!r}")
        recv = op.op == "recv"
        fn = dist.irecv if recv else dist.isend
        desc = f"{op.op} {'from' if recv else 'to'} rank {op.peer} (tag {op.tag})"
        tensor = _materialized(op.tensor).contiguous()  # a conjugate view would travel un-conjugated
        try:
            work = fn(tensor, op.peer, group=op.group, tag=op.tag)
        except RuntimeError as exc:
            raise CollectiveError(f"{desc} could not be posted (collective timeout "
                                  f"{group_timeout_text(op.group)}); "
                                  f"a peer rank may have died: {exc}") from exc
        handles.append(P2PHandle(work, tensor, recv, desc, op.group))
    return handles


def _chunk_of(x: torch.Tensor, dim: int, sizes: Sequence[int], index: int) -> torch.Tensor:
    start = sum(sizes[:index])
    if sizes[index] == x.shape[dim]:
        return x
    return x.narrow(dim, start, sizes[index])


# ---------------------------------------------------------------------- uneven all-to-all (expert parallel)
#: bytes this process handed to ``all_to_all_single`` for *other* ranks, per collective name; read with
#: :func:`sent_bytes` (the benchmarks compare it with the formulas; an int add per call)
_SENT = {"all_to_all_single": 0}


def sent_bytes(name: str = "all_to_all_single", reset: bool = False) -> int:
    """Bytes this process has sent to other ranks through collective ``name`` (optionally resetting)."""
    if name not in _SENT:
        raise KeyError(f"sent_bytes(name): no counter {name!r}; counters: {sorted(_SENT)}")
    value = _SENT[name]
    if reset:
        _SENT[name] = 0
    return value


def _count_sent(x: torch.Tensor, group, input_split_sizes: Sequence[int]) -> None:
    me = dist.get_rank(group)
    rows = sum(s for j, s in enumerate(input_split_sizes) if j != me)
    _SENT["all_to_all_single"] += rows * x.element_size() * _row_numel(x)


def _row_numel(x: torch.Tensor) -> int:
    n = 1
    for s in x.shape[1:]:
        n *= s
    return n


def _check_splits(x: torch.Tensor, group, output_split_sizes, input_split_sizes) -> None:
    check_all_to_all_splits(dist.get_world_size(group), x.shape[0], output_split_sizes, input_split_sizes)


def raw_all_to_all_single(x: torch.Tensor, group, output_split_sizes: Sequence[int],
                          input_split_sizes: Sequence[int], async_op: bool = False):
    """Uneven all-to-all along dim 0 (see ``Platform.all_to_all_single``); with ``async_op`` returns
    ``(out, work)`` where ``out`` is valid after ``work.wait()``."""
    _check_splits(x, group, output_split_sizes, input_split_sizes)
    src = _materialized(x).contiguous()
    out = src.new_empty((sum(output_split_sizes),) + tuple(src.shape[1:]))
    _count_sent(src, group, input_split_sizes)
    span = trace_range_open("hp.comm.all_to_all_single")
    try:
        work = dist.all_to_all_single(out, src, output_split_sizes=list(output_split_sizes),
                                      input_split_sizes=list(input_split_sizes), group=lane_group(group),
                                      async_op=async_op)
    except RuntimeError as exc:
        trace_range_close(span)
        raise _fail("all_to_all_single", group, exc) from exc
    if async_op:
        return out, _Work(work, group, keep=src, span=span)
    trace_range_close(span)
    return out


class _Work:
    """An in-flight c10d work plus the tensors it reads (kept alive until it completes); under
    ``torch.profiler`` a ``hp.comm.all_to_all_single`` range from issue to the completed wait."""

    __slots__ = ("work", "group", "keep", "span")

    def __init__(self, work, group, keep, span=None) -> None:
        self.work, self.group, self.keep, self.span = work, group, keep, span

    def wait(self) -> None:
        """Complete the collective (a no-op the second time)."""
        if self.work is None:
            return
        try:
            self.work.wait()
        except RuntimeError as exc:
            raise _fail("all_to_all_single", self.group, exc) from exc
        finally:
            trace_range_close(self.span)
            self.span = None
        self.work = self.keep = None


class _AsyncBox:
    """State shared by the start and wait halves of one asynchronous all-to-all (forward and backward)."""

    __slots__ = ("group", "out_splits", "in_splits", "work", "grad_work", "grad")

    def __init__(self, group, out_splits, in_splits) -> None:
        self.group, self.out_splits, self.in_splits = group, out_splits, in_splits
        self.work = self.grad_work = self.grad = None


class _AllToAllStart(torch.autograd.Function):
    """First half: issue the exchange and return the (not yet filled) output buffer. Backward: wait
    for the inverse exchange that ``_AllToAllWait.backward`` issued."""

    @staticmethod
    def forward(ctx, x, box):  # pylint: disable=arguments-differ
        """Issue the asynchronous exchange."""
        ctx.box = box
        out, box.work = raw_all_to_all_single(x, box.group, box.out_splits, box.in_splits, async_op=True)
        return out

    @staticmethod
    def backward(ctx, grad):  # pylint: disable=arguments-differ
        """Complete the inverse exchange of ``grad`` that the wait half issued."""
        box = ctx.box
        if box.grad_work is None:  # the wait half's backward did not run asynchronously
            return raw_all_to_all_single(grad, box.group, box.in_splits, box.out_splits), None
        box.grad_work.wait()
        out, box.grad_work, box.grad = box.grad, None, None
        return out, None


class _AllToAllWait(torch.autograd.Function):
    """Second half: wait for the exchange. Backward: issue the inverse exchange asynchronously, so
    the backward of the work done while the forward exchange was in flight overlaps it too."""

    @staticmethod
    def forward(ctx, out, box):  # pylint: disable=arguments-differ
        """Complete the forward exchange."""
        ctx.box = box
        box.work.wait()
        box.work = None
        return out.view_as(out)

    @staticmethod
    def backward(ctx, grad):  # pylint: disable=arguments-differ
        """Issue the inverse exchange; the start half's backward waits for it."""
        box = ctx.box
        box.grad, box.grad_work = raw_all_to_all_single(grad, box.group, box.in_splits, box.out_splits,
                                                        async_op=True)
        return grad, None  # passes through to the start half, which returns the exchanged gradient


class AsyncAllToAll(CollectiveHandle):
    """Handle of an asynchronous uneven all-to-all (``TorchPlatform.all_to_all_single_start``)."""

    __slots__ = ("_box", "_out", "_result")

    def __init__(self, x: torch.Tensor, group, output_split_sizes, input_split_sizes) -> None:
        self._box = _AsyncBox(group, tuple(int(s) for s in output_split_sizes),
                              tuple(int(s) for s in input_split_sizes))
        if x.requires_grad and torch.is_grad_enabled():
            self._out = _AllToAllStart.apply(x, self._box)
        else:
            self._out, self._box.work = raw_all_to_all_single(x, group, self._box.out_splits, self._box.in_splits,
                                                              async_op=True)
        self._result = None

    def wait(self) -> torch.Tensor:
        """The exchanged rows (differentiable when the input required grad)."""
        if self._result is None:
            if self._out.requires_grad and torch.is_grad_enabled():
                self._result = _AllToAllWait.apply(self._out, self._box)
            else:
                self._box.work.wait()
                self._result = self._out
            self._out = None
        return self._result


# ---------------------------------------------------------------------- autograd functions (platform/adjoints.py)
def _save(ctx, mask) -> None:
    ctx.save_for_backward(mask)


def _saved(ctx):
    return ctx.saved_tensors[0]


_RAW = SimpleNamespace(
    all_gather=lambda x, group, dim, sizes: raw_all_gather(x.contiguous(), group, dim, sizes),
    all_reduce=raw_all_reduce, reduce_scatter=raw_reduce_scatter, all_to_all=raw_all_to_all,
    all_to_all_single=raw_all_to_all_single,
    chunk=_chunk_of, own=torch.Tensor.contiguous, copy=torch.Tensor.clone, alias=lambda x: x.view_as(x),
    zeros_like=torch.zeros_like, group_size=dist.get_world_size, winners=torch.eq, save=_save, saved=_saved)
# pylint: disable=invalid-name,unbalanced-tuple-unpacking
(AllGather, Chunk, AllReduce, ReduceScatter, AllToAll, AllToAllSingle, MakePartial, GradAllReduce,
 ScaleGrad) = build_autograd_functions(torch.autograd.Function, _RAW, __name__)
# pylint: enable=invalid-name,unbalanced-tuple-unpacking
