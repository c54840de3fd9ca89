# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The differentiable collectives, written once for every backend (pure: no framework import).

Each function pairs a forward collective with its explicit adjoint under the gradient convention of
``platform/base.py`` (all-gather <-> chunk / reduce-scatter, all-reduce <-> identity, all-to-all <->
the inverse all-to-all, ...). :func:`build_autograd_functions` turns them into the framework's autograd
function classes, given the framework's function base class and its :class:`RawOps` (the raw,
non-differentiable collectives and the few tensor operations the adjoints need).
"""
from __future__ import annotations

from typing import Any, Protocol, Sequence, Tuple

__all__ = ["RawOps", "build_autograd_functions", "FUNCTION_NAMES"]


class RawOps(Protocol):
    """What a backend supplies to the shared adjoints (all on local tensors, none differentiable)."""

    def all_gather(self, x: Any, group: Any, dim: int, sizes: Sequence[int]) -> Any:
        """Concatenate the ranks' ``x`` along ``dim`` (per-rank ``sizes``)."""

    def all_reduce(self, x: Any, op: str, group: Any) -> Any:
        """Reduce ``x`` over ``group`` (sum, avg, max, min) into a new tensor."""

    def reduce_scatter(self, x: Any, op: str, group: Any, dim: int, sizes: Sequence[int], index: int) -> Any:
        """Reduce and keep chunk ``index`` along ``dim``."""

    def all_to_all(self, x: Any, group: Any, split_dim: int, concat_dim: int, split_sizes: Sequence[int],
                   concat_sizes: Sequence[int], index: int) -> Any:
        """Move sharding from ``concat_dim`` to ``split_dim``."""

    def all_to_all_single(self, x: Any, group: Any, output_split_sizes: Sequence[int],
                          input_split_sizes: Sequence[int]) -> Any:
        """Uneven all-to-all along dim 0."""

    def chunk(self, x: Any, dim: int, sizes: Sequence[int], index: int) -> Any:
        """Chunk ``index`` of ``x`` along ``dim`` (may be a view)."""

    def own(self, x: Any) -> Any:
        """``x`` as a tensor that owns compact memory (a copy only where the framework needs one)."""

    def copy(self, x: Any) -> Any:
        """A fresh copy of ``x``."""

    def alias(self, x: Any) -> Any:
        """A new tensor object sharing ``x``'s data (identity for autograd)."""

    def zeros_like(self, x: Any) -> Any:
        """Zeros shaped like ``x``."""

    def group_size(self, group: Any) -> int:
        """Number of ranks in ``group``."""

    def winners(self, x: Any, reduced: Any) -> Any:
        """Mask of the elements where ``x`` equals the max/min ``reduced`` (multiplies a gradient)."""

    def save(self, ctx: Any, mask: Any) -> None:
        """Keep ``mask`` for the backward of ``ctx``."""

    def saved(self, ctx: Any) -> Any:
        """The mask kept by :meth:`save`."""


FUNCTION_NAMES = ("AllGather", "Chunk", "AllReduce", "ReduceScatter", "AllToAll", "AllToAllSingle", "MakePartial",
                  "GradAllReduce", "ScaleGrad")


def _gather_pair(raw: RawOps):
    def forward(ctx, x, group, dim, sizes, index, grad_partial):
        """S -> R on local tensors."""
        ctx.args = (group, dim, sizes, index, grad_partial)
        return raw.all_gather(x, group, dim, sizes)

    def backward(ctx, grad):
        """Own chunk of the gradient, or its reduce-scatter when the consumers' gradient is partial."""
        group, dim, sizes, index, grad_partial = ctx.args
        if grad_partial:
            return raw.reduce_scatter(grad, "sum", group, dim, sizes, index), None, None, None, None, None
        return raw.own(raw.chunk(grad, dim, sizes, index)), None, None, None, None, None

    return forward, backward


def _chunk_pair(raw: RawOps):
    def forward(ctx, x, dim, sizes, index, group):
        """R -> S (local) on local tensors."""
        ctx.args = (dim, sizes, group)
        return raw.copy(raw.chunk(x, dim, sizes, index))

    def backward(ctx, grad):
        """All-gather of the shard gradients (a replicated gradient)."""
        dim, sizes, group = ctx.args
        return raw.all_gather(grad, group, dim, sizes), None, None, None, None

    return forward, backward


def _all_reduce_pair(raw: RawOps):
    def forward(ctx, x, op, group):
        """P -> R on local tensors."""
        out = raw.all_reduce(x, op, group)
        ctx.op = op
        ctx.n = raw.group_size(group)
        if op in ("max", "min"):
            raw.save(ctx, raw.winners(x, out))
        return out

    def backward(ctx, grad):
        """Identity (sum), 1/n (avg), mask of the winning ranks (max/min)."""
        if ctx.op == "sum":
            return grad, None, None
        if ctx.op == "avg":
            return grad / ctx.n, None, None
        return grad * raw.saved(ctx), None, None

    return forward, backward


def _reduce_scatter_pair(raw: RawOps):
    def forward(ctx, x, op, group, dim, sizes, index):
        """P -> S on local tensors."""
        ctx.args = (op, group, dim, sizes)
        if op in ("max", "min"):
            full = raw.all_reduce(x, op, group)
            raw.save(ctx, raw.winners(x, full))
            return raw.copy(raw.chunk(full, dim, sizes, index))
        return raw.own(raw.reduce_scatter(x, op, group, dim, sizes, index))

    def backward(ctx, grad):
        """All-gather (divided by n for avg; for max/min masked to where this rank's value won)."""
        op, group, dim, sizes = ctx.args
        full = raw.all_gather(grad, group, dim, sizes)
        if op == "avg":
            full = full / len(sizes)
        elif op in ("max", "min"):
            full = full * raw.saved(ctx)
        return full, None, None, None, None, None

    return forward, backward


def _all_to_all_pair(raw: RawOps):
    def forward(ctx, x, group, split_dim, concat_dim, split_sizes, concat_sizes, index):
        """S(c) -> S(s) on local tensors."""
        ctx.args = (group, split_dim, concat_dim, split_sizes, concat_sizes, index)
        return raw.own(raw.all_to_all(x, group, split_dim, concat_dim, split_sizes, concat_sizes, index))

    def backward(ctx, grad):
        """The inverse all-to-all S(s) -> S(c)."""
        group, split_dim, concat_dim, split_sizes, concat_sizes, index = ctx.args
        back = raw.all_to_all(grad, group, concat_dim, split_dim, concat_sizes, split_sizes, index)
        return back, None, None, None, None, None, None

    return forward, backward


def _all_to_all_single_pair(raw: RawOps):
    def forward(ctx, x, group, output_split_sizes, input_split_sizes):
        """Uneven all-to-all along dim 0 on local tensors."""
        ctx.args = (group, output_split_sizes, input_split_sizes)
        return raw.own(raw.all_to_all_single(x, group, output_split_sizes, input_split_sizes))

    def backward(ctx, grad):
        """The same exchange with the split sizes swapped."""
        group, out_splits, in_splits = ctx.args
        return raw.all_to_all_single(grad, group, in_splits, out_splits), None, None, None

    return forward, backward


def _make_partial_pair(raw: RawOps):
    def forward(ctx, x, op, index, n):
        """R -> P (local): sum keeps ``x`` on coordinate 0 and zeros elsewhere."""
        ctx.scale = n if op == "avg" else 1
        if op == "sum" and index != 0:
            return raw.zeros_like(x)
        return raw.copy(x)

    def backward(ctx, grad):
        """Identity (x n for avg, whose local gradient is 1/n of the global)."""
        return (grad * ctx.scale if ctx.scale != 1 else grad), None, None, None

    return forward, backward


def _grad_all_reduce_pair(raw: RawOps):
    def forward(ctx, x, group):
        """Identity."""
        ctx.group = group
        return raw.alias(x)

    def backward(ctx, grad):
        """All-reduce (sum) of the gradient (Megatron's ``f``)."""
        return raw.all_reduce(grad, "sum", ctx.group), None

    return forward, backward


def _scale_grad_pair(raw: RawOps):
    def forward(ctx, x, scale):
        """Identity."""
        ctx.scale = scale
        return raw.alias(x)

    def backward(ctx, grad):
        """The gradient times ``scale`` (keeps a ``grad_partial`` promise)."""
        return grad * ctx.scale, None

    return forward, backward


_PAIRS = {"AllGather": (_gather_pair, "S -> R. Adjoint: own chunk of the gradient (reduce-scatter when partial)."),
          "Chunk": (_chunk_pair, "R -> S (local). Adjoint: all-gather of the shard gradients."),
          "AllReduce": (_all_reduce_pair, "P -> R. Adjoint: identity (sum), 1/n (avg), winners' mask (max/min)."),
          "ReduceScatter": (_reduce_scatter_pair, "P -> S. Adjoint: all-gather (/n for avg, masked for max/min)."),
          "AllToAll": (_all_to_all_pair, "S(c) -> S(s). Adjoint: the inverse all-to-all S(s) -> S(c)."),
          "AllToAllSingle": (_all_to_all_single_pair, "Uneven all-to-all along dim 0. Adjoint: splits swapped."),
          "MakePartial": (_make_partial_pair, "R -> P (local). Adjoint: identity (x n for avg)."),
          "GradAllReduce": (_grad_all_reduce_pair, "Identity forward; all-reduce(sum) of the gradient."),
          "ScaleGrad": (_scale_grad_pair, "Identity forward; gradient multiplied by ``scale``.")}


def build_autograd_functions(function_base: type, raw: RawOps, module: str) -> Tuple[type, ...]:
    """The classes named by :data:`FUNCTION_NAMES`, in that order, as subclasses of ``function_base``
    (``torch.autograd.Function``, MindSpore's custom-function base) over ``raw``; ``module`` is the module
    they are presented in."""
    out = []
    for name in FUNCTION_NAMES:
        pair, doc = _PAIRS[name]
        forward, backward = pair(raw)
        out.append(type(name, (function_base,), {"__doc__": doc, "__module__": module,
                                                 "forward": staticmethod(forward), "backward": staticmethod(backward)}))
    return tuple(out)
