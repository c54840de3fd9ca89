# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""DTensor factories (torch): ``zeros``, ``ones``, ``empty``, ``full``, ``rand``, ``randn``.

The signatures are ``torch.distributed.tensor``'s (``*size, requires_grad=, dtype=, layout=,
device_mesh=, placements=``; ``full(size, fill_value, ...)``), so code written for torch runs by
changing the import. Each rank allocates only its local shard (``DTensorSpec.local_shape_and_offset``:
uneven shards follow ``torch.chunk``, a rank past the end holds an empty shard). ``rand`` / ``randn``
draw from ``hyper_parallel``'s placement-invariant counter-based RNG (``hyper_parallel.manual_seed``):
the full tensor is the same for a given seed on any mesh and placements.
"""
from __future__ import annotations

from typing import Any, Optional

import torch

from hyper_parallel.core.factories import factory_placements, parse_size
from hyper_parallel.core.spec import DTensorSpec
from hyper_parallel.platform.torch.dtensor import as_dtensor
from hyper_parallel.platform.torch.random import shard_values

__all__ = ["zeros", "ones", "empty", "full", "rand", "randn"]


def _spec(name: str, size, device_mesh, placements, layout, allow_partial: bool = True) -> DTensorSpec:
    if layout is not torch.strided:
        raise ValueError(f"{name}(layout={layout}): only torch.strided is supported (as torch.distributed.tensor)")
    shape = parse_size(size, name)
    return DTensorSpec(device_mesh, factory_placements(placements, device_mesh, len(shape), name,
                                                       allow_partial=allow_partial), shape)


def _fill(name: str, size, fill, device_mesh, placements, dtype, layout, requires_grad: bool):
    spec = _spec(name, size, device_mesh, placements, layout)
    local_shape, _ = spec.local_shape_and_offset(device_mesh.get_coordinate())
    dtype = dtype or torch.get_default_dtype()
    if fill is None:
        local = torch.empty(local_shape, dtype=dtype, device=device_mesh.device_type)
    else:
        local = torch.full(local_shape, fill, dtype=dtype, device=device_mesh.device_type)
    local.requires_grad_(requires_grad)
    return as_dtensor(local, spec)


def _random(name: str, kind: str, size, device_mesh, placements, dtype, layout, requires_grad: bool):
    spec = _spec(name, size, device_mesh, placements, layout, allow_partial=False)
    dtype = dtype or torch.get_default_dtype()
    local = shard_values(kind, spec, device_mesh.get_coordinate(), dtype, device_mesh.device_type, (0.0, 1.0))
    local.requires_grad_(requires_grad)
    return as_dtensor(local, spec)


def zeros(*size, requires_grad: bool = False, dtype: Optional[torch.dtype] = None, layout=torch.strided,
          device_mesh=None, placements=None):
    """A DTensor of zeros with global shape ``size`` on ``device_mesh`` with ``placements`` (default
    Replicate on every mesh dim); only the local shard is allocated."""
    return _fill("zeros", size, 0, device_mesh, placements, dtype, layout, requires_grad)


def ones(*size, requires_grad: bool = False, dtype: Optional[torch.dtype] = None, layout=torch.strided,
         device_mesh=None, placements=None):
    """A DTensor of ones (see :func:`zeros`; with ``Partial`` placements every rank holds ones, as torch)."""
    return _fill("ones", size, 1, device_mesh, placements, dtype, layout, requires_grad)


def empty(*size, requires_grad: bool = False, dtype: Optional[torch.dtype] = None, layout=torch.strided,
          device_mesh=None, placements=None):
    """An uninitialised DTensor (see :func:`zeros`)."""
    return _fill("empty", size, None, device_mesh, placements, dtype, layout, requires_grad)


def full(size, fill_value: Any, *, dtype: Optional[torch.dtype] = None, layout=torch.strided,
         requires_grad: bool = False, device_mesh=None, placements=None):
    """A DTensor filled with ``fill_value`` with global shape ``size`` (a sequence, as ``torch.full``)."""
    return _fill("full", (size,), fill_value, device_mesh, placements, dtype, layout, requires_grad)


def rand(*size, requires_grad: bool = False, dtype: Optional[torch.dtype] = None, layout=torch.strided,
         device_mesh=None, placements=None):
    """A DTensor of uniform ``[0, 1)`` values, only the local shard drawn; the full tensor is the same for
    a given ``hyper_parallel.manual_seed`` on any mesh and placements (Replicate or Shard)."""
    return _random("rand", "uniform", size, device_mesh, placements, dtype, layout, requires_grad)


def randn(*size, requires_grad: bool = False, dtype: Optional[torch.dtype] = None, layout=torch.strided,
          device_mesh=None, placements=None):
    """A DTensor of standard normal values (see :func:`rand`)."""
    return _random("randn", "normal", size, device_mesh, placements, dtype, layout, requires_grad)
