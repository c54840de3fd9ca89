# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Simulated N-D meshes in one process (used by ``verify`` for 2-D meshes).

A tensor placed with ``(p_0, ..., p_k)`` on a mesh of shape ``(n_0, ..., n_k)`` is split mesh dim by mesh
dim, outermost first, exactly as :func:`hyper_parallel.core.spec._local_shape_and_offset` lays shards out
(a tensor dim sharded by two mesh dims is chunked by the outer one, then each chunk by the inner one);
``Partial(sum)`` on mesh dim ``d`` splits the values into parts that sum to the tensor along ``d``. Local
outputs are assembled back innermost mesh dim first.
"""
from __future__ import annotations

import itertools
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from hp_agent.dist_op.probe import close, collect_tensors, flatten

__all__ = ["coords", "split_nd", "simulate_nd", "assemble_nd", "matches_nd"]

Coord = Tuple[int, ...]


def coords(mesh: Sequence[int]) -> List[Coord]:
    """Every coordinate of a mesh, row-major."""
    return list(itertools.product(*[range(n) for n in mesh]))


def _split_one(local: Any, p: Any, n: int, index: int, noise: Any) -> Optional[Any]:
    from hyper_parallel.core.placement import Partial, Shard, shard_range
    if isinstance(p, Shard):
        if local.dim() == 0 or p.dim >= local.dim():
            return None
        start, length = shard_range(local.shape[p.dim], n, index)
        return local.narrow(p.dim, start, length)
    if isinstance(p, Partial):
        if p.reduce_op != "sum" or not local.is_floating_point():
            return None
        return local / n + noise[index]
    return local


def split_nd(t: Any, placements: Sequence[Any], mesh: Sequence[int], gen: Any) -> Optional[Dict[Coord, Any]]:
    """Local tensor of every coordinate (None when a placement cannot represent ``t``)."""
    import torch
    noises = []
    for p, n in zip(placements, mesh):
        noise = torch.randn((n,) + tuple(t.shape), generator=gen, dtype=t.dtype) if t.is_floating_point() else None
        noises.append(noise - noise.mean(0, keepdim=True) if noise is not None else None)
    out = {}
    for c in coords(mesh):
        local = t
        for d, (p, n) in enumerate(zip(placements, mesh)):
            noise = noises[d]
            if noise is not None and local.shape != t.shape:  # values split after a shard: noise of the shard
                noise = _narrow_like(noise, t, local, placements[:d], mesh[:d], c[:d])
            local = _split_one(local, p, n, c[d], noise)
            if local is None:
                return None
        out[c] = local.clone()
    return out


def _narrow_like(noise: Any, t: Any, local: Any, placements: Sequence[Any], mesh: Sequence[int], coord: Coord) -> Any:
    """The noise entries of the region ``local`` occupies in ``t`` (shards of the outer mesh dims)."""
    from hyper_parallel.core.placement import Shard, shard_range
    region = noise
    sizes = list(t.shape)
    offsets = [0] * t.dim()
    for p, n, i in zip(placements, mesh, coord):
        if isinstance(p, Shard):
            start, length = shard_range(sizes[p.dim], n, i)
            offsets[p.dim] += start
            sizes[p.dim] = length
    for dim, (o, s) in enumerate(zip(offsets, sizes)):
        region = region.narrow(dim + 1, o, s)
    if tuple(region.shape[1:]) != tuple(local.shape):
        raise RuntimeError(f"noise region {list(region.shape[1:])} and local shard {list(local.shape)} disagree")
    return region


def simulate_nd(fn: Callable, args: Sequence[Any], kwargs: Dict[str, Any], placements: Sequence[Sequence[Any]],
                mesh: Sequence[int], seed: int = 0,
                per_rank: Optional[Callable] = None) -> Optional[Dict[Coord, list]]:
    """Run ``fn`` (or ``per_rank(coord, args, kwargs)``) per coordinate; the flat outputs of each."""
    import torch
    from hp_agent.dist_op.probe import _get, _put  # pylint: disable=protected-access
    locs = collect_tensors(args, kwargs)
    gen = torch.Generator().manual_seed(seed)
    parts = []
    for loc, pl in zip(locs, placements):
        split = split_nd(_get(args, kwargs, loc), pl, mesh, gen)
        if split is None:
            return None
        parts.append(split)
    results = {}
    for c in coords(mesh):
        a, k = list(args), dict(kwargs)
        for loc, split in zip(locs, parts):
            _put(a, k, loc, split[c])
        with torch.no_grad():
            results[c] = flatten(fn(*a, **k) if per_rank is None else per_rank(c, a, k))
    return results


def _concat_chunks(locals_: List[Any], k: int) -> Optional[Any]:
    """Concatenate along ``k`` when the pieces have the library's chunk sizes and agree elsewhere."""
    import torch
    from hyper_parallel.core.placement import shard_range
    rest = [tuple(x.shape[:k]) + tuple(x.shape[k + 1:]) if x.dim() > k else None for x in locals_]
    if rest[0] is None or any(r != rest[0] for r in rest):
        return None
    total = sum(x.shape[k] for x in locals_)
    if [x.shape[k] for x in locals_] != [shard_range(total, len(locals_), i)[1] for i in range(len(locals_))]:
        return None
    return torch.cat(locals_, dim=k)


def _combine(locals_: List[Any], p: Any) -> Optional[Any]:
    """Undo one mesh dim: concat for Shard (with the chunk sizes checked), reduce for Partial, equal for R."""
    import torch
    from hyper_parallel.core.placement import Partial, Shard
    if not all(isinstance(x, torch.Tensor) for x in locals_):
        return None
    if isinstance(p, Shard):
        return _concat_chunks(locals_, p.dim)
    if any(x.shape != locals_[0].shape for x in locals_):
        return None
    if isinstance(p, Partial):
        stack = torch.stack(locals_)
        reduce = {"sum": lambda s: s.sum(0), "max": lambda s: s.amax(0), "min": lambda s: s.amin(0)}
        return reduce[p.reduce_op](stack) if p.reduce_op in reduce else None
    return locals_[0] if all(close(x, locals_[0]) for x in locals_[1:]) else None


def assemble_nd(per_coord: Dict[Coord, Any], placements: Sequence[Any], mesh: Sequence[int]) -> Optional[Any]:
    """The global tensor the local ones form under ``placements`` (None when they cannot form one)."""
    level: Dict[Coord, Any] = dict(per_coord)
    for d in reversed(range(len(mesh))):
        nxt: Dict[Coord, Any] = {}
        for prefix in coords(mesh[:d]):
            combined = _combine([level[prefix + (i,)] for i in range(mesh[d])], placements[d])
            if combined is None:
                return None
            nxt[prefix] = combined
        level = nxt
    return level[()]


def matches_nd(results: Dict[Coord, list], outputs: List[Optional[Tuple[tuple, tuple]]], ref: list,
               mesh: Sequence[int]) -> Optional[str]:
    """None when every declared output (placements, global shape) reproduces ``ref``, else the problem."""
    if any(len(r) != len(ref) for r in results.values()):
        return "the local op returns a different number of outputs per rank"
    if len(outputs) != len(ref):
        return f"rule declares {len(outputs)} output(s), the op returns {len(ref)}"
    for k, (entry, want) in enumerate(zip(outputs, ref)):
        if entry is None:
            continue
        placements, shape = entry
        if tuple(shape) != tuple(getattr(want, "shape", ())):
            return f"output {k}: declared global shape {list(shape)}, actual {list(want.shape)}"
        got = assemble_nd({c: r[k] for c, r in results.items()}, placements, mesh)
        if got is None or not close(got, want):
            return f"output {k}: declared {[p.short() for p in placements]} does not reproduce the single-device result"
    return None
