# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Rule classes parameterised by a confirmed dist-op plan (``hp-agent dist-op dev``).

The pipeline writes no Python per op: a plan's registry entry names one of these classes and passes what
the plan found as options (where the layout argument sits, its default, whether the op is linear, how
the output shape changes, which expand keeps a shard of the coupled dim)::

    torch.diff:
      rule: DimLocalRule
      module: hyper_parallel.core.ops.rules.planned
      options: {dim_position: 2, dim_default: -1, linear: true, shape: minus_n, n_position: 1, n_default: 1}

* :class:`DimLocalRule` — every dim but ``dim`` may stay sharded; the output shape is the input's
  (``same``), halved along ``dim`` (``halved``, e.g. ``glu``) or shortened by ``n`` (``minus_n``, ``diff``);
* :class:`CoupledDimRule` — the softmax layout with the dim at any position; with ``expand: pnorm`` a
  shard of ``dim`` is kept and the p-norm's sum is all-reduced (``normalize``);
* :class:`CombineScanRule` — an inclusive scan whose shards combine with ``mul``, ``logaddexp``,
  ``maximum``, ``minimum`` or ``add`` (the carry of the earlier shards is folded in).

The expands use tensor methods and the backend of the tensor (:func:`hyper_parallel.platform.platform_for`)
only: this module imports no framework.
"""
from __future__ import annotations

from typing import Any, Dict, Tuple

from hyper_parallel.core.ops.rule import Decision, OpCall, OpRule, RuleError, normalize_dim
from hyper_parallel.core.ops.rules.normalization import SoftmaxRule
from hyper_parallel.core.ops.rules.reductions import ScanRule
from hyper_parallel.core.placement import Partial, Placement, Replicate, Shard

__all__ = ["DimLocalRule", "CoupledDimRule", "CombineScanRule", "SHAPES", "COMBINES"]

SHAPES = ("same", "halved", "minus_n")
COMBINES = {"add": 0.0, "mul": 1.0, "logaddexp": float("-inf"), "maximum": float("-inf"),
            "minimum": float("inf")}
_DIM_OPTIONS = ("dim_param", "dim_position", "dim_default")


def _int_option(op: str, options: Dict[str, Any], key: str, default: Any) -> Any:
    value = options.get(key, default)
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
        raise RuleError(f"{op}: option {key}={value!r}: expected a non-negative int (an argument position)")
    return value


class _DimArgument:
    """Reads the layout argument named by the options ``dim_param`` (default ``dim``), ``dim_position``
    (its positional index, required) and ``dim_default`` (its default when absent)."""

    def __init__(self, op: str, options: Dict[str, Any]) -> None:
        self.name = options.get("dim_param", "dim")
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise RuleError(f"{op}: option dim_param={self.name!r}: expected an argument name")
        self.position = _int_option(op, options, "dim_position", None)
        if self.position is None:
            raise RuleError(f"{op}: option dim_position is required (the positional index of {self.name!r})")
        self.default = options.get("dim_default")

    def read(self, call: OpCall, ndim: int) -> int:
        """The non-negative dim of ``call`` (a RuleError naming the op when missing or out of range)."""
        dim = call.arg(self.position, self.name, self.default)
        if not isinstance(dim, int) or isinstance(dim, bool):
            raise call.fail(f"{self.name} must be an int, got {dim!r}")
        try:
            return normalize_dim(dim, ndim, self.name)
        except RuleError as exc:
            raise call.fail(str(exc)) from exc


class DimLocalRule(OpRule):
    """Dim-local layout: per mesh dim, ``Shard(k)`` with ``k`` other than ``dim`` is kept (same output dim),
    a shard of ``dim`` is gathered (Replicate), ``Partial(sum|avg)`` stays partial when the op is linear
    (option ``linear: true``) and is reduced first otherwise.

    Options: ``dim_param``/``dim_position``/``dim_default`` (the layout argument), ``linear``, ``shape``
    (``same``, ``halved``: the output halves along ``dim``, whose size must be even; ``minus_n``: it loses
    ``n`` entries, ``n`` read from ``n_position`` with default ``n_default``).
    """

    @classmethod
    def allowed_options(cls):
        return _DIM_OPTIONS + ("linear", "shape", "n_position", "n_default")

    def __init__(self, op: str, **options: Any) -> None:
        super().__init__(op, **options)
        self.dim = _DimArgument(op, options)
        self.cache_args = (self.dim.name, "n") if options.get("shape") == "minus_n" else (self.dim.name,)
        self.linear = bool(options.get("linear", False))
        self.shape = options.get("shape", "same")
        if self.shape not in SHAPES:
            raise RuleError(f"{op}: option shape={self.shape!r}; expected one of {list(SHAPES)}")
        self.n_position = _int_option(op, options, "n_position", None)
        if self.shape == "minus_n" and self.n_position is None:
            raise RuleError(f"{op}: option shape=minus_n needs n_position (the positional index of n)")
        self.n_default = options.get("n_default", 1)

    def infer(self, call: OpCall) -> Decision:
        """Input requirements and output spec (see the class docstring)."""
        if len(call.tensors) != 1:
            raise call.fail(f"expected one tensor argument, got {len(call.tensors)}")
        t = call.tensors[0]
        dim = self.dim.read(call, t.ndim)
        shape = self.output_shape(call, tuple(t.shape), dim)
        need = tuple(self.keep(t.placements[d] if t.is_dtensor else Replicate(), dim)
                     for d in range(call.mesh_ndim))
        return Decision(inputs=[need], outputs=(need, shape))

    def keep(self, p: Placement, dim: int) -> Placement:
        """The placement an input may keep on one mesh dim."""
        if isinstance(p, Shard) and p.dim != dim:
            return p
        if self.linear and isinstance(p, Partial) and p.reduce_op in ("sum", "avg"):
            return p
        return Replicate()

    def output_shape(self, call: OpCall, shape: Tuple[int, ...], dim: int) -> Tuple[int, ...]:
        """Global output shape (option ``shape``)."""
        if self.shape == "halved":
            if shape[dim] % 2:
                raise call.fail(f"{self.dim.name}={dim} has size {shape[dim]}: it must be even (the output "
                                "halves along it)")
            return tuple(s // 2 if i == dim else s for i, s in enumerate(shape))
        if self.shape == "minus_n":
            n = call.arg(self.n_position, "n", self.n_default)
            if not isinstance(n, int) or isinstance(n, bool) or n < 0:
                raise call.fail(f"n={n!r}: expected a non-negative int")
            return tuple(max(s - n, 0) if i == dim else s for i, s in enumerate(shape))
        return shape


class CoupledDimRule(SoftmaxRule):
    """The softmax layout (every dim but ``dim`` may stay sharded, shape kept) with the dim read from
    ``dim_position``/``dim_param``/``dim_default``.

    Option ``expand: pnorm`` (``x / max(||x||_p, eps)`` along ``dim``, e.g. ``F.normalize``): a shard of
    ``dim`` on one mesh dim is kept; ``expand_pnorm`` sums ``|x|^p`` locally and all-reduces the sum (its
    adjoint all-reduces the gradient too: every shard's output depends on it). ``p`` and ``eps`` are read
    from ``p_position``/``p_default`` and ``eps_position``/``eps_default``.
    """

    @classmethod
    def allowed_options(cls):
        return tuple(SoftmaxRule.allowed_options()) + _DIM_OPTIONS + (
            "expand", "p_position", "p_default", "eps_position", "eps_default")

    def __init__(self, op: str, **options: Any) -> None:
        super().__init__(op, **options)
        self.dim = _DimArgument(op, options)
        self.cache_args = (self.dim.name,)
        self.expand = options.get("expand")
        if self.expand not in (None, "pnorm"):
            raise RuleError(f"{op}: option expand={self.expand!r}; expected null or 'pnorm'")
        if self.expand == "pnorm":
            self.p_position = _int_option(op, options, "p_position", None)
            self.eps_position = _int_option(op, options, "eps_position", None)
            if self.p_position is None or self.eps_position is None:
                raise RuleError(f"{op}: option expand=pnorm needs p_position and eps_position")

    def infer(self, call: OpCall) -> Decision:
        """Input requirements and output spec (see the class docstring)."""
        if len(call.tensors) != 1:
            raise call.fail(f"expected one tensor argument, got {len(call.tensors)}")
        t = call.tensors[0]
        raw = call.arg(self.dim.position, self.dim.name, self.dim.default)
        decision = super().infer(OpCall(call.op, call.tensors, (("__tensor__", 0), raw), {}, call.mesh_shape))
        if self.expand != "pnorm":
            return decision
        dim = normalize_dim(raw, t.ndim)
        sharding = [d for d, p in enumerate(t.placements or ()) if isinstance(p, Shard) and p.dim == dim]
        if len(sharding) != 1:
            return decision
        need = list(decision.inputs[0])
        need[sharding[0]] = Shard(dim)
        return Decision(inputs=[tuple(need)], outputs=(tuple(need), tuple(t.shape)), expand="expand_pnorm",
                        extra={"dim": dim, "mesh_dims": tuple(sharding)})

    def expand_pnorm(self, func: Any, args: Any, kwargs: Any, plan: Any) -> Any:  # pylint: disable=unused-argument
        """``x / max(||x||_p, eps)`` with the p-norm's sum over ``dim`` all-reduced across shards."""
        from hyper_parallel.platform import platform_for
        call = plan.call
        p = call.arg(self.p_position, "p", self.options.get("p_default", 2.0))
        eps = call.arg(self.eps_position, "eps", self.options.get("eps_default", 1e-12))
        if not isinstance(p, (int, float)) or isinstance(p, bool) or not 0 < p < float("inf"):
            raise call.fail(f"p={p!r}: a sharded {self.dim.name} needs a finite positive p")
        x = args[0]
        dim = plan.decision.extra["dim"]
        (d,) = plan.decision.extra["mesh_dims"]
        group = plan.mesh.get_group(d)
        plat = platform_for(x)
        local = x.abs().pow(p).sum(dim, keepdim=True)
        # forward: sum over the shards; backward: every shard's output depends on the sum -> all-reduce too
        total = plat.all_reduce(plat.grad_all_reduce(local, group), "sum", group)
        return x / total.pow(1.0 / p).clamp_min(eps).expand_as(x)


class CombineScanRule(ScanRule):
    """Inclusive scan along ``dim`` whose shards combine with option ``combine`` (a tensor method:
    ``add``, ``mul``, ``logaddexp``, ``maximum``, ``minimum``). Shards of other dims are kept; with
    ``linear: true`` (only a sum scan) ``Partial(sum)`` inputs stay partial, else they are reduced first.
    Along a scanned dim sharded by one mesh dim, ``expand_scan`` runs the local scan and folds in the carry
    of the earlier shards (their last values, all-gathered; the adjoint is a reduce-scatter)."""

    @classmethod
    def allowed_options(cls):
        return _DIM_OPTIONS + ("combine", "linear")

    def __init__(self, op: str, **options: Any) -> None:
        super().__init__(op)
        self.options = options
        self.dim = _DimArgument(op, options)
        self.cache_args = (self.dim.name,)
        self.combine = options.get("combine")
        if self.combine not in COMBINES:
            raise RuleError(f"{op}: option combine={self.combine!r}; expected one of {sorted(COMBINES)}")
        self.linear = bool(options.get("linear", False)) and self.combine == "add"

    def infer(self, call: OpCall) -> Decision:
        """Input requirements and output spec (see the class docstring)."""
        raw = call.arg(self.dim.position, self.dim.name, self.dim.default)
        decision = super().infer(OpCall(call.op, call.tensors, (("__tensor__", 0), raw), {}, call.mesh_shape))
        if not self.linear:
            need = tuple(Replicate() if isinstance(p, Partial) else p for p in decision.inputs[0])
            decision.inputs = [need]
            decision.outputs = (need, decision.outputs[1])
        return decision

    def expand_scan(self, func: Any, args: Any, kwargs: Any, plan: Any) -> Any:
        """Local scan combined with the fold of the earlier shards' last values."""
        from hyper_parallel.platform import platform_for
        out = func(*args, **kwargs)
        dim = plan.decision.extra["dim"]
        (d,) = plan.decision.extra["mesh_dims"]
        group = plan.mesh.get_group(d)
        n, index = plan.mesh.shape[d], plan.mesh.get_coordinate()[d]
        identity = COMBINES[self.combine]
        if out.shape[dim] == 0:
            # an empty shard: the identity, still connected to the graph (every rank must run the adjoint)
            last = out.sum(dim, keepdim=True) * 0.0 + identity
        else:
            last = out.narrow(dim, out.shape[dim] - 1, 1)
        # every rank feeds the gathered totals into its output (the later shards' masked to the identity),
        # so every rank runs the adjoint
        totals = platform_for(out).all_gather(last, group, dim, [1] * n, index, grad_partial=True)
        shape = [1] * out.dim()
        shape[dim] = n
        before = out.new_tensor([1.0 if i < index else 0.0 for i in range(n)]).reshape(shape) > 0.5
        masked = totals.where(before, totals.new_full([1] * out.dim(), identity))
        carry = masked.narrow(dim, 0, 1)
        for i in range(1, n):
            carry = getattr(carry, self.combine)(masked.narrow(dim, i, 1))
        return getattr(out, self.combine)(carry)
