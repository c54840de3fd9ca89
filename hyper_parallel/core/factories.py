# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Argument handling of the DTensor factories (``hyper_parallel.zeros/ones/empty/full/rand/randn``).

Pure Python: the factories follow ``torch.distributed.tensor``'s signatures (``*size`` given as ints or
as one sequence / ``torch.Size``, keyword-only ``device_mesh=`` and ``placements=``); this module turns
those arguments into a global shape and checked placements, with errors that name the bad argument.
The backend (``hyper_parallel.platform.torch.factories``) then allocates only the local shard.
"""
from __future__ import annotations

from typing import Any, Sequence, Tuple

from hyper_parallel.core.placement import Partial, Replicate
from hyper_parallel.core.spec import normalize_placements

__all__ = ["parse_size", "factory_placements"]


def parse_size(size: Sequence[Any], factory: str) -> Tuple[int, ...]:
    """The global shape from a factory's ``*size``: ``f(2, 3)``, ``f((2, 3))``, ``f([2, 3])`` and
    ``f(torch.Size([2, 3]))`` all give ``(2, 3)``; ``f()`` / ``f(())`` a 0-d shape."""
    if any(hasattr(s, "get_coordinate") for s in size):
        raise TypeError(f"{factory}(*size): got a DeviceMesh among the sizes; pass it as device_mesh=... "
                        f"(torch.distributed.tensor.{factory}'s signature: *size, device_mesh=, placements=)")
    if len(size) == 1 and isinstance(size[0], (tuple, list)):  # torch.Size is a tuple
        size = tuple(size[0])
    dims = []
    for s in size:
        if isinstance(s, bool) or not hasattr(s, "__index__"):
            raise TypeError(f"{factory}(*size): sizes must be ints, got {s!r} in {tuple(size)!r}")
        value = s.__index__()
        if value < 0:
            raise ValueError(f"{factory}(*size): negative size {value} in {tuple(size)!r}")
        dims.append(value)
    return tuple(dims)


def factory_placements(placements: Any, device_mesh: Any, ndim: int, factory: str, *,
                       allow_partial: bool = True) -> tuple:
    """``placements`` checked against the mesh and the shape's rank (default: Replicate on every mesh
    dim, as torch); random factories refuse ``Partial`` (a fresh random tensor is not a pending sum)."""
    if device_mesh is None:
        raise ValueError(f"{factory}(device_mesh=None): a DeviceMesh is required (hyper_parallel has no ambient "
                         "mesh; build one with hyper_parallel.init_device_mesh)")
    if not hasattr(device_mesh, "get_coordinate"):
        raise TypeError(f"{factory}(device_mesh=): expected a DeviceMesh, got {type(device_mesh).__name__}")
    if placements is None:
        placements = (Replicate(),) * device_mesh.ndim
    placements = normalize_placements(placements, device_mesh.ndim, ndim, f"{factory}(placements=)")
    if not allow_partial and any(isinstance(p, Partial) for p in placements):
        raise ValueError(f"{factory}(placements={list(placements)}): a fresh random tensor is Replicate or Shard, "
                         "not Partial")
    return placements
