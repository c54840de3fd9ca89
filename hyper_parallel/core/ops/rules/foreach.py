# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``torch._foreach_*`` ops (the optimizers' ``foreach=True`` path) on lists of DTensors.

Each list position is an independent element-wise op; the lists a foreach call receives hold the
same parameters' tensors (param, grad, optimizer states), so position ``i`` of every list must
have the same placements and shape. The rule checks that, refuses Partial tensors (optimizer
state is never partial), and runs ONE local foreach call over all shards — no per-tensor dispatch.
"""
from __future__ import annotations

from hyper_parallel.core.placement import Partial
from hyper_parallel.core.ops.rule import Decision, OpCall, OpRule


class ForeachRule(OpRule):
    """``options: {inplace: bool}``: in-place variants return None; others return one list."""

    @classmethod
    def allowed_options(cls):
        return ("inplace",)

    def infer(self, call: OpCall) -> Decision:
        lists = [a for a in call.args if isinstance(a, (list, tuple)) and a and _is_marker(a[0])]
        if not lists:
            raise call.fail("expected at least one list of tensors")
        length = len(lists[0])
        for lst in lists[1:]:
            if len(lst) != length:
                raise call.fail(f"tensor lists have different lengths ({length} and {len(lst)})")
        outputs = [self._position(call, lists, i) for i in range(length)]
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


def _is_marker(x) -> bool:
    return isinstance(x, tuple) and len(x) == 2 and x[0] == "__tensor__"


def _desc(t) -> str:
    pl = [p.short() for p in t.placements] if t.is_dtensor else "plain"
    return f"{list(t.shape)} {pl}"
