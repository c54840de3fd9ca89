# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``torch._foreach_*`` ops (the optimizers' ``foreach=True`` path) on lists of DTensors.

Each list position is an independent element-wise op; the lists a foreach call receives hold the
same parameters' tensors (param, grad, optimizer states), so position ``i`` of every list must
have the same placements and shape. The rule checks that, refuses Partial tensors (optimizer
state is never partial), and runs ONE local foreach call over all shards — no per-tensor dispatch.

Strategy rows of the registry entry (``strategies:``, see :mod:`hyper_parallel.core.ops.strategies`)
apply per list position and mesh dim: position ``i``'s placements across the lists (``"R,P(sum)"`` for
``_foreach_mul([a], [b])`` with ``b`` partial) matching a row's inputs give the row's output there
(``_foreach_neg``: ``P(sum)->P(sum)``). An in-place row must keep the first list's placement.
"""
from __future__ import annotations

from hyper_parallel.core.placement import Partial
from hyper_parallel.core.ops.rule import Decision, OpCall, OpRule
from hyper_parallel.core.ops.strategies import placement_of, row_applies


class ForeachRule(OpRule):
    """``options: {inplace: bool}``: in-place variants return None; others return one list."""

    rows: tuple = ()

    @classmethod
    def allowed_options(cls):
        return ("inplace",)

    def use_strategies(self, rows) -> None:
        """The entry's strategy rows (any input ranks: a list position's tensors share one shape)."""
        self.rows = tuple(r for group in rows.values() for r in group)

    def infer(self, call: OpCall) -> Decision:
        lists = [a for a in call.args if isinstance(a, (list, tuple)) and a and _is_marker(a[0])]
        if not lists:
            raise call.fail("expected at least one list of tensors")
        length = len(lists[0])
        for lst in lists[1:]:
            if len(lst) != length:
                raise call.fail(f"tensor lists have different lengths ({length} and {len(lst)})")
        outputs = [self._with_rows(call, lists, i) or self._position(call, lists, i) for i in range(length)]
        plain = [t for t in call.tensors if not t.is_dtensor and t.ndim > 0]
        if plain:
            raise call.fail(f"lists mix DTensors with plain tensors of shape {list(plain[0].shape)}")
        return Decision(inputs=[None] * len(call.tensors), outputs=None if self.options.get("inplace") else outputs)

    @staticmethod
    def _position(call: OpCall, lists, i: int):
        """Check position ``i`` of every list; return its output entry."""
        ref = call.tensors[lists[0][i][1]]
        for lst in lists[1:]:
            other = call.tensors[lst[i][1]]
            same = other.shape == ref.shape and not (other.is_dtensor and ref.is_dtensor
                                                     and other.placements != ref.placements)
            if not same:
                raise call.fail(f"position {i}: tensors differ in layout ({_desc(ref)} vs {_desc(other)}); "
                                "foreach ops need matching layouts")
        if ref.is_dtensor and any(isinstance(p, Partial) for p in ref.placements):
            raise call.fail(f"position {i}: Partial tensors are not supported by foreach ops")
        return (ref.placements, ref.shape) if ref.is_dtensor else None


    def _with_rows(self, call: OpCall, lists, i: int):
        """Position ``i``'s output entry from the strategy rows (None: the rows do not cover it)."""
        tensors = [call.tensors[lst[i][1]] for lst in lists]
        if not self._rows_apply(call, lists, tensors):
            return None
        out = []
        for d in range(call.mesh_ndim):
            p = self._row_output(tensors, d)
            if p is None:
                return None
            out.append(p)
        return tuple(out), tensors[0].shape

    def _rows_apply(self, call: OpCall, lists, tensors) -> bool:
        """Rows exist, every tensor at the position is a DTensor of one shape, and no distributed tensor
        sits outside the lists (a scalar operand the rows do not cover)."""
        if not self.rows or not all(t.is_dtensor for t in tensors) or any(t.shape != tensors[0].shape
                                                                          for t in tensors):
            return False
        in_lists = {slot for lst in lists for _, slot in lst}
        return not any(t.is_dtensor and any(not p.is_replicate() for p in t.placements)
                       for k, t in enumerate(call.tensors) if k not in in_lists)

    def _row_output(self, tensors, d: int):
        """The output placement on mesh dim ``d`` (None: no row covers the position there)."""
        current = [t.placements[d].short() for t in tensors]
        if len(set(current)) == 1 and not current[0].startswith("P("):
            return tensors[0].placements[d]
        row = next((r for r in self.rows if getattr(r, "when", None) is None  # conditional rows: per-op only
                    and row_applies(r, current, [t.ndim for t in tensors])), None)
        if row is None or (self.options.get("inplace") and row[1][0] != current[0]):
            return None
        return placement_of(row[1][0])


def _is_marker(x) -> bool:
    return isinstance(x, tuple) and len(x) == 2 and x[0] == "__tensor__"


def _desc(t) -> str:
    pl = [p.short() for p in t.placements] if t.is_dtensor else "plain"
    return f"{list(t.shape)} {pl}"
