# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The one canonical, immutable description of a distributed tensor (pure Python).

A ``DTensorSpec`` holds the mesh (anything with ``shape``/``ndim`` and a hash: a ``DeviceMesh`` at
run time, a ``MeshTopology`` in pure code), one placement per mesh dimension (``Shard`` dims are
normalised to be non-negative) and the global shape. Its hash is computed once. Local shapes and
offsets of every coordinate follow from it; nested sharding of one tensor dim by several mesh
dims applies in mesh-dim order (outer mesh dim first), as in PyTorch.
"""
from __future__ import annotations

import math
import weakref
from functools import lru_cache
from typing import Any, Dict, Sequence, Tuple

from hyper_parallel.core.placement import Partial, Placement, Replicate, Shard, shard_range

__all__ = ["DTensorSpec", "normalize_placements"]


def normalize_placements(placements: Sequence[Placement], mesh_ndim: int, tensor_ndim: int,
                         what: str = "placements") -> Tuple[Placement, ...]:
    """Validate ``placements`` for a mesh and tensor rank; return them with non-negative shard dims."""
    if isinstance(placements, Placement):
        placements = (placements,)
    placements = tuple(placements)
    if len(placements) != mesh_ndim:
        raise ValueError(f"{what}: expected {mesh_ndim} placement(s), one per mesh dim, got "
                         f"{len(placements)}: {placements}")
    out = []
    for p in placements:
        if not isinstance(p, Placement):
            raise TypeError(f"{what}: expected Shard/Replicate/Partial, got {p!r}")
        if isinstance(p, Shard):
            if not -tensor_ndim <= p.dim < tensor_ndim:
                raise ValueError(f"{what}: {p} is out of range for a {tensor_ndim}-D tensor")
            if p.dim < 0:
                p = Shard(p.dim % tensor_ndim)
        out.append(p)
    return tuple(out)


class DTensorSpec:
    """Mesh + placements + global shape, immutable and interned.

    ``grad_partial`` (mesh dims, usually empty) is a promise made by ``redistribute(...,
    grad_partial=True)``: on those Replicate dims this tensor's consumers deliver *partial*
    gradients, so the all-gather that produced it reduce-scatters them in backward (one
    reduce-scatter instead of an all-reduce per consumer). The dispatcher keeps the promise true:
    consumers that would deliver a full gradient scale it by 1/n.

    Constructing a spec with the same (mesh, placements, shape) as a live one returns that same
    object, so equality is identity and hashing is the C-level identity hash: cache keys built
    from specs cost nothing to hash on the dispatch hot path.
    """

    __slots__ = ("mesh", "placements", "shape", "grad_partial", "_local_cache", "__weakref__")
    mesh: Any
    placements: Tuple[Placement, ...]
    shape: Tuple[int, ...]
    grad_partial: frozenset
    _local_cache: Dict[tuple, tuple]
    _intern: "weakref.WeakValueDictionary" = weakref.WeakValueDictionary()

    def __new__(cls, mesh: Any, placements: Sequence[Placement], shape: Sequence[int],
                *, validated: bool = False, grad_partial: frozenset = frozenset()) -> "DTensorSpec":
        shape = tuple(int(s) for s in shape)
        if not validated:
            placements = normalize_placements(placements, mesh.ndim, len(shape))
        placements = tuple(placements)
        grad_partial = frozenset(grad_partial)
        key = (mesh, placements, shape, grad_partial)
        obj = cls._intern.get(key)
        if obj is None:
            obj = super().__new__(cls)
            object.__setattr__(obj, "mesh", mesh)
            object.__setattr__(obj, "placements", placements)
            object.__setattr__(obj, "shape", shape)
            object.__setattr__(obj, "grad_partial", grad_partial)
            object.__setattr__(obj, "_local_cache", {})
            cls._intern[key] = obj
        return obj

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("DTensorSpec is immutable")

    def __reduce__(self):
        return (_rebuild_spec, (self.mesh, self.placements, self.shape, self.grad_partial))

    def __repr__(self) -> str:
        pl = ", ".join(p.short() for p in self.placements)
        gp = f", grad_partial={sorted(self.grad_partial)}" if self.grad_partial else ""
        return f"DTensorSpec(shape={list(self.shape)}, placements=[{pl}], mesh={tuple(self.mesh.shape)}{gp})"

    def without_grad_partial(self) -> "DTensorSpec":
        """The same layout with no partial-gradient promise."""
        if not self.grad_partial:
            return self
        return DTensorSpec(self.mesh, self.placements, self.shape, validated=True)

    # ------------------------------------------------------------------ derived views
    @property
    def ndim(self) -> int:
        """Rank of the tensor."""
        return len(self.shape)

    @property
    def numel(self) -> int:
        """Number of elements of the global tensor."""
        return math.prod(self.shape)

    def with_placements(self, placements: Sequence[Placement]) -> "DTensorSpec":
        """Same mesh and shape, other placements."""
        return DTensorSpec(self.mesh, placements, self.shape)

    def with_shape(self, shape: Sequence[int]) -> "DTensorSpec":
        """Same mesh and placements, another global shape (validated)."""
        return DTensorSpec(self.mesh, self.placements, shape)

    def shard_order(self, tensor_dim: int) -> Tuple[int, ...]:
        """Mesh dims that shard ``tensor_dim``, outermost first."""
        return tuple(d for d, p in enumerate(self.placements) if isinstance(p, Shard) and p.dim == tensor_dim)

    def is_replicated(self) -> bool:
        """True when every placement is ``Replicate``."""
        return all(isinstance(p, Replicate) for p in self.placements)

    def has_partial(self) -> bool:
        """True when some placement is ``Partial``."""
        return any(isinstance(p, Partial) for p in self.placements)

    def local_shape_and_offset(self, coord: Sequence[int]) -> Tuple[Tuple[int, ...], Tuple[int, ...]]:
        """Local shape and global offset of the shard held at mesh coordinate ``coord``."""
        coord = tuple(coord)
        hit = self._local_cache.get(coord)
        if hit is None:
            hit = _local_shape_and_offset(self.shape, self.placements, tuple(self.mesh.shape), coord)
            self._local_cache[coord] = hit
        return hit

    def local_shape(self, coord: Sequence[int]) -> Tuple[int, ...]:
        """Local shape at mesh coordinate ``coord``."""
        return self.local_shape_and_offset(coord)[0]

    def max_local_numel(self) -> int:
        """Element count of the largest local shard (the padded size used by collectives)."""
        shape = list(self.shape)
        for d, p in enumerate(self.placements):
            if isinstance(p, Shard):
                n = self.mesh.shape[d]
                shape[p.dim] = -(-shape[p.dim] // n) if shape[p.dim] else 0
        out = 1
        for s in shape:
            out *= s
        return out

    def tensor_map(self) -> Tuple[Any, ...]:
        """HyperParallel/MindSpore-style tensor map: per tensor dim, the mesh dim(s) sharding it.

        Mesh dims are counted from the right (MindSpore convention); ``-1`` means not sharded.
        A tensor dim sharded by several mesh dims maps to a tuple, outermost first.
        """
        nd = self.mesh.ndim
        out = []
        for t in range(self.ndim):
            order = self.shard_order(t)
            if not order:
                out.append(-1)
            elif len(order) == 1:
                out.append(nd - 1 - order[0])
            else:
                out.append(tuple(nd - 1 - d for d in order))
        return tuple(out)


def _rebuild_spec(mesh, placements, shape, grad_partial):
    return DTensorSpec(mesh, placements, shape, validated=True, grad_partial=grad_partial)


@lru_cache(maxsize=4096)
def _local_shape_and_offset(shape: Tuple[int, ...], placements: Tuple[Placement, ...],
                            mesh_shape: Tuple[int, ...], coord: Tuple[int, ...]):
    local = list(shape)
    offset = [0] * len(shape)
    for d, p in enumerate(placements):
        if isinstance(p, Shard):
            start, length = shard_range(local[p.dim], mesh_shape[d], coord[d])
            offset[p.dim] += start
            local[p.dim] = length
    return tuple(local), tuple(offset)
