# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Writing and reading the hyper-parallel checkpoint format from MindSpore (NumPy buffers, no torch).

MindSpore has no DCP engine, so the coordination is done here, with the file system as the rendezvous
(MindSpore on CPU lacks object collectives): every rank writes its data file and a *fragment* (its part
of ``metadata.json``) into the agreed staging folder, fsynced; the coordinator waits for all fragments,
merges them (one chunk per box, the first object per key), validates that the chunks cover every tensor,
writes ``metadata.json`` and publishes the folder atomically — the same crash-safety contract as the
torch writer. Replicated DTensor boxes are written once (by the lowest rank holding them); plain tensors
are written by every rank that holds them and de-duplicated at the merge.

Reading is per rank and needs no collective: each rank reads the chunks overlapping its boxes
(:func:`hyper_parallel.checkpoint.reshard.plan_region_reads`), checksum verified.
"""
from __future__ import annotations

import json
import os
import time
from typing import Any, Dict, List, Optional, Tuple

import mindspore as ms
import numpy as np

from hyper_parallel.checkpoint import objects as _objects
from hyper_parallel.checkpoint.format import (CheckpointError, CheckpointMetadata, ChunkEntry, ObjectEntry,
                                              TensorEntry, data_file_name, objects_file_name)
from hyper_parallel.checkpoint.manifest import read_metadata, record_headers
from hyper_parallel.checkpoint.publish import publish_dir, write_file_atomic
from hyper_parallel.checkpoint.reshard import plan_region_reads, writer_rank
from hyper_parallel.checkpoint.checksum import DEFAULT_ALGORITHM, checksum_function
from hyper_parallel.checkpoint.safetensors_io import read_range, write_safetensors
from hyper_parallel.platform.mindspore.dtensor import DTensor

__all__ = ["flatten", "write_rank", "merge_fragments", "read_into", "dtype_name", "FRAGMENT_WAIT_S"]

#: how long the coordinator waits for the other ranks' fragments
FRAGMENT_WAIT_S = float(os.environ.get("HYPER_PARALLEL_CKPT_WAIT", "300"))
_MS_TO_NAME = {"Float32": "float32", "Float16": "float16", "Float64": "float64", "BFloat16": "bfloat16",
               "Int64": "int64", "Int32": "int32", "Int16": "int16", "Int8": "int8", "UInt8": "uint8", "Bool": "bool"}
_NP = {"float32": np.float32, "float16": np.float16, "float64": np.float64, "int64": np.int64, "int32": np.int32,
       "int16": np.int16, "int8": np.int8, "uint8": np.uint8, "bool": np.bool_}


def dtype_name(dtype: Any) -> str:
    """A MindSpore dtype as a format dtype name."""
    name = _MS_TO_NAME.get(str(dtype))
    if name is None:
        raise CheckpointError(f"MindSpore dtype {dtype} cannot be checkpointed: expected one of {sorted(_MS_TO_NAME)}")
    return name


def _np_dtype(name: str):
    if name == "bfloat16":
        return ms.Tensor([0.0], ms.bfloat16).asnumpy().dtype
    if name not in _NP:
        raise CheckpointError(f"dtype {name!r} cannot be loaded into MindSpore")
    return _NP[name]


def flatten(state_dict: Dict[str, Any]) -> Tuple[Dict[str, Any], Dict[str, List[Any]]]:
    """``({dotted key: leaf}, {dotted key: path})`` of a nested state dict (dicts and lists)."""
    flat: Dict[str, Any] = {}
    paths: Dict[str, List[Any]] = {}

    def walk(obj, path):
        if isinstance(obj, dict) or (isinstance(obj, list) and any(isinstance(v, (dict, list, ms.Tensor, DTensor))
                                                                  for v in obj)):
            items = obj.items() if isinstance(obj, dict) else enumerate(obj)
            for k, v in items:
                walk(v, path + [k])
            return
        key = ".".join(str(p) for p in path)
        flat[key] = obj
        paths[key] = path

    walk(state_dict, [])
    return flat, paths


def _is_tensor(v: Any) -> bool:
    return isinstance(v, (ms.Tensor, DTensor))


def _box(value: Any) -> Tuple[Tuple[int, ...], Tuple[int, ...], Tuple[int, ...]]:
    """(global shape, offsets, sizes) of this rank's part of a tensor value."""
    if isinstance(value, DTensor):
        spec = value.spec
        sizes, offsets = spec.local_shape_and_offset(spec.mesh.get_coordinate())
        return tuple(spec.shape), tuple(offsets), tuple(sizes)
    shape = tuple(value.shape)
    return shape, (0,) * len(shape), shape


def _local_numpy(value: Any) -> np.ndarray:
    local = value.to_local() if isinstance(value, DTensor) else value
    if isinstance(local, ms.Parameter):
        local = local.value()
    return np.ascontiguousarray(local.asnumpy())


def stage(flat: Dict[str, Any], rank: int) -> Dict[str, Any]:
    """The values this rank writes, as host copies: ``{key: (global shape, offsets, dtype name, ndarray)}``
    for tensors (boxes another rank writes are left out) and ``{key: value}`` for objects."""
    out: Dict[str, Any] = {}
    for key, value in flat.items():
        if not _is_tensor(value):
            out[key] = value
            continue
        if isinstance(value, DTensor):
            if any(p.is_partial() for p in value.placements):
                raise CheckpointError(f"save {key!r}: the DTensor is {value.placements}, a pending reduction; "
                                      "redistribute it to Replicate first")
            if writer_rank(value.spec, rank) != rank:
                continue
        shape, offsets, _ = _box(value)
        out[key] = (shape, offsets, dtype_name(value.dtype), _local_numpy(value))
    return out


def write_rank(staging: str, rank: int, staged: Dict[str, Any], paths: Dict[str, List[Any]]) -> None:
    """Write this rank's data file, objects file and fragment into ``staging`` (all fsynced)."""
    tensors = {k: v for k, v in staged.items() if isinstance(v, tuple) and len(v) == 4 and isinstance(v[3], np.ndarray)}
    frag: Dict[str, Any] = {"tensors": {}, "objects": {}, "paths": {k: list(map(str, p)) for k, p in paths.items()}}
    if tensors:
        fname = data_file_name(rank)
        keys = list(tensors)
        placed = write_safetensors(os.path.join(staging, fname),
                                   [(k, tensors[k][2], tensors[k][3].shape, tensors[k][3]) for k in keys],
                                   metadata={"format": "np", "hyper_parallel": "1"})
        for k, (off, nbytes, value) in zip(keys, placed):
            shape, offsets, dtype, arr = tensors[k]
            frag["tensors"][k] = {"dtype": dtype, "shape": list(shape), "chunks": [ChunkEntry(
                offsets, tuple(arr.shape), fname, k, off, nbytes, value).to_json()]}
    blobs, pos = [], 0
    for k, v in staged.items():
        if k in tensors:
            continue
        encoding, payload = _objects.encode_object(v)
        if encoding == _objects.JSON and len(payload) <= _objects.INLINE_LIMIT:
            frag["objects"][k] = ObjectEntry(encoding, v).to_json()
        else:
            frag["objects"][k] = ObjectEntry(encoding, None, objects_file_name(rank), pos, len(payload),
                                             checksum_function(DEFAULT_ALGORITHM)(payload)).to_json()
            blobs.append(payload)
            pos += len(payload)
    if blobs:
        write_file_atomic(os.path.join(staging, objects_file_name(rank)), b"".join(blobs))
    write_file_atomic(os.path.join(staging, f"__{rank}.fragment.json"), json.dumps(frag).encode())


def _wait_fragments(staging: str, world: int) -> List[str]:
    names = [f"__{r}.fragment.json" for r in range(world)]
    deadline = time.monotonic() + FRAGMENT_WAIT_S
    while True:
        missing = [r for r, n in enumerate(names) if not os.path.exists(os.path.join(staging, n))]
        if not missing:
            return names
        if time.monotonic() > deadline:
            raise CheckpointError(f"save: ranks {missing} did not finish writing into {staging} within "
                                  f"{FRAGMENT_WAIT_S:.0f} s ($HYPER_PARALLEL_CKPT_WAIT)")
        time.sleep(0.01)


def merge_fragments(staging: str, final: str, world: int, created_by: str) -> CheckpointMetadata:
    """Coordinator: wait for every rank's fragment, merge, validate, write ``metadata.json``, publish."""
    md = CheckpointMetadata(world_size=world, created_by=created_by, checksum_algorithm=DEFAULT_ALGORITHM)
    for name in _wait_fragments(staging, world):
        with open(os.path.join(staging, name), encoding="utf-8") as f:
            frag = json.load(f)
        for key, t in frag["tensors"].items():
            entry = md.tensors.setdefault(key, TensorEntry(t["dtype"], tuple(t["shape"])))
            if entry.dtype != t["dtype"] or list(entry.shape) != t["shape"]:
                raise CheckpointError(f"save {key!r}: ranks disagree on its dtype/shape ({entry.dtype} "
                                      f"{list(entry.shape)} vs {t['dtype']} {t['shape']})")
            for c in t["chunks"]:
                chunk = ChunkEntry.from_json(c, key)
                if all(old.offsets != chunk.offsets for old in entry.chunks):
                    entry.chunks.append(chunk)
        for key, o in frag["objects"].items():
            md.objects.setdefault(key, ObjectEntry.from_json(o, key))
        for key, p in frag["paths"].items():
            md.paths.setdefault(key, p)
        os.remove(os.path.join(staging, name))
    md.validate()
    md.files = {n: os.path.getsize(os.path.join(staging, n)) for n in sorted(os.listdir(staging))}
    record_headers(staging, md)
    write_file_atomic(os.path.join(staging, "metadata.json"), md.dumps().encode())
    publish_dir(staging, final)
    return md


class _ChunkCache:
    """Chunks read during one load (each read once, checksum verified)."""

    def __init__(self, folder: str, algorithm: str) -> None:
        self.folder = folder
        self.algorithm = algorithm
        self.cache: Dict[Tuple[str, str], np.ndarray] = {}

    def get(self, name: str, entry: TensorEntry, chunk: ChunkEntry) -> np.ndarray:
        """The chunk as an array of its stored dtype and sizes."""
        key = (chunk.file, chunk.key)
        if key not in self.cache:
            raw = read_range(os.path.join(self.folder, chunk.file), chunk.data_offset, chunk.nbytes, chunk.checksum,
                             f"tensor {name!r} chunk {chunk.key!r}", self.algorithm)
            self.cache[key] = np.frombuffer(raw, dtype=_np_dtype(entry.dtype)).reshape(chunk.sizes)
        return self.cache[key]


def _region(name: str, md: CheckpointMetadata, offsets, sizes, cache: _ChunkCache) -> np.ndarray:
    entry = md.tensors[name]
    out = np.empty(sizes, dtype=_np_dtype(entry.dtype))
    for piece in plan_region_reads(name, entry, offsets, sizes):
        src = cache.get(name, entry, piece.chunk)[tuple(slice(a, a + n) for a, n in piece.src)]
        out[tuple(slice(a, a + n) for a, n in piece.dst)] = src
    return out


def _assign(target: Any, array: np.ndarray, key: str) -> None:
    local = target.to_local() if isinstance(target, DTensor) else target
    if tuple(array.shape) != tuple(local.shape):
        raise CheckpointError(f"load {key!r}: read a region of shape {list(array.shape)} for a local tensor of shape "
                              f"{list(local.shape)}")
    value = ms.Tensor(array)
    if value.dtype != local.dtype:
        value = value.astype(local.dtype)
    if isinstance(local, ms.Parameter):
        local.set_data(value)
    else:
        local.assign_value(value)


def read_into(folder: str, state_dict: Dict[str, Any], md: Optional[CheckpointMetadata] = None) -> None:
    """Load ``folder`` into the nested ``state_dict`` in place: tensors (MindSpore DTensors: this rank's box)
    are filled, objects replaced. A key missing from the checkpoint is an error naming it."""
    md = md or read_metadata(folder)
    flat, paths = flatten(state_dict)
    cache = _ChunkCache(folder, md.checksum_algorithm)
    for key, value in flat.items():
        if _is_tensor(value):
            if key not in md.tensors:
                raise CheckpointError(f"load: {key!r} is not a tensor of the checkpoint {folder}")
            shape, offsets, sizes = _box(value)
            if tuple(md.tensors[key].shape) != shape:
                raise CheckpointError(f"load {key!r}: the checkpoint holds shape {list(md.tensors[key].shape)}, the "
                                      f"target is {list(shape)}")
            _assign(value, _region(key, md, offsets, sizes, cache), key)
        else:
            if key not in md.objects:
                raise CheckpointError(f"load: {key!r} is not an object of the checkpoint {folder}")
            _set_path(state_dict, paths[key], _read_object(folder, key, md.objects[key], md.checksum_algorithm))


def _read_object(folder: str, key: str, entry: ObjectEntry, algorithm: str) -> Any:
    if entry.file is None:
        return entry.value
    raw = read_range(os.path.join(folder, entry.file), entry.offset, entry.length, entry.checksum, f"object {key!r}",
                     algorithm)
    return _objects.decode_object(entry.encoding, bytes(raw), f"object {key!r}")


def _set_path(root: Any, path: List[Any], value: Any) -> None:
    node = root
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
