# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The contract between the dispatcher and an op rule (pure Python, no framework).

A rule sees an :class:`OpCall`: the op name, one :class:`TensorArg` per tensor argument (its spec
when it is a DTensor, its shape when it is a plain tensor) and the non-tensor arguments with
tensors replaced by their ``TensorArg`` placeholders. It returns a :class:`Decision`:

* ``inputs``: the placements each DTensor input must have (``None`` = as is). The dispatcher
  redistributes inputs that differ (cheapest plan), or raises in strict mode.
* ``outputs``: one entry per tensor output — an :class:`OutputSpec` ``(placements, global shape)``
  (a plain ``(placements, shape)`` pair is converted to one) — or ``None`` for a non-tensor output;
  a list/tuple of entries mirrors an op that returns several values.
* ``expand``: optional name of a method of the rule that computes the local result when it differs
  from simply running the op on local shards (bias scaling, index offsets, local shapes for views).
  The method receives ``(local_args, local_kwargs, call, decision)``.

Rules are instantiated once per registry entry with the entry's ``options``.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

from hyper_parallel.core.placement import Placement

__all__ = ["TensorArg", "OpCall", "OutputSpec", "Decision", "OpRule", "RuleError", "broadcast_shapes",
           "as_output_specs"]


class RuleError(ValueError):
    """Raised by a rule for an input it cannot handle; the message names op and input."""


@dataclass(frozen=True)
class TensorArg:
    """A tensor argument as a rule sees it."""

    slot: int
    shape: Tuple[int, ...]
    placements: Optional[Tuple[Placement, ...]]  # None for a plain (non-distributed) tensor
    requires_grad: bool = False

    @property
    def is_dtensor(self) -> bool:
        """True for a DTensor input."""
        return self.placements is not None

    @property
    def ndim(self) -> int:
        """Rank of the (global) tensor."""
        return len(self.shape)


@dataclass
class OpCall:
    """One call of an op on DTensors, as seen by a rule."""

    op: str
    tensors: List[TensorArg]
    args: Tuple[Any, ...]
    kwargs: Dict[str, Any]
    mesh_shape: Tuple[int, ...]

    def arg(self, index: int, name: str, default: Any = None) -> Any:
        """Positional argument ``index`` or keyword ``name`` (default when absent)."""
        if index < len(self.args):
            return self.args[index]
        return self.kwargs.get(name, default)

    @property
    def mesh_ndim(self) -> int:
        """Number of mesh dimensions."""
        return len(self.mesh_shape)

    def fail(self, message: str) -> "RuleError":
        """A RuleError naming the op."""
        return RuleError(f"{self.op}: {message}")


class OutputSpec(NamedTuple):
    """One tensor output of an op: its placements (one per mesh dim) and its global shape.

    A tuple, so ``placements, shape = spec`` and ``spec[0]`` work as on the plain pairs rules return."""

    placements: Tuple[Placement, ...]
    shape: Tuple[int, ...]


def _is_output_pair(value: Any) -> bool:
    """True for a plain ``(placements, shape)`` pair (placements: a non-empty tuple of Placement)."""
    return (isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], tuple) and len(value[0]) > 0
            and all(isinstance(p, Placement) for p in value[0]))


def as_output_specs(outputs: Any) -> Any:
    """``outputs`` with every tensor entry as an :class:`OutputSpec` (``None`` stays ``None``;
    lists and tuples of entries keep their structure)."""
    if outputs is None or type(outputs) is OutputSpec:  # pylint: disable=unidiomatic-typecheck
        return outputs
    if _is_output_pair(outputs):
        return OutputSpec(outputs[0], tuple(outputs[1]))
    if isinstance(outputs, list):
        return [as_output_specs(o) for o in outputs]
    if isinstance(outputs, tuple):
        return tuple(as_output_specs(o) for o in outputs)
    raise RuleError(f"Decision.outputs: expected OutputSpec(placements, shape), None, or a list/tuple of those; "
                    f"got {outputs!r}")


@dataclass
class Decision:
    """What the dispatcher must do for one (op, input specs, cache values) combination.

    ``outputs`` is normalised on assignment (also after construction) by :func:`as_output_specs`."""

    inputs: List[Optional[Tuple[Placement, ...]]]
    outputs: Any  # OutputSpec | None | list/tuple of those (mirrors the op's output structure)
    expand: Optional[str] = None
    extra: Dict[str, Any] = field(default_factory=dict)


def _get_outputs(self: Decision) -> Any:
    return self._outputs  # pylint: disable=protected-access


def _set_outputs(self: Decision, value: Any) -> None:
    self._outputs = as_output_specs(value)  # pylint: disable=protected-access


Decision.outputs = property(_get_outputs, _set_outputs, doc="The typed output specs (see as_output_specs).")


class OpRule(ABC):
    """Base class of all rules. Subclasses implement :meth:`infer`.

    ``cache_args``: names of keyword/positional arguments that change the layout decision. The
    default ``None`` means every non-tensor argument is part of the cache key (always correct).
    """

    cache_args: Optional[Sequence[str]] = None

    def __init__(self, op: str, **options: Any) -> None:
        self.op = op
        unknown = set(options) - set(self.allowed_options())
        if unknown:
            raise RuleError(f"{op}: unknown option(s) {sorted(unknown)} for {type(self).__name__}; "
                            f"allowed: {sorted(self.allowed_options())}")
        self.options = options

    @classmethod
    def allowed_options(cls) -> Sequence[str]:
        """Option names this rule accepts from the registry."""
        return ()

    @abstractmethod
    def infer(self, call: OpCall) -> Decision:
        """Map input specs (and layout-relevant scalars) to input requirements and output specs."""


# ---------------------------------------------------------------------- helpers shared by rules
def broadcast_shapes(*shapes: Sequence[int]) -> Tuple[int, ...]:
    """NumPy broadcasting of shapes; clear error when incompatible."""
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(ndim):
        size = 1
        for s in shapes:
            k = len(s) - ndim + i
            if k < 0 or s[k] == 1:
                continue
            if size not in (1, s[k]):
                raise RuleError(f"shapes {list(map(list, shapes))} cannot be broadcast together")
            size = s[k]
        out.append(size)
    return tuple(out)


def normalize_dim(dim: int, ndim: int, what: str = "dim") -> int:
    """Non-negative dim; clear error when out of range (0-d tensors accept 0 and -1)."""
    rank = max(ndim, 1)
    if not -rank <= dim < rank:
        raise RuleError(f"{what}={dim} is out of range for a {ndim}-D tensor")
    return dim % rank
