# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Resharding by overlap: which stored chunks, and which parts of them, make up a wanted region (pure).

Any layout loads any checkpoint: a rank wants one box of each tensor (its local shard: offsets and
sizes in the global tensor), the checkpoint holds boxes (chunks) written by the saving ranks; the
rank reads the intersection of its box with every chunk that touches it. The torch path gets this
from torch's DCP planner; the MindSpore path and the offline converter use these functions.
"""
from __future__ import annotations

from typing import List, NamedTuple, Optional, Sequence, Tuple

from hyper_parallel.checkpoint.format import ChunkEntry, CheckpointError, TensorEntry, numel

__all__ = ["Region", "ReadPiece", "intersect", "plan_region_reads", "writer_rank"]

Region = Tuple[Tuple[int, int], ...]  # per dim: (start, length)


class ReadPiece(NamedTuple):
    """Copy ``src`` (a region relative to ``chunk``) into ``dst`` (a region relative to the wanted box)."""

    chunk: ChunkEntry
    src: Region
    dst: Region


def intersect(a_off: Sequence[int], a_size: Sequence[int], b_off: Sequence[int],
              b_size: Sequence[int]) -> Optional[Tuple[Tuple[int, ...], Tuple[int, ...]]]:
    """Global (offsets, sizes) of the intersection of boxes a and b, or None if it is empty."""
    offs, sizes = [], []
    for ao, asz, bo, bsz in zip(a_off, a_size, b_off, b_size):
        lo, hi = max(ao, bo), min(ao + asz, bo + bsz)
        if hi <= lo:
            return None
        offs.append(lo)
        sizes.append(hi - lo)
    return tuple(offs), tuple(sizes)


def plan_region_reads(name: str, entry: TensorEntry, offsets: Sequence[int], sizes: Sequence[int]) -> List[ReadPiece]:
    """The pieces of stored chunks that fill the box (``offsets``, ``sizes``) of tensor ``name``.

    Raises :class:`CheckpointError` when the box lies outside the tensor or the chunks leave part of it
    uncovered (a checkpoint missing some rank's file entries).
    """
    offsets, sizes = tuple(offsets), tuple(sizes)
    if len(offsets) != len(entry.shape) or any(o + s > d for o, s, d in zip(offsets, sizes, entry.shape)):
        raise CheckpointError(f"tensor {name!r}: wanted box at {list(offsets)} of size {list(sizes)} is outside its "
                              f"stored shape {list(entry.shape)}")
    if not numel(sizes):
        return []
    pieces, covered = [], 0
    for chunk in entry.chunks:
        hit = intersect(chunk.offsets, chunk.sizes, offsets, sizes)
        if hit is None:
            continue
        h_off, h_size = hit
        src = tuple((o - c, s) for o, c, s in zip(h_off, chunk.offsets, h_size))
        dst = tuple((o - w, s) for o, w, s in zip(h_off, offsets, h_size))
        pieces.append(ReadPiece(chunk, src, dst))
        covered += numel(h_size)
    if covered != numel(sizes):
        _uncovered(name, numel(sizes), covered)
    return pieces


def _uncovered(name: str, want: int, got: int) -> None:
    raise CheckpointError(f"tensor {name!r}: the checkpoint's chunks cover {got} of the {want} wanted elements "
                          "(a rank's data is missing from metadata.json)")


def writer_rank(spec, rank: int) -> int:
    """The lowest global rank holding the same box of ``spec`` as ``rank`` (replicas write a box once)."""
    topo = getattr(spec.mesh, "topology", spec.mesh)
    mine = spec.local_shape_and_offset(topo.coordinate_of(rank))
    for r in sorted(topo.ranks):
        if spec.local_shape_and_offset(topo.coordinate_of(r)) == mine:
            return r
    return rank
