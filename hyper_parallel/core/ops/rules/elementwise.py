# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Element-wise ops with broadcasting (unary, binary, ternary, comparisons, in-place variants).

Per mesh dimension the output follows the inputs' shards (aligned right, NumPy broadcasting);
an input that does not have the sharded output dim, or has it with size 1, must be replicated on
that mesh dim. ``Partial`` inputs stay partial only where the op is linear in them:

``partial`` option:
  ``none``           P inputs are reduced first (default; e.g. relu, exp, comparisons)
  ``additive``       sums of tensors (add, sub): all-P (or R made P locally) -> P; a scalar addend forbids it
  ``multiplicative`` one P factor times replicated factors / scalars (mul) -> P
  ``numerator``      only the first tensor may be P (div) -> P
  ``preserve``       unary ops linear in their input (neg, clone, casts) -> P stays
``inplace: true``    the first tensor is the output: the others adapt to its placement.
``operands: N``      only the first N tensors are element-wise operands (others are metadata, e.g. type_as).
"""
from __future__ import annotations

from typing import List, Optional

from hyper_parallel.core.placement import Partial, Placement, Replicate, Shard
from hyper_parallel.core.ops.rule import Decision, OpCall, OpRule, TensorArg, broadcast_shapes

PARTIAL_MODES = ("none", "additive", "multiplicative", "numerator", "preserve")
_PSUM = Partial("sum")


def _has_scalar_operand(call: OpCall) -> bool:
    """True when a Python number is an operand (not a keyword coefficient like ``alpha``)."""
    return any(isinstance(a, (int, float, complex)) and not isinstance(a, bool) for a in call.args)


class ElementwiseRule(OpRule):
    """Element-wise op over all tensor arguments (see module docstring for options)."""

    @classmethod
    def allowed_options(cls):
        return ("partial", "inplace", "operands")

    def __init__(self, op: str, **options) -> None:
        super().__init__(op, **options)
        self.partial = options.get("partial", "none")
        if self.partial not in PARTIAL_MODES:
            raise ValueError(f"{op}: option partial={self.partial!r}; expected one of {PARTIAL_MODES}")
        self.inplace = bool(options.get("inplace", False))
        self.operands = options.get("operands")

    def infer(self, call: OpCall) -> Decision:
        if self.operands is not None and len(call.tensors) > self.operands:
            # extra tensor arguments are metadata only (e.g. x.type_as(other)): leave them as they are
            sub = OpCall(call.op, call.tensors[:self.operands], call.args, call.kwargs, call.mesh_shape)
            decision = self.infer(sub)
            decision.inputs = list(decision.inputs) + [None] * (len(call.tensors) - self.operands)
            return decision
        tensors = call.tensors
        if self.inplace and not tensors[0].is_dtensor:
            raise call.fail("in-place op on a plain tensor with a DTensor argument; make self a DTensor first")
        out_shape = broadcast_shapes(*[t.shape for t in tensors])
        if self.inplace and tuple(tensors[0].shape) != out_shape:
            raise call.fail(f"in-place result shape {list(out_shape)} differs from self {list(tensors[0].shape)}")
        req: List[List[Placement]] = [[Replicate()] * call.mesh_ndim for _ in tensors]
        out: List[Placement] = []
        for d in range(call.mesh_ndim):
            out.append(self._mesh_dim(call, d, out_shape, req))
        inputs = [tuple(r) for r in req]
        return Decision(inputs=inputs, outputs=(tuple(out), out_shape))

    # ------------------------------------------------------------------ one mesh dim
    def _mesh_dim(self, call: OpCall, d: int, out_shape, req) -> Placement:
        tensors = call.tensors
        if self.inplace and tensors[0].is_dtensor:
            target = tensors[0].placements[d]
        else:
            target = self._choose(call, d, out_shape)
        carrier = next((i for i, t in enumerate(tensors) if t.is_dtensor and isinstance(t.placements[d], Partial)),
                       None)
        for i, t in enumerate(tensors):
            req[i][d] = self._input_need(t, d, target, out_shape, i == carrier)
        if self.inplace and tensors[0].is_dtensor:
            if isinstance(target, Partial) and not self._partial_ok(call, d, [target]):
                raise call.fail(f"in-place update of a {target.short()} tensor is not linear; redistribute "
                                f"self to Replicate first")
            req[0][d] = tensors[0].placements[d]
        return target

    def _choose(self, call: OpCall, d: int, out_shape) -> Placement:
        shard = None
        partial_inputs = []
        for t in call.tensors:
            p = t.placements[d] if t.is_dtensor else Replicate()
            if isinstance(p, Shard) and shard is None:
                k = _out_dim(t, p.dim, out_shape)
                if k is not None:
                    shard = Shard(k)
            elif isinstance(p, Partial):
                partial_inputs.append(p)
        if shard is not None:
            return shard
        if partial_inputs and self._partial_ok(call, d, partial_inputs):
            return partial_inputs[0]
        return Replicate()

    def _partial_ok(self, call: OpCall, d: int, partials) -> bool:
        mode = self.partial
        ops = {p.reduce_op for p in partials}
        if mode == "none" or len(ops) != 1 or next(iter(ops)) not in ("sum", "avg"):
            return False
        if mode == "additive":
            return not _has_scalar_operand(call)
        if mode == "preserve":
            return len(call.tensors) == 1
        if mode == "numerator":
            first = call.tensors[0]
            return first.is_dtensor and isinstance(first.placements[d], Partial) and len(partials) == 1
        return len(partials) == 1  # multiplicative

    def _input_need(self, t: TensorArg, d: int, target: Placement, out_shape, carrier: bool) -> Placement:
        cur = t.placements[d] if t.is_dtensor else Replicate()
        if isinstance(target, Shard):
            k_in = _in_dim(t, target.dim, out_shape)
            return Shard(k_in) if k_in is not None else Replicate()
        if isinstance(target, Partial):
            if self.partial == "additive":
                return cur if isinstance(cur, Partial) else target  # R -> P locally: one coordinate keeps it
            return cur if carrier else Replicate()  # a product is linear in one partial factor only
        return Replicate()


def _out_dim(t: TensorArg, k: int, out_shape) -> Optional[int]:
    """Output dim of input dim ``k`` (None when broadcast: size 1 against a larger output)."""
    j = k + len(out_shape) - t.ndim
    if t.shape[k] != out_shape[j]:
        return None
    return j


def _in_dim(t: TensorArg, j: int, out_shape) -> Optional[int]:
    """Input dim that maps to output dim ``j`` with full size, else None."""
    k = j - (len(out_shape) - t.ndim)
    if k < 0 or t.shape[k] != out_shape[j]:
        return None
    return k
