# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Placements: how one mesh dimension holds a tensor (pure Python, no framework).

``Shard(dim)``   each coordinate of the mesh dimension holds one chunk of tensor dim ``dim``
                 (``torch.chunk`` semantics: chunk size ``ceil(n / k)``, trailing chunks may be
                 short or empty).
``Replicate()``  every coordinate holds the whole tensor.
``Partial(op)``  every coordinate holds a partial value; the global value is the reduction
                 (``sum``, ``avg``, ``max``, ``min``) over the mesh dimension.

Placements are immutable, hashable and compare by value. They are singletons per value
(``Shard(0) is Shard(0)``), so comparisons on the hot path are identity checks.
"""
from __future__ import annotations

from typing import Dict, Tuple

__all__ = ["Placement", "Shard", "Replicate", "Partial", "REDUCE_OPS", "shard_range", "chunk_sizes", "grad_placement"]

REDUCE_OPS = ("sum", "avg", "max", "min")


class Placement:
    """Base class of the three placement kinds."""

    __slots__ = ()

    def is_shard(self, dim: int | None = None) -> bool:  # pylint: disable=unused-argument
        """True for ``Shard`` (optionally of tensor dim ``dim``)."""
        return False

    def is_replicate(self) -> bool:
        """True for ``Replicate``."""
        return False

    def is_partial(self) -> bool:
        """True for ``Partial``."""
        return False

    def short(self) -> str:
        """Compact form used in tables (``S(0)``, ``R``, ``P(sum)``)."""
        return repr(self)


class Shard(Placement):
    """Shard tensor dimension ``dim`` across a mesh dimension."""

    __slots__ = ("dim",)
    _cache: Dict[int, "Shard"] = {}

    def __new__(cls, dim: int) -> "Shard":
        obj = cls._cache.get(dim)
        if obj is None:
            if not isinstance(dim, int) or isinstance(dim, bool):
                raise TypeError(f"Shard(dim): dim must be an int, got {dim!r}")
            obj = super().__new__(cls)
            object.__setattr__(obj, "dim", dim)
            cls._cache[dim] = obj
        return obj

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Shard is immutable")

    def __reduce__(self):
        return (Shard, (self.dim,))

    def is_shard(self, dim: int | None = None) -> bool:
        return dim is None or dim == self.dim

    def __repr__(self) -> str:
        return f"Shard(dim={self.dim})"

    def short(self) -> str:
        """Compact form used in tables: ``S(0)``."""
        return f"S({self.dim})"


class Replicate(Placement):
    """Every coordinate of the mesh dimension holds the full tensor."""

    __slots__ = ()
    _instance: "Replicate | None" = None

    def __new__(cls) -> "Replicate":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __reduce__(self):
        return (Replicate, ())

    def is_replicate(self) -> bool:
        return True

    def __repr__(self) -> str:
        return "Replicate()"

    def short(self) -> str:
        """Compact form used in tables: ``R``."""
        return "R"


class Partial(Placement):
    """Pending reduction across a mesh dimension (``sum``, ``avg``, ``max`` or ``min``)."""

    __slots__ = ("reduce_op",)
    _cache: Dict[str, "Partial"] = {}

    def __new__(cls, reduce_op: str = "sum") -> "Partial":
        obj = cls._cache.get(reduce_op)
        if obj is None:
            if reduce_op not in REDUCE_OPS:
                raise ValueError(f"Partial(reduce_op): expected one of {REDUCE_OPS}, got {reduce_op!r}")
            obj = super().__new__(cls)
            object.__setattr__(obj, "reduce_op", reduce_op)
            cls._cache[reduce_op] = obj
        return obj

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Partial is immutable")

    def __reduce__(self):
        return (Partial, (self.reduce_op,))

    def is_partial(self) -> bool:
        return True

    def __repr__(self) -> str:
        return f"Partial({self.reduce_op})"

    def short(self) -> str:
        """Compact form used in tables: ``P(sum)``."""
        return f"P({self.reduce_op})"


def chunk_sizes(size: int, parts: int) -> Tuple[int, ...]:
    """Sizes of the ``parts`` chunks of a dimension of ``size`` (``torch.chunk`` semantics).

    >>> chunk_sizes(5, 2), chunk_sizes(1, 4)
    ((3, 2), (1, 0, 0, 0))
    """
    if parts <= 0:
        raise ValueError(f"chunk_sizes: parts must be positive, got {parts}")
    step = -(-size // parts) if size else 0
    return tuple(max(0, min(step, size - i * step)) for i in range(parts))


def shard_range(size: int, parts: int, index: int) -> Tuple[int, int]:
    """``(offset, length)`` of chunk ``index`` of a dimension of ``size`` split into ``parts``."""
    step = -(-size // parts) if size else 0
    start = min(index * step, size)
    return start, max(0, min(step, size - start))


def grad_placement(p: Placement) -> Placement:
    """Placement that describes the *local gradient* of a tensor placed with ``p``.

    The gradient convention of hyper-parallel: a shard's gradient is the shard of the global
    gradient (``Shard``), a replicated tensor's and a ``Partial(sum)`` tensor's local gradient is
    the whole global gradient (``Replicate``), and a ``Partial(avg)`` tensor's local gradients are
    ``1/n`` of it, so they sum to it (``Partial(sum)``).
    """
    if isinstance(p, Partial):
        return Partial("sum") if p.reduce_op == "avg" else Replicate()
    return p
