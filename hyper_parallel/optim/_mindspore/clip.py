# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Gradient clipping by the global norm for MindSpore's functional gradients (a tuple aligned with the
parameters), over sharded parameters: the norm of the *full* gradients, whatever the layout.

Each rank adds the squared norms of its local gradient shards, each weighted by ``pieces / world``, where
``pieces`` is how many different shards the parameter's spec has (the product of the mesh sizes along its
``Shard`` placements; 1 for an unsharded parameter): every piece is held by ``world / pieces`` ranks, so one
all-reduce (sum) over the world counts every element once. The coefficient is torch's
``min(1, max_norm / (norm + 1e-6))``.
"""
from __future__ import annotations

import math
from typing import Any, Dict, Optional, Sequence, Tuple

import mindspore as ms
from mindspore import mint

from hyper_parallel.core.placement import Shard
from hyper_parallel.platform.mindspore.collectives import raw_all_reduce

__all__ = ["total_grad_norm", "clip_grad_norm"]


def _squares_of(grads):
    return mint.cat([(grads[i].astype(ms.float32) ** 2).sum().reshape(1)
                     for i in range(len(grads))])  # pylint: disable=consider-using-enumerate  # jit unrolls it


#: every gradient's squared norm (float32) as one ``mindspore.jit`` graph, compiled once per gradient shapes:
#: one launch instead of three PyNative ops per gradient
_squared_norms = ms.jit(_squares_of)


def _pieces(spec: Any) -> int:
    if spec is None:
        return 1
    n = 1
    for i, pl in enumerate(spec.placements):
        if isinstance(pl, Shard):
            n *= spec.mesh.shape[i]
    return n


def total_grad_norm(params: Sequence[Any], grads: Sequence[Any], specs: Optional[Dict[str, Any]] = None,
                    world_group: Any = None, world_size: int = 1,
                    squares: Optional[Dict[str, float]] = None) -> float:
    """The 2-norm of the full gradients (``specs``: ``{parameter name: DTensorSpec}`` of sharded parameters,
    e.g. ``parameter_specs(model)``; ``world_group``: the group of every rank, None on one process;
    ``squares``: ``{parameter name: squared norm of its local gradient}`` already computed, e.g. by
    ``CompiledFSDPStep.squared_norms()``, for every non-empty gradient)."""
    if len(params) != len(grads):
        raise ValueError(f"total_grad_norm: {len(grads)} gradients for {len(params)} parameters")
    specs = specs or {}
    kept = [(p, g) for p, g in zip(params, grads) if g is not None and g.size != 0]
    # every squared norm on the device, then one host copy (not one per gradient); summed on the host in
    # float64 in parameter order, as before
    if squares is not None:
        sqs = [squares[p.name] for p, _ in kept]
    else:
        sqs = _squared_norms(ms.mutable(tuple(g for _, g in kept))).asnumpy() if kept else []  # (not recompiled)
    local = 0.0
    for (p, _), sq in zip(kept, sqs):
        local += float(sq) * _pieces(specs.get(p.name)) / max(1, world_size)
    if world_group is None or world_size == 1:
        return math.sqrt(local * max(1, world_size))
    total = raw_all_reduce(ms.Tensor([local], ms.float32), "sum", world_group)
    return math.sqrt(float(total.asnumpy()[0]))


def clip_grad_norm(params: Sequence[Any], grads: Sequence[Any], max_norm: float,
                   specs: Optional[Dict[str, Any]] = None, world_group: Any = None,
                   world_size: int = 1, squares: Optional[Dict[str, float]] = None) -> Tuple[Tuple[Any, ...], float]:
    """``(clipped gradients, total norm before clipping)``: every gradient times
    ``min(1, max_norm / (norm + 1e-6))`` (see :func:`total_grad_norm` for the arguments)."""
    if not max_norm > 0:
        raise ValueError(f"clip_grad_norm(max_norm): expected a positive number, got {max_norm!r}")
    norm = total_grad_norm(params, grads, specs, world_group, world_size, squares)
    coef = min(1.0, float(max_norm) / (norm + 1e-6))
    if coef >= 1.0:
        return tuple(grads), norm
    return tuple(g * coef if g is not None else g for g in grads), norm
