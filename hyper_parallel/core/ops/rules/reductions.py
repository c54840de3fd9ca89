# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Reductions (sum, mean, amax, max/min, argmax, prod, norm, var/std, logsumexp, all/any, count_nonzero,
nanmean) and scans (cumsum, cumprod, logcumsumexp, cummax, cummin).

Per mesh dimension, with input placement ``p`` and reduced tensor dims ``R``:

* ``Replicate``            -> Replicate.
* ``Shard(k)``, k not in R -> ``Shard(k')`` (k shifted left past removed dims unless ``keepdim``).
* ``Shard(k)``, k in R     -> by the rule's ``kind`` option:

  ``sum``       ``Partial(sum)`` (local sums add up).
  ``mean``      ``Partial(sum)`` through the ``expand_mean`` expand: local *sum* divided by the
                *global* count of reduced elements, so uneven and empty shards stay right.
  ``count``     ``Partial(sum)`` (count_nonzero).
  ``extreme``   ``Partial(max)`` / ``Partial(min)`` (amax, amin, max/min without dim) through
                ``expand_extreme``: an empty local shard yields the reduction's identity (-inf/+inf).
  ``select``    Replicate through ``expand_pick`` (max/min/argmax/argmin with a dim): local values and
                indices, indices shifted by the shard's global offset, then all-gathered (a
                differentiable all-gather) and the winner picked per mesh dim, inner mesh dim first,
                so ties resolve to the lowest global index like single-device torch.
  ``logic``     Replicate through ``expand_logic`` (all/any): local result all-reduced (min/max).
  ``combine``   Replicate through ``expand_combine`` (logsumexp, prod, norm with p >= 1 or inf):
                the local results (output-sized, not input-sized) are all-gathered (differentiable) and
                combined with the same reduction; option ``combine``: ``logsumexp`` | ``prod`` | ``norm``.
                A norm of another order (p < 1, 'nuc') falls back to ``replicate``.
  ``moments``   Replicate through ``expand_moments`` (var, std, var_mean, std_mean; the ``MomentsRule``):
                local (count, mean, sum of squared deviations) all-gathered and merged with Chan's
                parallel formula, so only output-sized statistics travel.
  ``replicate`` the input is requested Replicate on that mesh dim (nanmean, argmax without dim:
                not decomposable into a placement).

* ``Partial(sum|avg)`` stays partial for the linear kinds (``sum``, ``mean``); ``Partial(max)``
  stays for amax/max and ``Partial(min)`` for amin/min; otherwise the input is requested Replicate.

``params`` lists the positional parameters after ``self`` (e.g. ``[dim, keepdim]``, ``[p, dim, keepdim]``);
``dim`` of None or ``()`` means every dim. The scan rule keeps shards of other dims. cumsum keeps
``Partial(sum)`` and, along a dim sharded by exactly one mesh dim, runs ``expand_scan``: local cumsum plus
the exclusive prefix of the other shards' totals (an all-gather whose adjoint is a reduce-scatter); a dim
sharded by two mesh dims is requested Replicate on the inner one(s). The other scans (cumprod,
logcumsumexp, cummax, cummin) request Replicate on the scanned dim and on Partial inputs.
"""
from __future__ import annotations

from typing import Any, Dict, List, Sequence, Tuple

from hyper_parallel.core.placement import Partial, Placement, Replicate, Shard
from hyper_parallel.core.ops.rule import Decision, OpCall, OpRule, RuleError

__all__ = ["ReductionRule", "MomentsRule", "MaxMinRule", "ArgReduceRule", "ScanRule", "checked_dim", "reduced_dims",
           "reduced_shape", "shifted_dim", "local_offset", "norm_order"]

KINDS = ("sum", "mean", "count", "extreme", "select", "logic", "combine", "moments", "replicate")
COMBINES = ("logsumexp", "prod", "norm")
_PSUM = Partial("sum")
_EXPANDS = {"mean": "expand_mean", "extreme": "expand_extreme", "select": "expand_pick", "logic": "expand_logic",
            "combine": "expand_combine", "moments": "expand_moments"}


# ---------------------------------------------------------------------- pure helpers (shared by families)
def checked_dim(op: str, dim: int, ndim: int) -> int:
    """Non-negative ``dim``; a RuleError naming ``op`` when out of range (0-d tensors accept 0 and -1)."""
    rank = max(ndim, 1)
    if not -rank <= dim < rank:
        raise RuleError(f"{op}: dim={dim} is out of range for a {ndim}-D tensor")
    return dim % rank


def reduced_dims(dim: Any, ndim: int, op: str) -> Tuple[int, ...]:
    """Normalised, sorted reduced dims; ``None`` or an empty tuple/list means every dim."""
    if ndim == 0:
        if dim is not None and not isinstance(dim, (tuple, list)):
            checked_dim(op, dim, 0)
        return ()
    if dim is None or (isinstance(dim, (tuple, list)) and not dim):
        return tuple(range(ndim))
    raw = list(dim) if isinstance(dim, (tuple, list)) else [dim]
    out = []
    for d in raw:
        if not isinstance(d, int) or isinstance(d, bool):
            raise RuleError(f"{op}: dim must be an int or a tuple of ints, got {dim!r}")
        out.append(checked_dim(op, d, ndim))
    if len(set(out)) != len(out):
        raise RuleError(f"{op}: dim {dim!r} names a dimension twice")
    return tuple(sorted(out))


def reduced_shape(shape: Sequence[int], dims: Sequence[int], keepdim: bool) -> Tuple[int, ...]:
    """Global output shape of a reduction over ``dims``."""
    if keepdim:
        return tuple(1 if i in dims else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in dims)


def shifted_dim(k: int, dims: Sequence[int], keepdim: bool) -> int:
    """Output dim of input dim ``k`` (not reduced) after reducing ``dims``."""
    return k if keepdim else k - sum(1 for r in dims if r < k)


def local_offset(plan, placements, shape, dim: int) -> int:
    """Global offset of this rank's shard along tensor ``dim``."""
    from hyper_parallel.core.spec import DTensorSpec
    spec = DTensorSpec(plan.mesh, placements, shape)
    return spec.local_shape_and_offset(plan.mesh.get_coordinate())[1][dim]


def norm_order(p: Any, many_dims: bool):
    """The vector-norm order ``p`` when shard norms can be combined into the norm (p >= 1 or inf; 'fro' is 2
    unless given more than 2 explicit dims), else None (p < 1, -inf, 'nuc': not combinable this way)."""
    if p == "fro" and not many_dims:
        return 2
    if isinstance(p, (int, float)) and not isinstance(p, bool) and p >= 1:
        return p
    return None


def _with_first(args, first):
    """``args`` with the first positional argument replaced."""
    return [first] + list(args[1:])


# ---------------------------------------------------------------------- reduction rule
class ReductionRule(OpRule):
    """A reduction of one tensor over ``dim`` (see the module docstring for the options)."""

    default_kind = "sum"

    @classmethod
    def allowed_options(cls):
        return ("kind", "params", "reduce", "outputs", "combine")

    def __init__(self, op: str, **options) -> None:
        super().__init__(op, **options)
        self.kind = options.get("kind", self.default_kind)
        if self.kind not in KINDS:
            raise ValueError(f"{op}: option kind={self.kind!r}; expected one of {KINDS}")
        self.params = tuple(options.get("params", ("dim", "keepdim")))
        self.reduce = options.get("reduce", "max")
        if self.reduce not in ("max", "min"):
            raise ValueError(f"{op}: option reduce={self.reduce!r}; expected 'max' or 'min'")
        self.combine = options.get("combine")
        if (self.kind == "combine") != (self.combine in COMBINES):
            raise ValueError(f"{op}: option combine={self.combine!r}; kind 'combine' needs one of {COMBINES}")
        self.n_out = int(options.get("outputs", 1))
        if self.n_out not in (1, 2) or (self.n_out == 2 and self.kind not in ("replicate", "moments")):
            raise ValueError(f"{op}: option outputs={self.n_out!r}; 2 outputs need kind 'replicate' or 'moments'")

    # ------------------------------------------------------------------ arguments
    def param(self, call: OpCall, name: str, default: Any = None) -> Any:
        """Value of parameter ``name`` (positional per ``params``, or keyword)."""
        if name in self.params:
            return call.arg(1 + self.params.index(name), name, default)
        return call.kwargs.get(name, default)

    def parse(self, call: OpCall) -> Tuple[Tuple[int, ...], bool]:
        """(reduced dims, keepdim) of this call."""
        t = self.source(call)
        dim = self.param(call, "dim")
        if isinstance(dim, bool):  # var/std(x, unbiased): the bool sits where dim would
            dim = None
        if isinstance(dim, tuple) and dim and dim[0] == "__tensor__":
            raise call.fail("dim must be an int or a tuple of ints, not a tensor")
        return reduced_dims(dim, t.ndim, call.op), bool(self.param(call, "keepdim", False))

    @staticmethod
    def source(call: OpCall):
        """The reduced tensor (the first tensor argument)."""
        if not call.tensors:
            raise call.fail("expected a tensor input")
        return call.tensors[0]

    # ------------------------------------------------------------------ inference
    def infer(self, call: OpCall) -> Decision:
        if len(call.tensors) != 1:
            raise call.fail(f"expected one tensor argument, got {len(call.tensors)}")
        dims, keepdim = self.parse(call)
        kind = self.kind
        if kind == "combine" and self.combine == "norm" and self.norm_ord(call) is None:
            kind = "replicate"
        return self.decide(call, kind, dims, keepdim, self.n_out)

    def norm_ord(self, call: OpCall):
        """The combinable vector-norm order of a norm call, or None (see :func:`norm_order`)."""
        p = self.param(call, "ord", 2) if "ord" in self.params else self.param(call, "p", "fro")
        dim = self.param(call, "dim")
        return norm_order(p, isinstance(dim, (tuple, list)) and len(dim) > 2)

    def decide(self, call: OpCall, kind: str, dims: Tuple[int, ...], keepdim: bool, n_out: int = 1) -> Decision:
        """Decision for reducing ``dims`` with ``kind`` (``n_out`` equal outputs, e.g. values and indices)."""
        t = self.source(call)
        need: List[Placement] = []
        out: List[Placement] = []
        reduced_mesh_dims: List[int] = []
        for d in range(call.mesh_ndim):
            p = t.placements[d] if t.is_dtensor else Replicate()
            n, o = self.mesh_dim(kind, p, dims, keepdim)
            if isinstance(p, Shard) and p.dim in dims and n is p:
                reduced_mesh_dims.append(d)
            need.append(n)
            out.append(o)
        shape = reduced_shape(t.shape, dims, keepdim)
        entry = (tuple(out), shape)
        outputs = entry if n_out == 1 else [entry] * n_out
        expand = _EXPANDS.get(kind) if reduced_mesh_dims else None
        extra = {"dims": dims, "keepdim": keepdim, "mesh_dims": tuple(reduced_mesh_dims), "input": tuple(need)}
        if kind == "combine" and self.combine == "norm":
            extra["ord"] = self.norm_ord(call)
        return Decision(inputs=[tuple(need)] + [None] * (len(call.tensors) - 1), outputs=outputs, expand=expand,
                        extra=extra)

    def mesh_dim(self, kind: str, p: Placement, dims, keepdim) -> Tuple[Placement, Placement]:
        """(required input placement, output placement) on one mesh dim."""
        if isinstance(p, Shard):
            if p.dim not in dims:
                return p, Shard(shifted_dim(p.dim, dims, keepdim))
            return self.sharded_reduced(kind, p)
        if isinstance(p, Partial):
            if kind in ("sum", "mean") and p.reduce_op in ("sum", "avg"):
                return p, p
            if kind == "extreme" and p.reduce_op == self.reduce:
                return p, p
        return Replicate(), Replicate()

    def sharded_reduced(self, kind: str, p: Shard) -> Tuple[Placement, Placement]:
        """Placements when the reduced dim is sharded on this mesh dim."""
        if kind in ("sum", "mean", "count"):
            return p, _PSUM
        if kind == "extreme":
            return p, Partial(self.reduce)
        if kind in ("select", "logic", "combine", "moments"):
            return p, Replicate()
        return Replicate(), Replicate()

    # ------------------------------------------------------------------ expands (local tensors)


class MomentsRule(ReductionRule):
    """var / std (option ``moment``), with the mean as a second output for var_mean / std_mean
    (``outputs: 2``); ``correction`` / ``unbiased`` as in torch."""

    default_kind = "moments"

    @classmethod
    def allowed_options(cls):
        return ("params", "outputs", "moment")

    def __init__(self, op: str, **options) -> None:
        super().__init__(op, **options)
        self.moment = options.get("moment", "var")
        if self.moment not in ("var", "std"):
            raise ValueError(f"{op}: option moment={self.moment!r}; expected 'var' or 'std'")

    def infer(self, call: OpCall) -> Decision:
        decision = super().infer(call)
        decision.extra["correction"] = self.correction(call)
        return decision

    def correction(self, call: OpCall):
        """Bessel correction of the call (``correction``, else ``unbiased``, default 1)."""
        if call.kwargs.get("correction") is not None:
            return call.kwargs["correction"]
        unbiased = self.param(call, "unbiased")
        if isinstance(self.param(call, "dim"), bool):  # var(x, unbiased)
            unbiased = self.param(call, "dim")
        return 0 if unbiased is False else 1


class MaxMinRule(ReductionRule):
    """``max``/``min``: element-wise with a second tensor, (values, indices) with ``dim``, else a value.

    Option ``reduce``: ``max`` or ``min``.
    """

    def __init__(self, op: str, **options) -> None:
        options.setdefault("kind", "extreme")
        super().__init__(op, **options)
        from hyper_parallel.core.ops.rules.elementwise import ElementwiseRule
        self._binary = ElementwiseRule(op)

    def infer(self, call: OpCall) -> Decision:
        if len(call.tensors) == 2:
            return self._binary.infer(call)
        if len(call.tensors) != 1:
            raise call.fail(f"expected one or two tensor arguments, got {len(call.tensors)}")
        dim = self.param(call, "dim")
        if dim is None:
            return self.decide(call, "extreme", reduced_dims(None, self.source(call).ndim, call.op), False)
        if not isinstance(dim, int) or isinstance(dim, bool):
            raise call.fail(f"dim must be an int, got {dim!r}")
        dims = reduced_dims(dim, self.source(call).ndim, call.op)
        return self.decide(call, "select", dims, bool(self.param(call, "keepdim", False)), n_out=2)


class ArgReduceRule(ReductionRule):
    """``argmax``/``argmin``: along a dim like ``max``/``min`` with indices (``expand_pick``); without a
    dim (flattened index) the sharded dims are requested Replicate. Option ``reduce``: ``max`` or ``min``."""

    def infer(self, call: OpCall) -> Decision:
        if len(call.tensors) != 1:
            raise call.fail(f"expected one tensor argument, got {len(call.tensors)}")
        t = self.source(call)
        dim = self.param(call, "dim")
        keepdim = bool(self.param(call, "keepdim", False))
        if dim is None:
            return self.decide(call, "replicate", reduced_dims(None, t.ndim, call.op), keepdim)
        if not isinstance(dim, int) or isinstance(dim, bool):
            raise call.fail(f"dim must be an int, got {dim!r}")
        return self.decide(call, "select", reduced_dims(dim, t.ndim, call.op), keepdim)


# ---------------------------------------------------------------------- scans
class ScanRule(OpRule):
    """Inclusive scan along ``dim``.

    Option ``kind``: ``sum`` (cumsum: shards of other dims and ``Partial(sum|avg)`` are kept; along a dim
    sharded by one mesh dim ``expand_scan`` adds the exclusive prefix of the shard totals) or
    ``replicate`` (cumprod, logcumsumexp, cummax, cummin: the scanned dim and Partial inputs are
    requested Replicate). Option ``outputs``: 2 for (values, indices) scans (cummax, cummin).
    """

    @classmethod
    def allowed_options(cls):
        return ("kind", "outputs")

    def __init__(self, op: str, **options) -> None:
        super().__init__(op, **options)
        self.kind = options.get("kind", "sum")
        if self.kind not in ("sum", "replicate"):
            raise ValueError(f"{op}: option kind={self.kind!r}; expected 'sum' or 'replicate'")
        self.n_out = int(options.get("outputs", 1))

    def infer(self, call: OpCall) -> Decision:
        if len(call.tensors) != 1:
            raise call.fail(f"expected one tensor argument, got {len(call.tensors)}")
        t = call.tensors[0]
        dim = call.arg(1, "dim")
        if not isinstance(dim, int) or isinstance(dim, bool):
            raise call.fail(f"dim must be an int, got {dim!r}")
        dim = checked_dim(call.op, dim, t.ndim)
        need: List[Placement] = []
        scan_dims: List[int] = []
        for d in range(call.mesh_ndim):
            p = self._need(t.placements[d] if t.is_dtensor else Replicate(), dim, bool(scan_dims))
            if isinstance(p, Shard) and p.dim == dim:
                scan_dims.append(d)
            need.append(p)
        extra: Dict[str, Any] = {"dim": dim, "mesh_dims": tuple(scan_dims)}
        entry = (tuple(need), tuple(t.shape))
        return Decision(inputs=[tuple(need)], outputs=entry if self.n_out == 1 else [entry, entry],
                        expand="expand_scan" if scan_dims else None, extra=extra)

    def _need(self, p: Placement, dim: int, expanding: bool) -> Placement:
        """Required placement on one mesh dim (``expanding``: an earlier mesh dim already shards ``dim``)."""
        if isinstance(p, Shard) and p.dim == dim:
            # a second mesh dim sharding the scanned dim, or a non-sum scan: gather it
            return Replicate() if expanding or self.kind != "sum" else p
        if isinstance(p, Partial) and (self.kind != "sum" or p.reduce_op not in ("sum", "avg")):
            return Replicate()
        return p
