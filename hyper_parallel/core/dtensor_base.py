# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""What the backends' DTensor classes share (pure): the metadata API read from the canonical spec, and the
argument checks and spec computations of ``from_local``, ``redistribute`` and ``distribute_tensor``.

``platform/torch/dtensor.py`` and ``platform/mindspore/dtensor.py`` keep only what touches their
framework: the tensor type checks, the local tensor itself, the collectives and autograd.
"""
from __future__ import annotations

import math
from typing import Callable, Optional, Sequence, Tuple

from hyper_parallel.core.placement import Placement, Replicate, Shard
from hyper_parallel.core.spec import DTensorSpec, normalize_placements

__all__ = ["DTensorBase", "from_local_spec", "global_shape", "redistribute_request", "distribute_request",
           "grad_partial_size", "replicated_spec", "with_promise"]


class DTensorBase:
    """Metadata of a distributed tensor, read from ``self._spec`` (a :class:`DTensorSpec`)."""

    __slots__ = ()
    _spec: DTensorSpec

    @property
    def placements(self) -> tuple:
        """One placement per mesh dimension."""
        return self._spec.placements

    @property
    def device_mesh(self):
        """The ``DeviceMesh`` this tensor lives on."""
        return self._spec.mesh

    @property
    def spec(self) -> DTensorSpec:
        """The canonical immutable spec."""
        return self._spec

    def numel(self) -> int:
        """Number of elements of the global tensor."""
        return self._spec.numel

    nelement = numel

    def stride(self, dim: Optional[int] = None):
        """Strides of the global tensor as if it were contiguous."""
        strides, acc = [], 1
        for s in reversed(self._spec.shape):
            strides.append(acc)
            acc *= max(s, 1)
        strides = tuple(reversed(strides))
        return strides if dim is None else strides[dim]

    def __len__(self) -> int:
        if not self._spec.shape:
            raise TypeError("len() of a 0-d tensor")
        return self._spec.shape[0]

    def describe(self, local_repr: str) -> str:
        """``DTensor(shape=..., placements=[...], mesh=..., local=...)``."""
        pl = ", ".join(p.short() for p in self._spec.placements)
        return (f"DTensor(shape={list(self._spec.shape)}, placements=[{pl}], mesh={self._spec.mesh!r}, "
                f"local={local_repr})")


def _placements_for(device_mesh, placements, ndim: int, what: str) -> Tuple[Placement, ...]:
    if device_mesh is None:
        raise ValueError(f"{what}(device_mesh): a DeviceMesh is required")
    if placements is None:
        placements = (Replicate(),) * device_mesh.ndim
    return normalize_placements(placements, device_mesh.ndim, ndim, f"{what} placements")


def global_shape(local_shape: Sequence[int], mesh, placements, run_check: bool,
                 gather_total: Callable[[int, int], int]) -> Tuple[int, ...]:
    """The global shape of a shard: exact with ``run_check`` (``gather_total(mesh_dim, local size)`` sums the
    sizes over that mesh dim, for uneven shards), else assuming even shards."""
    shape = list(local_shape)
    if run_check and any(isinstance(p, Shard) for p in placements):
        for d in reversed(range(mesh.ndim)):
            p = placements[d]
            if isinstance(p, Shard):
                shape[p.dim] = gather_total(d, shape[p.dim])
        return tuple(shape)
    for d, p in enumerate(placements):
        if isinstance(p, Shard):
            shape[p.dim] *= mesh.shape[d]
    return tuple(shape)


def from_local_spec(local_shape: Sequence[int], device_mesh, placements, shape: Optional[Sequence[int]],
                    run_check: bool, gather_total: Callable[[int, int], int]) -> DTensorSpec:
    """The spec ``DTensor.from_local`` gives this rank's shard of shape ``local_shape`` (clear errors for a
    missing mesh, bad placements, or a shard that does not match the global shape)."""
    placements = _placements_for(device_mesh, placements, len(local_shape), "from_local")
    if shape is None:
        shape = global_shape(local_shape, device_mesh, placements, run_check, gather_total)
    spec = DTensorSpec(device_mesh, placements, shape, validated=True)
    expect = spec.local_shape(device_mesh.get_coordinate())
    if tuple(local_shape) != expect:
        raise ValueError(f"DTensor.from_local: local shape {tuple(local_shape)} does not match the shard "
                         f"{expect} of global shape {tuple(shape)} with placements {placements}")
    return spec


def redistribute_request(spec: DTensorSpec, placements, grad_partial: bool
                         ) -> Tuple[Optional[Tuple[Placement, ...]], frozenset]:
    """(target placements, or None when already there; the mesh dims a ``grad_partial`` promise covers:
    those gathered here, Shard -> Replicate)."""
    if placements is None:
        raise ValueError("redistribute(placements): target placements are required")
    placements = normalize_placements(placements, spec.mesh.ndim, spec.ndim, "redistribute placements")
    if placements == spec.placements:
        return None, frozenset()
    gp = frozenset(d for d, (a, b) in enumerate(zip(spec.placements, placements))
                   if isinstance(a, Shard) and isinstance(b, Replicate)) if grad_partial else frozenset()
    return placements, gp


def with_promise(dst: DTensorSpec, gp: frozenset) -> DTensorSpec:
    """``dst`` carrying the ``grad_partial`` promise on mesh dims ``gp``."""
    return DTensorSpec(dst.mesh, dst.placements, dst.shape, validated=True, grad_partial=gp) if gp else dst


def distribute_request(ndim: int, device_mesh, placements, src_data_rank: Optional[int]) -> Tuple[Placement, ...]:
    """Checked placements of ``distribute_tensor`` (and a checked ``src_data_rank``)."""
    placements = _placements_for(device_mesh, placements, ndim, "distribute_tensor")
    if src_data_rank is not None and device_mesh.size() > 1 and not 0 <= src_data_rank < device_mesh.size():
        raise ValueError(f"distribute_tensor(src_data_rank={src_data_rank}): expected a mesh rank in "
                         f"[0, {device_mesh.size()})")
    return placements


def replicated_spec(device_mesh, shape: Sequence[int]) -> DTensorSpec:
    """The spec of a full tensor replicated over ``device_mesh``."""
    return DTensorSpec(device_mesh, (Replicate(),) * device_mesh.ndim, tuple(shape), validated=True)


def grad_partial_size(spec: DTensorSpec) -> int:
    """Product of the mesh sizes of the spec's ``grad_partial`` dims (the gradient scale is its inverse)."""
    return math.prod(spec.mesh.shape[d] for d in spec.grad_partial)
