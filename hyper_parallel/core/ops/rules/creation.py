# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Creation ops on DTensors: ``*_like`` and ``Tensor.new_*``.

``LikeRule`` (``torch.zeros_like`` / ``ones_like`` / ``empty_like`` / ``full_like``): the result has the
input's global shape and follows its placements, except that ``Partial`` becomes ``Replicate`` — a constant
fill is not a partial sum (``ones_like`` of a ``P(sum)`` tensor is all ones, not ``n``). The local op runs
on the local shard unchanged: a Partial tensor's local shard already has the global shape. No
communication, no gradient (the values do not depend on the input's values).

``NewRule`` (``Tensor.new_zeros`` / ``new_ones`` / ``new_empty`` / ``new_full`` / ``new_empty_strided``):
the result is ``Replicate`` on self's mesh with the *given* size as its global shape; since a replicated
local tensor is the whole tensor, the local op receives the same size.
``NewTensorRule`` (``Tensor.new_tensor``): ``Replicate`` with the shape of the (nested) Python data.
"""
from __future__ import annotations

from typing import Any, Sequence, Tuple

from hyper_parallel.core.placement import Partial, Replicate
from hyper_parallel.core.ops.rule import Decision, OpCall, OpRule


def _size_of(call: OpCall, value: Any) -> Tuple[int, ...]:
    """A size argument (int, or list/tuple of ints) as a tuple, with a clear error otherwise."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(s, int) and not isinstance(s, bool)
                                                       for s in value):
        raise call.fail(f"size {value!r}: expected a sequence of ints")
    if any(s < 0 for s in value):
        raise call.fail(f"size {list(value)}: negative dimension")
    return tuple(value)


def _self(call: OpCall):
    t = call.tensors[0] if call.tensors else None
    if t is None or not t.is_dtensor:
        raise call.fail("self must be a DTensor")
    return t


class LikeRule(OpRule):
    """``torch.*_like``: same global shape, input placements with Partial -> Replicate."""

    def infer(self, call: OpCall) -> Decision:
        t = _self(call)
        if call.kwargs.get("out") is not None:
            raise call.fail("out= is not supported for creation ops on DTensors")
        out = tuple(Replicate() if isinstance(p, Partial) else p for p in t.placements)
        return Decision(inputs=[None] * len(call.tensors), outputs=(out, t.shape))


class NewRule(OpRule):
    """``Tensor.new_*(size, ...)``: Replicate on self's mesh with the given global size.

    Option ``extra``: number of positional arguments after ``size`` (``new_full``: 1 fill value,
    ``new_empty_strided``: 1 stride); without extras, ``x.new_zeros(2, 3)`` varargs sizes are accepted.
    """

    @classmethod
    def allowed_options(cls) -> Sequence[str]:
        return ("extra",)

    def infer(self, call: OpCall) -> Decision:
        _self(call)
        extra = int(self.options.get("extra", 0))
        if "size" in call.kwargs:
            size = _size_of(call, call.kwargs["size"])
        elif len(call.args) < 2:
            raise call.fail("missing the size argument")
        elif extra == 0 and len(call.args) > 2:
            size = _size_of(call, list(call.args[1:]))  # x.new_zeros(2, 3)
        else:
            size = _size_of(call, call.args[1])
        return Decision(inputs=[None] * len(call.tensors), outputs=((Replicate(),) * call.mesh_ndim, size))


def nested_shape(call: OpCall, data: Any) -> Tuple[int, ...]:
    """Shape of nested Python lists/tuples of numbers (a ragged nesting is an error)."""
    if isinstance(data, (list, tuple)):
        if data and isinstance(data[0], tuple) and len(data[0]) == 2 and data[0][0] == "__tensor__":
            raise call.fail("data holds tensors; pass Python numbers (use clone() or stack to copy tensors)")
        inner = [nested_shape(call, d) for d in data]
        if any(s != inner[0] for s in inner[1:]):
            raise call.fail("data is ragged: every nested sequence at one depth must have the same length")
        return (len(data),) + (inner[0] if inner else ())
    if isinstance(data, (bool, int, float, complex)):
        return ()
    raise call.fail(f"data of type {type(data).__name__}: expected Python numbers or nested lists of them")


class NewTensorRule(OpRule):
    """``Tensor.new_tensor(data)``: Replicate on self's mesh, shaped like ``data``."""

    def infer(self, call: OpCall) -> Decision:
        _self(call)
        data = call.arg(1, "data")
        if isinstance(data, tuple) and len(data) == 2 and data[0] == "__tensor__":
            raise call.fail("data is a tensor; use clone()/detach() of a DTensor, or distribute_tensor for a "
                            "plain tensor")
        shape = nested_shape(call, data)
        return Decision(inputs=[None] * len(call.tensors), outputs=((Replicate(),) * call.mesh_ndim, shape))
