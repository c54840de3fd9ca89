# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Matmul family (mm, bmm, matmul, linear, addmm, baddbmm, einsum) as index-letter contractions.

Each op is described by one letter string per operand and one for the output (``mm``:
``mk, kn -> mn``). Per mesh dimension the rule picks one strategy:

* a *free* letter (in the output) sharded: every operand that has it (at full size) is sharded on
  it, the others are replicated; the output is sharded on it;
* a *contracted* letter (not in the output) sharded: every operand that has it is sharded on it;
  the output is ``Partial(sum)``;
* one ``Partial`` operand times replicated ones: the output stays ``Partial`` (bilinear);
* everything replicated.

Candidates come from the inputs' current shards; the cheapest (bytes to redistribute) wins, ties
going to the largest operand (usually the weight). A bias/``input`` term (linear, addmm, baddbmm)
is laid out like the output; when the output is ``Partial`` the bias must be added once, not once
per rank: the ``add_bias_once`` expand adds it on mesh coordinate 0 only (the "bias scaling" case).
"""
from __future__ import annotations

import string
from typing import Dict, List, Optional, Sequence, Tuple

from hyper_parallel.core.placement import Partial, Placement, Replicate, Shard
from hyper_parallel.core.ops.rule import Decision, OpCall, OpRule, TensorArg, broadcast_shapes

_PSUM = Partial("sum")


class _Problem:
    """Letters of each operand and of the output, plus sizes per letter."""

    def __init__(self, operands: List[str], out: str, shapes: List[Tuple[int, ...]], private: str = "") -> None:
        self.operands = operands
        self.out = out
        self.shapes = shapes
        self.private = set(private)  # broadcast (size-1) batch dims: never shardable

    def size_of(self, i: int, letter: str) -> int:
        """Size of ``letter`` in operand ``i`` (0 when absent)."""
        pos = self.operands[i].find(letter)
        return self.shapes[i][pos] if pos >= 0 else 0


def _itemsize_bytes(t: TensorArg) -> int:
    n = 1
    for s in t.shape:
        n *= s
    return n


class EinsumRule(OpRule):
    """Base: subclasses build the letter problem with :meth:`letters`; ``bias`` is an optional
    operand index laid out like the output and added once when the output is Partial."""

    bias_slot: Optional[int] = None

    def letters(self, call: OpCall) -> _Problem:
        """Operand and output letters for this call (subclasses)."""
        raise call.fail(f"{type(self).__name__} does not define letters()")

    def out_shape(self, call: OpCall, prob: _Problem) -> Tuple[int, ...]:  # pylint: disable=unused-argument
        """Global output shape from the letters."""
        sizes: Dict[str, int] = {}
        for lets, shape in zip(prob.operands, prob.shapes):
            for c, s in zip(lets, shape):
                if sizes.get(c, 1) == 1:
                    sizes[c] = s
        return tuple(sizes.get(c, 1) for c in prob.out)

    def infer(self, call: OpCall) -> Decision:
        prob = self.letters(call)
        n_ops = len(prob.operands)
        operands = call.tensors[:n_ops]
        out_shape = self.out_shape(call, prob)
        need = [[Replicate()] * call.mesh_ndim for _ in call.tensors]
        out: List[Placement] = []
        for d in range(call.mesh_ndim):
            choice = self._choose(call, prob, operands, d)
            out.append(self._apply(choice, prob, operands, d, need))
        partial_out = any(isinstance(p, Partial) for p in out)
        bias = self._bias_slot(call)
        if bias is not None:
            self._layout_bias(call, bias, out, out_shape, need)
        expand = "add_bias_once" if (bias is not None and partial_out) else None
        return Decision(inputs=[tuple(n) for n in need], outputs=(tuple(out), out_shape), expand=expand,
                        extra={"bias": bias, "partial_dims": [d for d, p in enumerate(out) if isinstance(p, Partial)]})

    # ------------------------------------------------------------------ strategy per mesh dim
    def _candidates(self, prob: _Problem, operands: Sequence[TensorArg], d: int):
        cands = [("replicate", None)]
        for i, t in enumerate(operands):
            p = t.placements[d] if t.is_dtensor else Replicate()
            if isinstance(p, Shard):
                letter = prob.operands[i][p.dim]
                if self._letter_ok(prob, letter):
                    cands.append(("shard", letter))
            elif isinstance(p, Partial) and p.reduce_op == "sum":
                cands.append(("partial", i))
        return cands

    def _letter_ok(self, prob: _Problem, letter: str) -> bool:
        """A letter is shardable when every operand that has it has the same (non-broadcast) size."""
        if letter in prob.private:
            return False
        sizes = {prob.size_of(i, letter) for i in range(len(prob.operands)) if letter in prob.operands[i]}
        return len(sizes) == 1 and next(iter(sizes)) > 0

    def _choose(self, call: OpCall, prob: _Problem, operands: Sequence[TensorArg], d: int):
        best, best_key = None, None
        for cand in self._candidates(prob, operands, d):
            cost = 0
            for i, t in enumerate(operands):
                cur = t.placements[d] if t.is_dtensor else Replicate()
                cost += _move_cost(cur, self._operand_need(cand, prob, i), _itemsize_bytes(t), call.mesh_shape[d])
            key = (cost, 0 if cand[0] != "replicate" else 1)
            if best_key is None or key < best_key:
                best, best_key = cand, key
        return best

    def _operand_need(self, cand, prob: _Problem, i: int) -> Placement:
        kind, arg = cand
        if kind == "shard":
            pos = prob.operands[i].find(arg)
            return Shard(pos) if pos >= 0 else Replicate()
        if kind == "partial":
            return _PSUM if i == arg else Replicate()
        return Replicate()

    def _apply(self, cand, prob: _Problem, operands, d: int, need) -> Placement:
        for i in range(len(operands)):
            need[i][d] = self._operand_need(cand, prob, i)
        kind, arg = cand
        if kind == "shard":
            pos = prob.out.find(arg)
            return Shard(pos) if pos >= 0 else _PSUM
        if kind == "partial":
            return _PSUM
        return Replicate()

    # ------------------------------------------------------------------ bias
    def _bias_slot(self, call: OpCall) -> Optional[int]:
        if self.bias_slot is None or len(call.tensors) <= self.bias_slot:
            return None
        return self.bias_slot

    def _layout_bias(self, call: OpCall, slot: int, out: List[Placement], out_shape, need) -> None:
        bias = call.tensors[slot]
        offset = len(out_shape) - bias.ndim
        for d, p in enumerate(out):
            if isinstance(p, Shard):
                k = p.dim - offset
                full = 0 <= k < bias.ndim and bias.shape[k] == out_shape[p.dim]
                need[slot][d] = Shard(k) if full else Replicate()
            else:
                need[slot][d] = Replicate()

    def bias_once(self, func, args, kwargs, plan, ops):  # pylint: disable=too-many-arguments
        """The ``add_bias_once`` expand of every backend: the output is Partial, so run the op without its
        bias term and add the bias on mesh coordinate 0 only (``ops``: the framework namespace that
        :meth:`run_without_bias` computes with, ``torch`` or ``mindspore.mint``)."""
        coord = plan.mesh.get_coordinate()
        keep = all(coord[d] == 0 for d in plan.decision.extra["partial_dims"])
        return self.run_without_bias(func, args, kwargs, plan.call, plan.decision.extra["bias"], keep, ops)

    def run_without_bias(self, func, args, kwargs, call, slot, keep, torch):  # pylint: disable=too-many-arguments
        """Subclasses: compute the op without its bias, adding the bias only when ``keep``."""
        raise call.fail("this op has no bias term")


def _once(term, keep: bool):
    """``term`` on the coordinate that keeps it, ``0 * term`` elsewhere: every rank still uses the
    term, so a gradient all-reduce attached to it runs on all ranks (never only on some)."""
    return term if keep else term * 0


def _move_cost(cur: Placement, need: Placement, numel: int, n: int) -> int:
    """Rough bytes-per-rank of moving ``cur`` to ``need`` (only used to rank candidates)."""
    if cur == need or (isinstance(cur, Replicate) and not isinstance(need, Partial)):
        return 0
    if isinstance(cur, Replicate):
        return 0  # R -> P is local
    if isinstance(cur, Shard):
        return numel if isinstance(need, Replicate) else numel // n
    return 2 * numel if isinstance(need, Replicate) else numel  # Partial


# ---------------------------------------------------------------------- concrete ops
class MmRule(EinsumRule):
    """``mm(a, b)``: ``mk, kn -> mn``."""

    def letters(self, call: OpCall) -> _Problem:
        a, b = call.tensors[0], call.tensors[1]
        if a.ndim != 2 or b.ndim != 2:
            raise call.fail(f"expected 2-D operands, got {a.ndim}-D and {b.ndim}-D")
        return _Problem(["mk", "kn"], "mn", [a.shape, b.shape])


class BmmRule(EinsumRule):
    """``bmm(a, b)``: ``bmk, bkn -> bmn``."""

    def letters(self, call: OpCall) -> _Problem:
        a, b = call.tensors[0], call.tensors[1]
        if a.ndim != 3 or b.ndim != 3:
            raise call.fail(f"expected 3-D operands, got {a.ndim}-D and {b.ndim}-D")
        return _Problem(["bmk", "bkn"], "bmn", [a.shape, b.shape])


_BATCH = string.ascii_uppercase


_PRIVATE = "pqrstuvwxyz"


def _batch_letters(shapes: Sequence[Sequence[int]], batch_out: Sequence[int]) -> List[str]:
    """Letters for the batch dims of each operand: the output's letter at full size, a private
    letter (never in the output, never shardable) where the operand broadcasts (size 1)."""
    res = []
    spare = iter(_PRIVATE)
    for shape in shapes:
        lets = []
        offset = len(batch_out) - len(shape)
        for j, s in enumerate(shape):
            if s == batch_out[offset + j] or batch_out[offset + j] == 1:
                lets.append(_BATCH[offset + j])
            else:
                lets.append(next(spare))
        res.append("".join(lets))
    return res


class MatmulRule(EinsumRule):
    """``matmul(a, b)`` with NumPy-style batch broadcasting and the 1-D special cases."""

    def letters(self, call: OpCall) -> _Problem:
        a, b = call.tensors[0], call.tensors[1]
        if a.ndim == 0 or b.ndim == 0:
            raise call.fail("matmul of a 0-d tensor")
        am = a.shape if a.ndim >= 2 else (1,) + tuple(a.shape)
        bm = b.shape if b.ndim >= 2 else tuple(b.shape) + (1,)
        batch_out = broadcast_shapes(am[:-2], bm[:-2])
        letters = _batch_letters([am[:-2], bm[:-2]], batch_out)
        ba, bb = letters[0], letters[1]
        la = ba + ("mk" if a.ndim >= 2 else "k")
        lb = bb + ("kn" if b.ndim >= 2 else "k")
        out = _BATCH[:len(batch_out)] + ("m" if a.ndim >= 2 else "") + ("n" if b.ndim >= 2 else "")
        return _Problem([la, lb], out, [a.shape, b.shape], private=_PRIVATE)


class LinearRule(EinsumRule):
    """``linear(x, w, b)``: ``...k, nk -> ...n`` (+ bias ``n``)."""

    bias_slot = 2

    def letters(self, call: OpCall) -> _Problem:
        x, w = call.tensors[0], call.tensors[1]
        if w.ndim != 2:
            raise call.fail(f"weight must be 2-D, got {w.ndim}-D")
        batch = _BATCH[:x.ndim - 1]
        return _Problem([batch + "k", "nk"], batch + "n", [x.shape, w.shape])

    def run_without_bias(self, func, args, kwargs, call, slot, keep, torch):  # pylint: disable=too-many-arguments
        x, w = args[0], args[1]
        bias = args[2] if len(args) > 2 else kwargs.get("bias")
        out = torch.nn.functional.linear(x, w)
        return out + _once(bias, keep)


class AddmmRule(EinsumRule):
    """``addmm(input, a, b, beta=1, alpha=1)``: ``beta * input + alpha * (a @ b)``."""

    bias_slot = 2  # the "input" term: operands are a (slot 0 of the problem) and b

    def letters(self, call: OpCall) -> _Problem:
        a, b = call.tensors[0], call.tensors[1]  # called on the reordered call: (a, b, input)
        return _Problem(["mk", "kn"], "mn", [a.shape, b.shape])

    def infer(self, call: OpCall) -> Decision:
        # reorder so operands come first, then map requirements back to the call's order
        inner = OpCall(call.op, [call.tensors[1], call.tensors[2], call.tensors[0]], call.args, call.kwargs,
                       call.mesh_shape)
        dec = super().infer(inner)
        dec.inputs = [dec.inputs[2], dec.inputs[0], dec.inputs[1]]
        return dec

    def run_without_bias(self, func, args, kwargs, call, slot, keep, torch):  # pylint: disable=too-many-arguments
        inp, a, b = args[0], args[1], args[2]
        beta = call.arg(3, "beta", 1)
        alpha = call.arg(4, "alpha", 1)
        prod = torch.mm(a, b)
        if alpha != 1:
            prod = prod * alpha
        return prod + _once(beta * inp, keep)


class BaddbmmRule(AddmmRule):
    """``baddbmm(input, b1, b2, beta=1, alpha=1)``."""

    def letters(self, call: OpCall) -> _Problem:
        a, b = call.tensors[0], call.tensors[1]  # called on the reordered call: (b1, b2, input)
        return _Problem(["bmk", "bkn"], "bmn", [a.shape, b.shape])

    def run_without_bias(self, func, args, kwargs, call, slot, keep, torch):  # pylint: disable=too-many-arguments
        inp, a, b = args[0], args[1], args[2]
        beta = call.arg(3, "beta", 1)
        alpha = call.arg(4, "alpha", 1)
        prod = torch.bmm(a, b)
        if alpha != 1:
            prod = prod * alpha
        return prod + _once(beta * inp, keep)


class EinsumEquationRule(EinsumRule):
    """``einsum(equation, *operands)`` for explicit equations without ellipsis."""

    def letters(self, call: OpCall) -> _Problem:
        eq = call.args[0]
        if not isinstance(eq, str):
            raise call.fail("expected the equation string first")
        eq = eq.replace(" ", "")
        if "..." in eq:
            raise call.fail(f"equation {eq!r}: ellipsis is not supported on DTensors; write the letters out")
        lhs, _, rhs = eq.partition("->")
        ins = lhs.split(",")
        if not _:
            rhs = "".join(sorted(c for c in set(lhs.replace(",", "")) if lhs.count(c) == 1))
        if len(ins) != len(call.tensors):
            raise call.fail(f"equation {eq!r} names {len(ins)} operands, got {len(call.tensors)} tensors")
        return _Problem(ins, rhs, [t.shape for t in call.tensors])
