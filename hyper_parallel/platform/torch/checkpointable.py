# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Our ``DTensor`` in torch's DCP: the ``_Checkpointable`` protocol.

torch's DCP planners ask a value for ``__create_write_items__`` / ``__create_chunk_list__`` /
``__get_tensor_shard__`` before any type test, so a ``hyper_parallel`` DTensor plugs into
``torch.distributed.checkpoint.save/load`` (any planner, any storage) without conversion: each rank
describes and hands over its own shard (its box in the global tensor follows from the spec, uneven and
empty shards included); replicas describe the same box and DCP's plan deduplication keeps one.
``Partial`` values are refused here (their global value is a pending reduction);
``hyper_parallel.checkpoint.save`` reduces them before calling DCP.

The DTensor's dunder methods import this module on first use (it imports ``torch.distributed.checkpoint``,
which takes seconds).
"""
from __future__ import annotations

from typing import Any, List, Tuple

import torch
from torch._C import DisableTorchFunctionSubclass
from torch.distributed.checkpoint.metadata import ChunkStorageMetadata, MetadataIndex, TensorProperties
from torch.distributed.checkpoint.planner import TensorWriteData, WriteItem, WriteItemType

from hyper_parallel.core.placement import Partial

__all__ = ["create_write_items", "create_chunk_list", "get_tensor_shard", "local_box"]


def _refuse_partial(t, what: str) -> None:
    spec = t._spec  # pylint: disable=protected-access
    parts = [(d, p) for d, p in enumerate(spec.placements) if isinstance(p, Partial)]
    if parts:
        d, p = parts[0]
        raise RuntimeError(
            f"{what}: the DTensor of shape {list(spec.shape)} is {p} on mesh dim {d}, so its value is a pending "
            "reduction over ranks. hyper_parallel.checkpoint.save reduces it before saving; with torch's "
            "dcp.save call t.redistribute(placements=[Replicate() ...]) first. Loading into a Partial DTensor is "
            "not supported: load into Replicate and redistribute.")


def local_box(t) -> Tuple[Tuple[int, ...], Tuple[int, ...]]:
    """(offsets, sizes) of this rank's shard in the global tensor."""
    spec = t._spec  # pylint: disable=protected-access
    coord = spec.mesh.get_coordinate()
    if coord is None:
        raise RuntimeError(f"DTensor on {spec.mesh}: this rank is not part of its mesh; leave it out of the state "
                              "dict on this rank")
    sizes, offsets = spec.local_shape_and_offset(coord)
    return offsets, sizes


def _local(t) -> torch.Tensor:
    with DisableTorchFunctionSubclass():
        return t.view_as(t)


def create_write_items(t, fqn: str) -> List[WriteItem]:
    """DCP write items of this rank's shard of ``t`` (one box)."""
    _refuse_partial(t, f"saving {fqn!r}")
    offsets, sizes = local_box(t)
    local = _local(t)
    return [WriteItem(index=MetadataIndex(fqn, torch.Size(offsets)), type=WriteItemType.SHARD,
                      tensor_data=TensorWriteData(chunk=ChunkStorageMetadata(torch.Size(offsets), torch.Size(sizes)),
                                                  properties=TensorProperties.create_from_tensor(local),
                                                  size=torch.Size(t._spec.shape)))]  # pylint: disable=protected-access


def create_chunk_list(t) -> List[ChunkStorageMetadata]:
    """DCP chunk list (the box this rank loads into)."""
    _refuse_partial(t, "loading")
    offsets, sizes = local_box(t)
    return [ChunkStorageMetadata(torch.Size(offsets), torch.Size(sizes))]


def get_tensor_shard(t, index: Any) -> torch.Tensor:  # pylint: disable=unused-argument
    """This rank's shard as a plain tensor aliasing the DTensor's storage (DCP reads from / copies into it)."""
    _refuse_partial(t, f"reading {getattr(index, 'fqn', '')!r}")
    return _local(t)
