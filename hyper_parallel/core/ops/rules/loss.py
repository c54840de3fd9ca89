# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Losses: cross_entropy / nll_loss (class dim) and point-wise losses (mse, l1, smooth_l1, huber, bce, kl_div).

Batch-like dims (every dim but the class dim) may stay sharded; the class dim is requested Replicate
(vocabulary-parallel loss is the tensor-parallel family's job) and ``Partial`` inputs are reduced
first. The output follows the reduction:

* ``none``            the per-element loss, sharded like its batch dims;
* ``sum``             the local sum: ``Partial(sum)`` over the mesh dims that shard a batch dim;
* ``mean``/``batchmean`` the ``expand_mean`` expand: the local *sum* divided by the *global*
  denominator, again ``Partial(sum)``. The denominator is static (global element count, batch size)
  or, for cross_entropy / nll_loss with class-index targets (``ignore_index``, class ``weight``) and
  for mse/l1 with a ``weight``, the local count/weight sum all-reduced over those mesh dims. Counts
  carry no gradient; a weight sum that does (mse/l1 ``weight``) is all-reduced forward and its
  gradient all-reduced backward, since every rank's partial loss depends on it.

Legacy ``size_average``/``reduce`` arguments are honoured like ``torch.nn._reduction``.
Options: ``params`` (positional names after ``input``), ``weighted_mean`` (``weight_sum`` when a
``weight`` makes ``mean`` divide by the weight sum (mse, l1), else ``numel``), ``batchmean: true``
(kl_div: ``reduction='batchmean'`` divides the sum by the global batch size).
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from hyper_parallel.core.placement import Partial, Placement, Replicate, Shard
from hyper_parallel.core.ops.rule import Decision, OpCall, OpRule, TensorArg

__all__ = ["ClassLossRule", "PointwiseLossRule", "resolve_reduction"]

_PSUM = Partial("sum")
REDUCTIONS = ("none", "mean", "sum", "batchmean")


def resolve_reduction(call: OpCall, get) -> str:
    """The effective reduction string (legacy ``size_average``/``reduce`` win when given)."""
    size_average, reduce = get("size_average"), get("reduce")
    if size_average is not None or reduce is not None:
        size_average = True if size_average is None else size_average
        reduce = True if reduce is None else reduce
        return "none" if not reduce else ("mean" if size_average else "sum")
    reduction = get("reduction", "mean")
    if reduction not in REDUCTIONS:
        raise call.fail(f"reduction={reduction!r}; expected one of {REDUCTIONS}")
    return reduction


def _slot(value: Any) -> Optional[int]:
    if isinstance(value, (tuple, list)) and len(value) == 2 and value[0] == "__tensor__":
        return value[1]
    return None


class _LossRule(OpRule):  # pylint: disable=abstract-method
    """Shared argument access and the ``mean`` expand."""

    @classmethod
    def allowed_options(cls):
        return ("params", "weighted_mean", "batchmean")

    def __init__(self, op: str, **options) -> None:
        super().__init__(op, **options)
        self.params = ("input",) + tuple(options.get("params", ("target",)))
        self.weighted_mean = options.get("weighted_mean", "numel")
        if self.weighted_mean not in ("numel", "weight_sum"):
            raise ValueError(f"{op}: option weighted_mean={self.weighted_mean!r}; expected 'numel' or 'weight_sum'")
        self._signatures: Dict[Any, Any] = {}

    def getter(self, call: OpCall):
        """``get(name, default)`` reading positional (per ``params``) or keyword arguments."""
        def get(name: str, default: Any = None) -> Any:
            if name in self.params:
                return call.arg(self.params.index(name), name, default)
            return call.kwargs.get(name, default)
        return get

    def tensor(self, call: OpCall, name: str) -> Optional[TensorArg]:
        """The tensor passed as ``name`` (None when absent)."""
        slot = _slot(self.getter(call)(name))
        return call.tensors[slot] if slot is not None else None

    @staticmethod
    def reduced_output(reduction: str, out_pl, out_shape, denominator) -> Tuple[Any, Optional[str], Dict[str, Any]]:
        """(outputs, expand, extra) for reducing a per-element loss with placements ``out_pl``."""
        if reduction == "none":
            return (tuple(out_pl), tuple(out_shape)), None, {}
        mesh_dims = tuple(d for d, p in enumerate(out_pl) if isinstance(p, Shard))
        placements = tuple(_PSUM if isinstance(p, Shard) else Replicate() for p in out_pl)
        expand = "expand_mean" if reduction != "sum" and mesh_dims else None
        return (placements, ()), expand, {"mesh_dims": mesh_dims, "denominator": denominator}

    # ------------------------------------------------------------------ expand (local tensors)

    def local_denominator(self, arguments):
        """This rank's share of a data-dependent denominator (overridden where one exists)."""
        raise RuntimeError(f"{self.op}: this loss has no data-dependent denominator (argument names: "
                           f"{sorted(arguments)})")


class ClassLossRule(_LossRule):
    """cross_entropy / nll_loss: input (N, C, d1, ...) or (C,), target class indices (N, d1, ...) or
    class probabilities (same shape as input)."""

    def infer(self, call: OpCall) -> Decision:
        inp, tgt = self.tensor(call, "input"), self.tensor(call, "target")
        if inp is None or tgt is None:
            raise call.fail("input and target must be tensors")
        weight = self.tensor(call, "weight")
        reduction = resolve_reduction(call, self.getter(call))
        if reduction == "batchmean":
            raise call.fail("reduction='batchmean' is only valid for kl_div")
        prob = tuple(tgt.shape) == tuple(inp.shape) and inp.ndim > 0
        cdim = 1 if inp.ndim >= 2 else 0
        need_in, need_tg, out_pl = self._layouts(inp, tgt, call.mesh_ndim, cdim, prob)
        out_shape = tuple(s for i, s in enumerate(inp.shape) if i != cdim) if inp.ndim else ()
        denominator: Any = None  # class-index targets: counted at run time (ignore_index, class weights)
        if prob:
            classes = inp.shape[cdim]
            denominator = _numel(inp.shape) // classes if classes else 0
        outputs, expand, extra = self.reduced_output(reduction, out_pl, out_shape, denominator)
        inputs: List[Any] = [(Replicate(),) * call.mesh_ndim] * len(call.tensors)
        inputs[inp.slot], inputs[tgt.slot] = tuple(need_in), tuple(need_tg)
        if weight is not None:
            inputs[weight.slot] = (Replicate(),) * call.mesh_ndim
        return Decision(inputs=inputs, outputs=outputs, expand=expand, extra=extra)

    def _layouts(self, inp: TensorArg, tgt: TensorArg, mesh_ndim: int, cdim: int, prob: bool):
        """(input needs, target needs, per-element output placements), one entry per mesh dim."""
        need_in: List[Placement] = []
        need_tg: List[Placement] = []
        out_pl: List[Placement] = []
        for d in range(mesh_ndim):
            k = self._batch_dim(inp, tgt, d, cdim, prob)
            if k is None:
                need_in.append(Replicate())
                need_tg.append(Replicate())
                out_pl.append(Replicate())
            else:
                need_in.append(Shard(k))
                need_tg.append(Shard(k if prob or k < cdim else k - 1))
                out_pl.append(Shard(k if k < cdim else k - 1))
        return need_in, need_tg, out_pl

    @staticmethod
    def _batch_dim(inp: TensorArg, tgt: TensorArg, d: int, cdim: int, prob: bool) -> Optional[int]:
        """Input dim to keep sharded on mesh dim ``d`` (from the input, else from the target), or None."""
        if inp.ndim < 2:
            return None
        p = inp.placements[d] if inp.is_dtensor else Replicate()
        if isinstance(p, Shard) and p.dim != cdim:
            return p.dim
        q = tgt.placements[d] if tgt.is_dtensor else Replicate()
        if isinstance(q, Shard):
            k = q.dim if prob or q.dim < cdim else q.dim + 1
            return k if k != cdim else None
        return None


class PointwiseLossRule(_LossRule):
    """Per-element losses of broadcast ``input``/``target`` (and ``weight``/``pos_weight``) tensors."""

    def __init__(self, op: str, **options) -> None:
        super().__init__(op, **options)
        from hyper_parallel.core.ops.rules.elementwise import ElementwiseRule
        self._elementwise = ElementwiseRule(op)

    def infer(self, call: OpCall) -> Decision:
        if self.tensor(call, "input") is None or self.tensor(call, "target") is None:
            raise call.fail("input and target must be tensors")
        reduction = resolve_reduction(call, self.getter(call))
        if reduction == "batchmean" and not self.options.get("batchmean"):
            raise call.fail("reduction='batchmean' is only valid for kl_div")
        base = self._elementwise.infer(call)
        out_pl, out_shape = base.outputs
        weight = self.tensor(call, "weight")
        denominator: Any = _numel(out_shape)
        if reduction == "batchmean":
            inp = self.tensor(call, "input")
            denominator = inp.shape[0] if inp.ndim else 1
        elif weight is not None and self.weighted_mean == "weight_sum":
            denominator = None
        outputs, expand, extra = self.reduced_output(reduction, out_pl, out_shape, denominator)
        return Decision(inputs=base.inputs, outputs=outputs, expand=expand, extra=extra)

    def local_denominator(self, arguments):
        """This rank's share of the weight sum (mse/l1 with ``weight``)."""
        return arguments["weight"].sum()


def _numel(shape: Tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n
