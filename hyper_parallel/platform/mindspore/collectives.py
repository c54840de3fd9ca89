# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Differentiable collectives on local MindSpore tensors, each with its explicit adjoint.

What MindSpore 2.10 offers on CPU (``mccl``), measured in this repository's ST:

* **native**: all-reduce (sum, max, min: ``mint.distributed.all_reduce``), all-gather over the world
  group (the ``AllGather`` primitive), broadcast, barrier. ``avg`` is sum / n.
* **emulated** (the CPU kernels ``DistCommReduceScatterTensor``, ``DistCommAllToAllVSingle``,
  ``DistCommAllGatherIntoTensor`` and send/recv are not registered):

  - *reduce-scatter* = all-reduce of the whole tensor + local slice: ring bytes per rank
    ``2 (n-1)/n * S`` instead of ``(n-1)/n * S`` (2x);
  - *all-to-all* on 2 ranks = all-gather along the concat dim + local slice along the split dim: bytes
    ``L`` instead of ``L/2`` (2x, one call); from 3 ranks on, one broadcast per ordered pair over the
    pair's 2-rank group (sorted pair order): exactly the native ``(n-1)/n * L``;
  - *all-gather over a sub-group* (the primitive accepts only the world group on CPU) = all-reduce
    of a zero buffer holding each rank's block: ``2 (n-1) * L`` instead of ``(n-1) * L`` (2x);
  - *point-to-point* (:func:`point_to_point`) = broadcast from the source over the group: every
    rank of the group receives the ``S`` bytes, not just the destination;
  - *uneven all-to-all* (:func:`raw_all_to_all_single`, expert parallel) = all-gather of the ranks'
    split-size vectors (``n`` int32 each), then on 2 ranks an all-gather of every rank's rows padded to
    the largest row count ``R`` + local slicing (``R`` rows instead of the rows sent to the peer), from 3
    ranks on the pairwise broadcasts of the rows actually sent; it is synchronous
    (``Platform.all_to_all_single_start`` returns a completed handle).

Uneven shards (``chunk`` sizes, empty chunks included) are padded to the largest chunk for the
transport and trimmed afterwards; dtypes the CPU all-gather kernel lacks travel in an exact wider
type (bool/int8/int16 as int32, bfloat16 as float32); float64/int64 travel bit-exact as int32 pairs,
and their all-reduce is all-gather + a local reduction ((n-1) S bytes instead of 2 (n-1)/n S).
Autograd functions use MindSpore's PyNative custom-function mechanism
(``mindspore.common._grad_function._Function``, the one MindSpore's own recompute uses):
MindSpore's all-gather has no CPU backward, so every adjoint here is written out by hand.
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import mindspore as ms
from mindspore import mint, ops
import mindspore.mint.distributed as msdist
# MindSpore's PyNative custom-autograd base (used by its own recompute); pinned mindspore==2.10.0
from mindspore.common._grad_function import _Function  # pylint: disable=import-error,no-name-in-module

from hyper_parallel.platform.adjoints import build_autograd_functions
from hyper_parallel.platform.base import CollectiveError, check_all_to_all_splits, collective_timeout_seconds

__all__ = ["MsGroup", "raw_all_gather", "raw_all_reduce", "raw_reduce_scatter", "raw_all_to_all", "raw_broadcast",
           "point_to_point", "pair_transfer", "pair_group", "P2PDone", "raw_all_to_all_single", "AllToAllSingle",
           "AllGather", "Chunk", "AllReduce", "ReduceScatter", "AllToAll", "MakePartial",
           "GradAllReduce", "ScaleGrad", "chunk_of", "sizes_tuple"]


class MsGroup:
    """A MindSpore communication group: its name (what MindSpore's APIs take) and its global ranks."""

    __slots__ = ("name", "ranks", "is_world")

    def __init__(self, name: str, ranks: Sequence[int], is_world: bool) -> None:
        self.name = name
        self.ranks = tuple(ranks)
        self.is_world = is_world

    @property
    def size(self) -> int:
        """Number of ranks in the group."""
        return len(self.ranks)

    def __repr__(self) -> str:
        return f"MsGroup({self.name!r}, ranks={list(self.ranks)})"


_GATHER_PRIMS: Dict[str, Any] = {}
#: the CPU AllGather kernel takes float32, float16 and int32 only: exact casts for the others
_GATHER_WIRE = {ms.bool_: ms.int32, ms.int8: ms.int32, ms.uint8: ms.int32, ms.int16: ms.int32,
                ms.bfloat16: ms.float32}
_GATHER_NATIVE = (ms.float32, ms.float16, ms.int32)
#: 64-bit and complex dtypes: the CPU kernels of both all-gather and all-reduce lack them; they travel
#: bit-exact as int32 words, and reductions over them run locally on the gathered values
_BITS64 = {ms.float64: np.float64, ms.int64: np.int64, ms.complex64: np.complex64, ms.complex128: np.complex128}
_NP_REDUCE = {"sum": np.sum, "avg": np.mean, "max": np.max, "min": np.min}


def _fail(name: str, group: MsGroup, exc: Exception) -> CollectiveError:
    return CollectiveError(
        f"{name} over ranks {group.ranks} (group {group.name}) failed (collective timeout "
        f"{collective_timeout_seconds('mindspore')} s); a peer rank may have died or diverged: {exc}")


def _group_arg(group: MsGroup) -> Optional[str]:
    return None if group.is_world else group.name


def _pad_to(x, dim: int, size: int):
    cur = x.shape[dim]
    if cur == size:
        return x
    pad_shape = list(x.shape)
    pad_shape[dim] = size - cur
    return mint.cat([x, mint.zeros(tuple(pad_shape), dtype=x.dtype)], dim)


def _movedim(x, src: int, dst: int):
    return x if src == dst else ops.movedim(x, src, dst)


def chunk_of(x, dim: int, sizes: Sequence[int], index: int):
    """Chunk ``index`` of ``x`` along ``dim`` for per-rank ``sizes`` (``x`` itself when it is whole)."""
    if sizes[index] == x.shape[dim]:
        return x
    return mint.narrow(x, dim, sum(sizes[:index]), sizes[index])


# ---------------------------------------------------------------------- raw (non-autograd) ops
def _all_reduce_inplace(buf, op: str, group: MsGroup, what: str):
    try:
        msdist.all_reduce(buf, op=op, group=_group_arg(group))
    except RuntimeError as exc:
        raise _fail(what, group, exc) from exc
    return buf


def raw_all_reduce(x, op: str, group: MsGroup, inplace: bool = False):
    """All-reduce a copy of ``x`` (sum/max/min native; ``avg`` = sum / n); ``inplace``: reduce ``x`` itself
    where the dtype allows (the caller's temporary: no copy) -- the result is returned either way."""
    if op not in ("sum", "avg", "max", "min"):
        raise ValueError(f"all_reduce(op={op!r}): expected sum, avg, max or min")
    out = x if inplace and x.dtype not in _BITS64 and x.dtype != ms.bool_ else x.copy()
    if group.size == 1:
        return out
    if out.dtype in _BITS64:
        return _all_reduce_by_gather(out, op, group)
    is_bool = out.dtype == ms.bool_
    if is_bool:
        out = out.astype(ms.int32)
    _all_reduce_inplace(out, "sum" if op == "avg" else op, group, "all_reduce")
    if op == "avg":
        out = out / group.size
    return out.astype(ms.bool_) if is_bool else out


def _all_reduce_by_gather(x, op: str, group: MsGroup):
    """All-reduce emulated as all-gather + local reduction (64-bit dtypes): (n-1) S bytes per rank."""
    stacked = raw_all_gather(x.reshape((1,) + tuple(x.shape)), group, 0, (1,) * group.size)
    return ms.Tensor(_NP_REDUCE[op](stacked.asnumpy(), axis=0).astype(_BITS64[x.dtype]))


def _gather0_bits64(src, group: MsGroup):
    """All-gather of a 64-bit tensor as int32 pairs (bit-exact; the raw ops run outside autograd)."""
    rows, rest = src.shape[0], tuple(src.shape[1:])
    host = np.ascontiguousarray(src.asnumpy())
    if host.size == 0:
        return ms.Tensor(np.zeros((rows * group.size,) + rest, host.dtype))
    bits = _gather0(ms.Tensor(host.reshape(rows, -1).view(np.int32)), group).asnumpy()
    return ms.Tensor(np.ascontiguousarray(bits).view(host.dtype).reshape((rows * group.size,) + rest))


def _gather0(src, group: MsGroup):
    """Concatenate the ranks' equal-shaped ``src`` along dim 0."""
    if src.dtype in _BITS64:
        return _gather0_bits64(src, group)
    if group.is_world and src.dtype in _GATHER_NATIVE:
        prim = _GATHER_PRIMS.get(group.name)
        if prim is None:
            prim = _GATHER_PRIMS[group.name] = ops.AllGather()
        try:
            return prim(src)
        except RuntimeError as exc:
            raise _fail("all_gather", group, exc) from exc
    # emulated over a sub-group: each rank writes its block into a zero buffer, then all-reduce(sum)
    # (exact: every element is one value plus zeros)
    n, me = group.size, group.ranks.index(_my_rank())
    rows = src.shape[0]
    parts = [src if j == me else mint.zeros(tuple(src.shape), dtype=src.dtype) for j in range(n)]
    buf = mint.cat(parts, 0) if rows else src
    return _all_reduce_inplace(buf, "sum", group, "all_gather (emulated by all_reduce)")


def _my_rank() -> int:
    from mindspore.communication import get_rank
    return get_rank()


def raw_all_gather(x, group: MsGroup, dim: int, sizes: Sequence[int]):
    """All-gather along ``dim`` with per-rank ``sizes``; returns the concatenation."""
    n = len(sizes)
    if n == 1:
        return x
    top = max(sizes)
    if top == 0:
        return x  # every chunk is empty: the concatenation is empty too
    wire = _GATHER_WIRE.get(x.dtype)
    src = x.astype(wire) if wire is not None else x
    even = all(s == top for s in sizes)
    if not even:
        src = _pad_to(src, dim, top)
    src = _movedim(src, dim, 0)
    out = _gather0(src, group)
    if not even:
        out = mint.cat([mint.narrow(out, 0, j * top, s) for j, s in enumerate(sizes)], 0)
    out = _movedim(out, 0, dim)
    return out.astype(x.dtype) if wire is not None else out


def raw_reduce_scatter(x, op: str, group: MsGroup, dim: int, sizes: Sequence[int], index: int):
    """Reduce over the group and keep chunk ``index`` along ``dim`` (emulated: all-reduce + slice)."""
    full = raw_all_reduce(x, op, group)
    return chunk_of(full, dim, sizes, index)


#: the platform's group factory ``new_group(ranks)`` (set by ``platform.py``: this module never imports it)
_GROUP_FACTORY: list = []


def set_group_factory(new_group) -> None:
    """Install the factory that creates (once per rank tuple) the pair groups of the pairwise exchange."""
    _GROUP_FACTORY[:] = [new_group]


def _pairwise(send: Sequence[Any], recv_shapes: Sequence[Tuple[int, ...]], dtype, group: MsGroup) -> List[Any]:
    """Exchange ``send[j]`` (this rank's piece for group member ``j``) with every member by one broadcast per
    ordered pair over the pair's 2-rank group, pairs in sorted order (deadlock-free: every rank meets its
    pairs in the same global order); empty pieces are skipped (both sides know the sizes). Returns the
    piece received from each member (this rank's own piece at its index). Bytes per rank: exactly what a
    native all-to-all sends, ``(n-1)/n`` of the local tensor for even splits."""
    me_global = _my_rank()
    me = group.ranks.index(me_global)
    out: List[Any] = [None] * group.size
    out[me] = send[me]
    for a in range(group.size):
        for b in range(a + 1, group.size):
            if me not in (a, b):
                continue
            pair = pair_group(group.ranks[a], group.ranks[b], _GROUP_FACTORY[0])
            for src, dst in ((a, b), (b, a)):
                shape = recv_shapes[src] if me == dst else tuple(send[dst].shape)
                if not int(np.prod(shape)):
                    if me == dst:
                        out[src] = mint.zeros(shape, dtype=dtype)
                    continue
                buf = send[dst].copy() if me == src else mint.zeros(shape, dtype=dtype)
                raw_broadcast(buf, group.ranks[src], pair)
                if me == dst:
                    out[src] = buf
    return out


def _use_pairwise(group: MsGroup, dtype) -> bool:
    """Pairwise broadcasts from 3 ranks on (the all-gather emulation sends n x the native bytes; at 2 ranks
    it is exactly 2x and one call instead of two)."""
    return group.size >= 3 and bool(_GROUP_FACTORY) and dtype not in _BITS64 and dtype not in _GATHER_WIRE


def raw_all_to_all(x, group: MsGroup, split_dim: int, concat_dim: int, split_sizes: Sequence[int],
                   concat_sizes: Sequence[int], index: int):
    """``x`` is chunk ``index`` along ``concat_dim`` and whole along ``split_dim``; return it whole along
    ``concat_dim`` and chunk ``index`` along ``split_dim``. Emulated: all-gather + slice on 2 ranks (2x the
    native bytes), pairwise broadcasts from 3 ranks on (the native bytes)."""
    if not _use_pairwise(group, x.dtype):
        whole = raw_all_gather(x, group, concat_dim, concat_sizes)
        return chunk_of(whole, split_dim, split_sizes, index)
    send = [chunk_of(x, split_dim, split_sizes, j) for j in range(group.size)]
    shapes = []
    for j in range(group.size):
        shape = list(x.shape)
        shape[split_dim], shape[concat_dim] = split_sizes[index], concat_sizes[j]
        shapes.append(tuple(shape))
    got = _pairwise(send, shapes, x.dtype, group)
    return mint.cat(got, concat_dim)


def raw_broadcast(x, src: int, group: MsGroup):
    """In-place broadcast from global rank ``src``; returns ``x``."""
    if group.size == 1:
        return x
    if src not in group.ranks:
        raise ValueError(f"broadcast(src={src}): rank {src} is not in group {group.ranks}")
    try:
        msdist.broadcast(x, src, group=_group_arg(group))
    except RuntimeError as exc:
        raise _fail("broadcast", group, exc) from exc
    return x


def point_to_point(x, src: int, dst: int, group: MsGroup):
    """Send ``x`` from global rank ``src`` to ``dst`` (emulated: broadcast over ``group``; every rank
    of the group must call it with a tensor of the same shape and dtype). Returns the received
    tensor on ``dst``, ``x`` unchanged elsewhere."""
    if dst not in group.ranks:
        raise ValueError(f"point_to_point(dst={dst}): rank {dst} is not in group {group.ranks}")
    buf = x.copy()
    raw_broadcast(buf, src, group)
    return buf if _my_rank() == dst else x


class P2PDone:
    """A completed emulated point-to-point op (``wait()`` returns the received tensor, None for a send)."""

    __slots__ = ("_value",)

    def __init__(self, value) -> None:
        self._value = value

    def wait(self):
        """Already complete."""
        return self._value


def pair_group(a: int, b: int, new_group) -> MsGroup:
    """The two-rank group of ``a`` and ``b``, from ``new_group(ranks)`` (the platform's, which creates a
    group once per rank tuple)."""
    return new_group((min(a, b), max(a, b)))


def pair_transfer(x, op: str, peer: int, new_group):
    """Send ``x`` to ``peer`` (op ``send``) or receive into a tensor shaped like ``x`` from it (``recv``):
    a broadcast over their pair group, so the peer must make the matching call now. Cost: one
    broadcast of ``x`` (as a native send would be). ``new_group``: the platform's group factory."""
    if op not in ("send", "recv"):
        raise ValueError(f"batch_isend_irecv: op must be 'send' or 'recv', got {op!r}")
    me = _my_rank()
    group = pair_group(me, peer, new_group)
    src = me if op == "send" else peer
    buf = x.copy()
    raw_broadcast(buf, src, group)
    return buf if op == "recv" else None

def raw_all_to_all_single(x, group: MsGroup, output_split_sizes: Sequence[int], input_split_sizes: Sequence[int]):
    """Uneven all-to-all along dim 0 (see ``Platform.all_to_all_single``), emulated by all-gathers."""
    n = group.size
    check_all_to_all_splits(n, x.shape[0], output_split_sizes, input_split_sizes)
    if n == 1:
        return x
    me = group.ranks.index(_my_rank())
    mine = ms.Tensor(np.array([list(input_split_sizes)], np.int32))
    splits = raw_all_gather(mine, group, 0, (1,) * n).asnumpy()  # [n, n]: row j = rank j's input splits
    sent_here = [int(v) for v in splits[:, me]]
    if sent_here != [int(v) for v in output_split_sizes]:
        raise ValueError(f"all_to_all_single: output_split_sizes {list(output_split_sizes)} on rank {me} do not match "
                         f"what the ranks send to it {sent_here}")
    rest = tuple(x.shape[1:])
    if _use_pairwise(group, x.dtype):  # the rows actually sent, one broadcast per ordered pair
        offsets = np.concatenate([[0], np.cumsum(input_split_sizes)[:-1]])
        send = [mint.narrow(x, 0, int(o), int(c)) for o, c in zip(offsets, input_split_sizes)]
        got = _pairwise(send, [(c,) + rest for c in sent_here], x.dtype, group)
        return mint.cat(got, 0)
    top = int(splits.sum(1).max())
    if top == 0 or sum(sent_here) == 0:
        if top:  # the others still take part in the gather
            raw_all_gather(_pad_to(x, 0, top), group, 0, (top,) * n)
        return mint.zeros((0,) + rest, dtype=x.dtype)
    whole = raw_all_gather(_pad_to(x, 0, top), group, 0, (top,) * n)
    pieces = [mint.narrow(whole, 0, j * top + int(splits[j, :me].sum()), c) for j, c in enumerate(sent_here) if c]
    return pieces[0] if len(pieces) == 1 else mint.cat(pieces, 0)


# ---------------------------------------------------------------------- autograd functions (platform/adjoints.py)
def _keep(ctx, mask) -> None:
    ctx.mask = mask


_RAW = SimpleNamespace(
    all_gather=raw_all_gather, all_reduce=raw_all_reduce, reduce_scatter=raw_reduce_scatter, all_to_all=raw_all_to_all,
    all_to_all_single=raw_all_to_all_single, chunk=chunk_of, own=ms.Tensor.copy, copy=ms.Tensor.copy,
    alias=lambda x: x, zeros_like=ops.zeros_like, group_size=lambda g: g.size, save=_keep, saved=lambda ctx: ctx.mask,
    winners=lambda x, reduced: (x == reduced).astype(x.dtype))
# pylint: disable=invalid-name,unbalanced-tuple-unpacking
(AllGather, Chunk, AllReduce, ReduceScatter, AllToAll, AllToAllSingle, MakePartial, GradAllReduce,
 ScaleGrad) = build_autograd_functions(_Function, _RAW, __name__)


def sizes_tuple(sizes: Sequence[int]) -> Tuple[int, ...]:
    """``sizes`` as a tuple of ints (what the autograd functions keep)."""
    return tuple(int(s) for s in sizes)
# pylint: enable=invalid-name,unbalanced-tuple-unpacking
