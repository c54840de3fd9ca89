# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Pure N-D mesh topology: which global rank sits at which coordinate.

``MeshTopology`` knows nothing about processes or frameworks; ``DeviceMesh`` adds the process
groups on top of it. It is immutable and hashable, so it can be part of a cached spec.
"""
from __future__ import annotations

from functools import reduce
from operator import mul
from typing import Iterable, List, Optional, Sequence, Tuple, Union

__all__ = ["MeshTopology"]


def _prod(values: Iterable[int]) -> int:
    return reduce(mul, values, 1)


class MeshTopology:
    """An N-D arrangement of global ranks with optional dimension names.

    Args:
        shape: size of each mesh dimension.
        ranks: the global ranks in row-major order (default ``range(prod(shape))``).
        dim_names: one unique name per dimension, or ``None``.
    """

    __slots__ = ("shape", "ranks", "dim_names", "_hash", "_strides")
    shape: Tuple[int, ...]
    ranks: Tuple[int, ...]
    dim_names: Optional[Tuple[str, ...]]
    _hash: int
    _strides: Tuple[int, ...]

    def __init__(self, shape: Sequence[int], ranks: Optional[Sequence[int]] = None,
                 dim_names: Optional[Sequence[str]] = None) -> None:
        shape = tuple(int(s) for s in shape)
        if not shape or any(s <= 0 for s in shape):
            raise ValueError(f"mesh shape must be a non-empty tuple of positive sizes, got {shape}")
        size = _prod(shape)
        ranks = tuple(range(size)) if ranks is None else tuple(int(r) for r in ranks)
        if len(ranks) != size:
            raise ValueError(f"mesh of shape {shape} needs {size} ranks, got {len(ranks)}: {ranks}")
        if len(set(ranks)) != len(ranks):
            raise ValueError(f"mesh ranks must be unique, got {ranks}")
        if dim_names is not None:
            dim_names = tuple(dim_names)
            if len(dim_names) != len(shape):
                raise ValueError(f"mesh_dim_names {dim_names} must have one name per mesh dim ({len(shape)})")
            if len(set(dim_names)) != len(dim_names):
                raise ValueError(f"mesh_dim_names must be unique, got {dim_names}")
        strides = []
        acc = 1
        for s in reversed(shape):
            strides.append(acc)
            acc *= s
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "ranks", ranks)
        object.__setattr__(self, "dim_names", dim_names)
        object.__setattr__(self, "_strides", tuple(reversed(strides)))
        object.__setattr__(self, "_hash", hash((shape, ranks, dim_names)))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("MeshTopology is immutable")

    def __reduce__(self):
        return (MeshTopology, (self.shape, self.ranks, self.dim_names))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other or (isinstance(other, MeshTopology) and self._hash == other._hash
                                 and self.shape == other.shape and self.ranks == other.ranks
                                 and self.dim_names == other.dim_names)

    def __repr__(self) -> str:
        names = f", dim_names={self.dim_names}" if self.dim_names else ""
        return f"MeshTopology(shape={self.shape}, ranks={self.ranks}{names})"

    @property
    def ndim(self) -> int:
        """Number of mesh dimensions."""
        return len(self.shape)

    @property
    def size(self) -> int:
        """Number of ranks in the mesh."""
        return len(self.ranks)

    def dim_index(self, dim: Union[int, str]) -> int:
        """Index of a mesh dimension given by index or name; clear error otherwise."""
        if isinstance(dim, str):
            if not self.dim_names or dim not in self.dim_names:
                raise KeyError(f"mesh has no dimension named {dim!r}; names are {self.dim_names}")
            return self.dim_names.index(dim)
        if not -self.ndim <= dim < self.ndim:
            raise IndexError(f"mesh dim {dim} out of range for a {self.ndim}-D mesh")
        return dim % self.ndim

    def coordinate_of(self, rank: int) -> Optional[Tuple[int, ...]]:
        """Coordinate of a global rank, or ``None`` if the rank is not in the mesh."""
        try:
            flat = self.ranks.index(rank)
        except ValueError:
            return None
        return tuple((flat // st) % sz for st, sz in zip(self._strides, self.shape))

    def rank_at(self, coord: Sequence[int]) -> int:
        """Global rank at a coordinate."""
        return self.ranks[sum(c * st for c, st in zip(coord, self._strides))]

    def groups_along(self, dims: Union[int, Sequence[int]]) -> List[Tuple[int, ...]]:
        """All rank groups that vary along ``dims`` (other coordinates fixed), in mesh order.

        For a (2, 2) mesh of ranks 0..3, ``groups_along(1) == [(0, 1), (2, 3)]``.
        """
        dims = (dims,) if isinstance(dims, int) else tuple(dims)
        fixed = [d for d in range(self.ndim) if d not in dims]
        groups = []
        for outer in _iter_coords([self.shape[d] for d in fixed]):
            group = []
            for inner in _iter_coords([self.shape[d] for d in dims]):
                coord = [0] * self.ndim
                for d, c in zip(fixed, outer):
                    coord[d] = c
                for d, c in zip(dims, inner):
                    coord[d] = c
                group.append(self.rank_at(coord))
            groups.append(tuple(group))
        return groups

    def group_of(self, rank: int, dims: Union[int, Sequence[int]]) -> Tuple[int, ...]:
        """The group along ``dims`` that contains ``rank``."""
        for group in self.groups_along(dims):
            if rank in group:
                return group
        raise ValueError(f"rank {rank} is not in {self}")

    def sub(self, dims: Sequence[int], rank: int) -> "MeshTopology":
        """The sub-mesh over ``dims`` that contains ``rank`` (names kept)."""
        group = self.group_of(rank, dims)
        names = tuple(self.dim_names[d] for d in dims) if self.dim_names else None
        return MeshTopology([self.shape[d] for d in dims], group, names)


def _iter_coords(shape: Sequence[int]):
    if not shape:
        yield ()
        return
    total = _prod(shape)
    for flat in range(total):
        coord = []
        rem = flat
        for s in reversed(shape):
            coord.append(rem % s)
            rem //= s
        yield tuple(reversed(coord))
