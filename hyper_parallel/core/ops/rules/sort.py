# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Sort family: sort, argsort, msort, topk, kthvalue, median.

The op couples every element along ``dim``, so a mesh dim sharding ``dim`` is requested Replicate
(the dispatcher gathers it) and ``Partial`` inputs are reduced first; shards of other dims are kept,
so the local result (values and indices along ``dim``) is already the global one.

Option ``kind``:
  ``sort``     values + indices, same shape (sort)
  ``argsort``  indices, same shape
  ``msort``    values, same shape, along dim 0
  ``topk``     values + indices, ``dim`` of size ``k``
  ``select``   values + indices, ``dim`` reduced (``keepdim``) (kthvalue, median with a dim);
               without a dim (median) one value of the whole tensor
Option ``params``: positional names after ``self`` (e.g. ``[k, dim, keepdim]``).
"""
from __future__ import annotations

from typing import Any, List, Tuple

from hyper_parallel.core.placement import Placement, Replicate, Shard
from hyper_parallel.core.ops.rules.reductions import checked_dim
from hyper_parallel.core.ops.rule import Decision, OpCall, OpRule

__all__ = ["SortRule"]

KINDS = ("sort", "argsort", "msort", "topk", "select")
_DEFAULT_PARAMS = {"sort": ("dim", "descending"), "argsort": ("dim", "descending"), "msort": (),
                   "topk": ("k", "dim", "largest", "sorted"), "select": ("dim", "keepdim")}


class SortRule(OpRule):
    """Sort-like op along one dim (see the module docstring)."""

    @classmethod
    def allowed_options(cls):
        return ("kind", "params")

    def __init__(self, op: str, **options) -> None:
        super().__init__(op, **options)
        self.kind = options.get("kind", "sort")
        if self.kind not in KINDS:
            raise ValueError(f"{op}: option kind={self.kind!r}; expected one of {KINDS}")
        self.params = tuple(options.get("params", _DEFAULT_PARAMS[self.kind]))

    def param(self, call: OpCall, name: str, default: Any = None) -> Any:
        """Value of parameter ``name`` (positional per ``params``, or keyword)."""
        if name in self.params:
            return call.arg(1 + self.params.index(name), name, default)
        return call.kwargs.get(name, default)

    def infer(self, call: OpCall) -> Decision:
        if len(call.tensors) != 1:
            raise call.fail(f"expected one tensor argument, got {len(call.tensors)}")
        t = call.tensors[0]
        if self.kind == "select" and self.param(call, "dim") is None and "k" not in self.params:
            return self._whole(call)  # median(x): one value of the flattened tensor (kthvalue defaults to -1)
        dim = self._dim(call, t.ndim)
        keepdim = bool(self.param(call, "keepdim", False)) if self.kind == "select" else True
        need: List[Placement] = []
        out: List[Placement] = []
        for d in range(call.mesh_ndim):
            p = t.placements[d] if t.is_dtensor else Replicate()
            keep = isinstance(p, Shard) and p.dim != dim
            need.append(p if keep else Replicate())
            out.append(Shard(p.dim if keepdim or p.dim < dim else p.dim - 1) if keep else Replicate())
        entry = (tuple(out), self._out_shape(call, t.shape, dim, keepdim))
        n_out = 1 if self.kind in ("argsort", "msort") else 2
        return Decision(inputs=[tuple(need)], outputs=entry if n_out == 1 else [entry, entry])

    def _dim(self, call: OpCall, ndim: int) -> int:
        """The sorted/selected dim, normalised (msort: 0; default -1)."""
        dim = 0 if self.kind == "msort" else self.param(call, "dim")
        dim = -1 if dim is None else dim
        if not isinstance(dim, int) or isinstance(dim, bool):
            raise call.fail(f"dim must be an int, got {dim!r}")
        return checked_dim(call.op, dim, ndim)

    def _out_shape(self, call: OpCall, shape, dim: int, keepdim: bool) -> Tuple[int, ...]:
        shape = list(shape)
        if not shape:
            return ()
        if self.kind == "topk":
            k = self.param(call, "k")
            if not isinstance(k, int) or isinstance(k, bool) or not 0 <= k <= shape[dim]:
                raise call.fail(f"k={k!r} must be an int in [0, {shape[dim]}] (size of dim {dim})")
            shape[dim] = k
        elif self.kind == "select":
            if keepdim:
                shape[dim] = 1
            else:
                del shape[dim]
        return tuple(shape)

    @staticmethod
    def _whole(call: OpCall) -> Decision:
        rep = (Replicate(),) * call.mesh_ndim
        return Decision(inputs=[rep], outputs=(rep, ()))
