# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""MC2 distributed ops (torch): the collective of a tensor-parallel matmul overlapped with the matmul.

* ``all_gather_matmul(x_shard, w, group, gather_dim)`` = ``all_gather(x_shard, gather_dim) @ w``: the
  local shard is split into chunks; every chunk's all-gather is started asynchronously at once, this
  rank's own rows are multiplied while they travel, then each gathered chunk is multiplied as soon as it
  has arrived (and the next ones are still on the wire).
* ``matmul_reduce_scatter(x, w, group, scatter_dim)`` = ``reduce_scatter(x @ w, scatter_dim)`` (sum): the
  rows are cut into chunks, each holding a slice of every rank's output block; chunk ``c``'s product is
  reduce-scattered asynchronously while chunk ``c + 1`` is multiplied.

Backward: the gradient of one is the other (``dx = matmul_reduce_scatter(dy, w.T)`` for the gather, with
``dw`` computed while that reduce-scatter is on the wire; ``dx = all_gather_matmul(dy, w.T)`` for the
reduce-scatter, whose gathered ``dy`` also gives ``dw``). Results equal the unfused sequence to rounding (the
same sums, cut into row blocks). On CPU the collectives are gloo's asynchronous ones; ``w`` is ``[k, n]``
(a ``Linear`` weight is ``weight.t()``). ``group``: a torch process group, a 1-D
``hyper_parallel.DeviceMesh``, or None (the default group).
"""
from __future__ import annotations

from typing import Callable, List, Optional, Tuple

import torch
import torch.distributed as dist

__all__ = ["all_gather_matmul", "matmul_reduce_scatter", "unfused_all_gather_matmul",
           "unfused_matmul_reduce_scatter", "DEFAULT_CHUNKS"]

#: chunks per rank block when ``chunks`` is not given
DEFAULT_CHUNKS = 4

def _all_gather_1(*args, **kwargs):  # looked up per call, so a wrapper of torch.distributed sees it
    return (getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor)(*args, **kwargs)
def _reduce_scatter_1(*args, **kwargs):  # looked up per call, so a wrapper of torch.distributed sees it
    return (getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor)(*args, **kwargs)


def _group(group):
    """A torch process group from ``group`` (process group, 1-D DeviceMesh, or None)."""
    get = getattr(group, "get_group", None)
    if get is not None and not isinstance(group, dist.ProcessGroup):
        if getattr(group, "ndim", 1) != 1:
            raise ValueError(f"MC2 ops need a 1-D mesh or a process group, got a {group.ndim}-D mesh")
        return get(0)
    return group


def _splits(n: int, chunks: Optional[int]) -> List[int]:
    c = max(1, min(int(chunks or DEFAULT_CHUNKS), n)) if n else 1
    base, extra = divmod(n, c)
    return [base + (1 if i < extra else 0) for i in range(c)]


def _check(x: torch.Tensor, w: torch.Tensor, dim: int, name: str) -> int:
    if w.dim() != 2:
        raise ValueError(f"{name}: w must be a 2-D [k, n] matrix, got shape {tuple(w.shape)}")
    if x.dim() < 2 or x.shape[-1] != w.shape[0]:
        raise ValueError(f"{name}: x must be [..., k] with k = w.shape[0] = {w.shape[0]}, got {tuple(x.shape)}")
    d = dim % x.dim() if -x.dim() <= dim < x.dim() else None
    if d is None or d == x.dim() - 1:
        raise ValueError(f"{name}: dim {dim} must name a dim of x other than the contracted last one "
                         f"(x has {x.dim()} dims)")
    return d


def _mm_into(a: torch.Tensor, w: torch.Tensor, out: torch.Tensor) -> None:
    torch.matmul(a, w, out=out)


# ---------------------------------------------------------------------- forward implementations
def _ag_mm(x: torch.Tensor, w: torch.Tensor, group, dim: int, chunks: Optional[int],
           keep_gathered: bool) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """(all_gather(x, dim) @ w, the gathered x or None); overlapped chunk by chunk."""
    p, me = dist.get_world_size(group), dist.get_rank(group)
    xs = x.movedim(dim, 0).contiguous()  # [s, ..., k]
    s = xs.shape[0]
    sizes = _splits(s, chunks)
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    rest = tuple(xs.shape[1:])
    bufs, works = [], []
    for st, sz in zip(starts, sizes):  # start every chunk's all-gather now
        buf = xs.new_empty((p * sz,) + rest)
        works.append(_all_gather_1(buf, xs.narrow(0, st, sz), group=group, async_op=True))
        bufs.append(buf)
    y = xs.new_empty((p * s,) + rest[:-1] + (w.shape[1],))
    _mm_into(xs, w, y.narrow(0, me * s, s))  # own rows: no communication needed
    gathered = xs.new_empty((p * s,) + rest) if keep_gathered else None
    for st, sz, buf, work in zip(starts, sizes, bufs, works):
        work.wait()
        for r in range(p):
            piece = buf.narrow(0, r * sz, sz)
            if gathered is not None:
                gathered.narrow(0, r * s + st, sz).copy_(piece)
            if r != me:
                _mm_into(piece, w, y.narrow(0, r * s + st, sz))
    return y.movedim(0, dim), (gathered.movedim(0, dim) if gathered is not None else None)


def _mm_rs(x: torch.Tensor, w: torch.Tensor, group, dim: int, chunks: Optional[int],
           while_waiting: Optional[Callable[[], None]] = None) -> torch.Tensor:
    """reduce_scatter(x @ w, dim) (sum); the product of chunk c+1 overlaps the reduce-scatter of chunk c."""
    p = dist.get_world_size(group)
    xs = x.movedim(dim, 0)
    total = xs.shape[0]
    if total % p:
        raise ValueError(f"matmul_reduce_scatter: the scattered dim has size {total}, not divisible by the "
                         f"group size {p}")
    b = total // p
    sizes = _splits(b, chunks)
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    out_rest = tuple(xs.shape[1:-1]) + (w.shape[1],)
    outs, works = [], []
    for st, sz in zip(starts, sizes):
        rows = torch.cat([xs.narrow(0, r * b + st, sz) for r in range(p)], 0) if p > 1 else xs.narrow(0, st, sz)
        prod = torch.matmul(rows, w)  # [p * sz, ..., n]: rank r's slice of this chunk at r * sz
        out = prod.new_empty((sz,) + out_rest)
        works.append(_reduce_scatter_1(out, prod.contiguous(), group=group, async_op=True))
        outs.append((out, prod))  # keep prod alive until its collective is done
    if while_waiting is not None:
        while_waiting()
    for work in works:
        work.wait()
    y = torch.cat([o for o, _ in outs], 0) if len(outs) > 1 else outs[0][0]
    return y.movedim(0, dim)


# ---------------------------------------------------------------------- autograd
def _dw(a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """sum over all leading dims of a[..., k]^T g[..., n] -> [k, n]."""
    return a.reshape(-1, a.shape[-1]).t().matmul(g.reshape(-1, g.shape[-1]))


class _AllGatherMatmul(torch.autograd.Function):  # pylint: disable=abstract-method
    @staticmethod
    def forward(ctx, x, w, group, dim, chunks):  # pylint: disable=arguments-differ
        """Run the op (see the module docstring)."""
        y, gathered = _ag_mm(x, w, group, dim, chunks, keep_gathered=w.requires_grad)
        ctx.group, ctx.dim, ctx.chunks = group, dim, chunks
        ctx.save_for_backward(w, gathered)
        return y

    @staticmethod
    def backward(ctx, gy):  # pylint: disable=arguments-differ
        """The gradient (see the module docstring)."""
        w, gathered = ctx.saved_tensors
        dw_box = []

        def weight_grad():
            if gathered is not None:
                dw_box.append(_dw(gathered, gy))

        dx = _mm_rs(gy, w.t(), ctx.group, ctx.dim, ctx.chunks, while_waiting=weight_grad) \
            if ctx.needs_input_grad[0] else None
        if dx is None:
            weight_grad()
        return dx, (dw_box[0] if dw_box else None), None, None, None


class _MatmulReduceScatter(torch.autograd.Function):  # pylint: disable=abstract-method
    @staticmethod
    def forward(ctx, x, w, group, dim, chunks):  # pylint: disable=arguments-differ
        """Run the op (see the module docstring)."""
        ctx.group, ctx.dim, ctx.chunks = group, dim, chunks
        ctx.save_for_backward(x if w.requires_grad else None, w)
        return _mm_rs(x, w, group, dim, chunks)

    @staticmethod
    def backward(ctx, gy):  # pylint: disable=arguments-differ
        """The gradient (see the module docstring)."""
        x, w = ctx.saved_tensors
        dx, g_full = _ag_mm(gy.contiguous(), w.t(), ctx.group, ctx.dim, ctx.chunks, keep_gathered=x is not None)
        dw = _dw(x, g_full) if x is not None else None
        return (dx if ctx.needs_input_grad[0] else None), dw, None, None, None


def all_gather_matmul(x_shard: torch.Tensor, w: torch.Tensor, group=None, gather_dim: int = 0, *,
                      chunks: Optional[int] = None) -> torch.Tensor:
    """``all_gather(x_shard, gather_dim) @ w`` over ``group``, the all-gather overlapped with the matmul.

    ``x_shard``: this rank's ``[..., k]`` shard (equal shards on every rank), ``w``: ``[k, n]``; the
    result is ``[..., n]`` with ``gather_dim`` ``group_size`` times longer. Differentiable in both."""
    d = _check(x_shard, w, gather_dim, "all_gather_matmul")
    return _AllGatherMatmul.apply(x_shard, w, _group(group), d, chunks)


def matmul_reduce_scatter(x: torch.Tensor, w: torch.Tensor, group=None, scatter_dim: int = 0, *,
                          chunks: Optional[int] = None) -> torch.Tensor:
    """``reduce_scatter(x @ w, scatter_dim)`` (sum) over ``group``, the reduce-scatter overlapped with the
    matmul. ``x``: ``[..., k]`` (a rank's partial-sum operand), ``w``: ``[k, n]``; ``scatter_dim`` must be
    divisible by the group size. Differentiable in both."""
    d = _check(x, w, scatter_dim, "matmul_reduce_scatter")
    return _MatmulReduceScatter.apply(x, w, _group(group), d, chunks)


# ---------------------------------------------------------------------- the unfused sequence (baseline)
def unfused_all_gather_matmul(x_shard: torch.Tensor, w: torch.Tensor, group=None, gather_dim: int = 0):
    """The sequence MC2 replaces: a blocking all-gather, then one matmul (differentiable through
    ``torch.distributed.nn``-free autograd: the gather's gradient is a reduce-scatter)."""
    return _UnfusedAG.apply(x_shard, w, _group(group), gather_dim % x_shard.dim())


def unfused_matmul_reduce_scatter(x: torch.Tensor, w: torch.Tensor, group=None, scatter_dim: int = 0):
    """The sequence MC2 replaces: one matmul, then a blocking reduce-scatter."""
    return _UnfusedRS.apply(x, w, _group(group), scatter_dim % x.dim())


def _gather(x, group, dim):
    p = dist.get_world_size(group)
    xs = x.movedim(dim, 0).contiguous()
    out = xs.new_empty((p * xs.shape[0],) + tuple(xs.shape[1:]))
    _all_gather_1(out, xs, group=group)
    return out.movedim(0, dim)


def _scatter(y, group, dim):
    p = dist.get_world_size(group)
    ys = y.movedim(dim, 0).contiguous()
    out = ys.new_empty((ys.shape[0] // p,) + tuple(ys.shape[1:]))
    _reduce_scatter_1(out, ys, group=group)
    return out.movedim(0, dim)


class _UnfusedAG(torch.autograd.Function):  # pylint: disable=abstract-method
    @staticmethod
    def forward(ctx, x, w, group, dim):  # pylint: disable=arguments-differ
        """Run the op (see the module docstring)."""
        full = _gather(x, group, dim)
        ctx.group, ctx.dim = group, dim
        ctx.save_for_backward(full, w)
        return torch.matmul(full, w)

    @staticmethod
    def backward(ctx, gy):  # pylint: disable=arguments-differ
        """The gradient (see the module docstring)."""
        full, w = ctx.saved_tensors
        return _scatter(torch.matmul(gy, w.t()), ctx.group, ctx.dim), _dw(full, gy), None, None


class _UnfusedRS(torch.autograd.Function):  # pylint: disable=abstract-method
    @staticmethod
    def forward(ctx, x, w, group, dim):  # pylint: disable=arguments-differ
        """Run the op (see the module docstring)."""
        ctx.group, ctx.dim = group, dim
        ctx.save_for_backward(x, w)
        return _scatter(torch.matmul(x, w), group, dim)

    @staticmethod
    def backward(ctx, gy):  # pylint: disable=arguments-differ
        """The gradient (see the module docstring)."""
        x, w = ctx.saved_tensors
        g_full = _gather(gy, ctx.group, ctx.dim)
        return torch.matmul(g_full, w.t()), _dw(x, g_full), None, None
