# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""torch DCP storage for the hyper-parallel format: safetensors data + backend-free ``metadata.json``.

:class:`FileSystemWriter` / :class:`FileSystemReader` implement torch's ``StorageWriter`` /
``StorageReader``, so torch's ``save``/``load``/``async_save`` and any torch planner drive them (and
torch users can pass them to ``torch.distributed.checkpoint`` directly). What they add over torch's
own ``FileSystemWriter``:

* a format any backend reads (see :mod:`hyper_parallel.checkpoint.format`): the MindSpore path and
  ``hp-ckpt`` need no torch;
* crash safety: every rank writes into one hidden staging folder chosen by the coordinator, fsyncs its
  files, and the coordinator publishes the folder with an atomic rename after ``metadata.json`` (with
  the file manifest and per-chunk checksums) is durable;
* integrity on load: sizes of all files are checked against the manifest before any read, every chunk
  read is checksum-verified (CRC-32C), and any mismatch names the file; a chunk that fills one target
  whole is read straight into the target's memory.
"""
from __future__ import annotations

import dataclasses
import io
import os
from typing import Any, Dict, List, Optional, Tuple

import torch
from torch.futures import Future
from torch.distributed.checkpoint.metadata import (BytesStorageMetadata, ChunkStorageMetadata, Metadata,
                                                   MetadataIndex, StorageMeta, TensorProperties,
                                                   TensorStorageMetadata)
from torch.distributed.checkpoint.planner import (LoadItemType, LoadPlan, LoadPlanner, SavePlan, SavePlanner,
                                                 WriteItemType)
from torch.distributed.checkpoint.storage import StorageReader, StorageWriter, WriteResult

from hyper_parallel.checkpoint import objects as _objects
from hyper_parallel.checkpoint.format import (DTYPES, METADATA_FILE, CheckpointError,
                                              CheckpointMetadata, ChunkEntry, ObjectEntry, TensorEntry,
                                              data_file_name, objects_file_name)
from hyper_parallel.checkpoint.manifest import read_metadata, record_headers
from hyper_parallel.checkpoint.publish import new_save_id, publish_dir, staging_path
from hyper_parallel.checkpoint.checksum import DEFAULT_ALGORITHM, checksum_function
from hyper_parallel.checkpoint.safetensors_io import read_range, read_range_into, write_safetensors

__all__ = ["FileSystemWriter", "FileSystemReader", "dtype_name", "torch_dtype", "tensor_buffer"]


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.float32`` -> ``'float32'`` (a name of :data:`~hyper_parallel.checkpoint.format.DTYPES`)."""
    name = str(dtype).replace("torch.", "")
    if name not in DTYPES:
        raise CheckpointError(f"dtype {dtype} cannot be checkpointed: expected one of {sorted(DTYPES)}")
    return name


def torch_dtype(name: str) -> torch.dtype:
    """Inverse of :func:`dtype_name`."""
    dt = getattr(torch, name, None)
    if not isinstance(dt, torch.dtype):
        raise CheckpointError(f"dtype {name!r} is not a torch dtype")
    return dt


def tensor_buffer(t: torch.Tensor):
    """A zero-copy byte view (numpy array) of a contiguous CPU tensor, any dtype."""
    flat = t.reshape(-1)
    if flat.numel() == 0:
        return memoryview(b"")
    return flat.view(torch.uint8).numpy()


@dataclasses.dataclass(frozen=True)
class _RankStorage:
    """Per-rank part of the global save plan: the rank's number and the staging folder."""

    rank: int
    staging: str


@dataclasses.dataclass(frozen=True)
class _ChunkLoc:
    """Where one chunk was written (WriteResult.storage_data / read-side storage_data)."""

    file: str
    key: str
    data_offset: int
    nbytes: int
    checksum: int
    dtype: str = ""
    sizes: Tuple[int, ...] = ()
    algorithm: str = DEFAULT_ALGORITHM


@dataclasses.dataclass(frozen=True)
class _ObjLoc:
    """Where one object was written: inline JSON value, or a byte range of an objects file."""

    encoding: str
    value: Any = None
    file: Optional[str] = None
    offset: int = 0
    length: int = 0
    checksum: int = 0
    algorithm: str = DEFAULT_ALGORITHM


class FileSystemWriter(StorageWriter):
    """Write a hyper-parallel checkpoint folder with torch's DCP (``torch.distributed.checkpoint.save``).

    Args:
        path: the checkpoint folder to create (published atomically when the save completes).
        sync_files: fsync data and metadata (default True; without it a crash may lose a published save).
        overwrite: allow replacing an existing checkpoint at ``path`` (default True).
    """

    def __init__(self, path: "str | os.PathLike", *, sync_files: bool = True, overwrite: bool = True) -> None:
        super().__init__()
        self.path = os.path.abspath(os.fspath(path))
        self.sync_files = sync_files
        self.overwrite = overwrite
        self.save_id = new_save_id()
        self.is_coordinator = False
        self.rank: Optional[int] = None
        self.staging: Optional[str] = None

    def reset(self, checkpoint_id: "str | os.PathLike | None" = None) -> None:
        """Start a new save (optionally to another folder)."""
        if checkpoint_id:
            self.path = os.path.abspath(os.fspath(checkpoint_id))
        self.save_id = new_save_id()
        self.staging = None

    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        """Remember the role of this rank."""
        self.is_coordinator = is_coordinator
        self.rank = kwargs.get("rank")

    def prepare_local_plan(self, plan: SavePlan) -> SavePlan:
        """Unchanged."""
        return plan

    def prepare_global_plan(self, plans: List[SavePlan]) -> List[SavePlan]:
        """Coordinator: create the staging folder and tell every rank its number and the folder."""
        if os.path.exists(self.path) and not self.overwrite:
            raise CheckpointError(f"checkpoint folder {self.path} exists and overwrite=False")
        staging = staging_path(self.path, self.save_id)
        os.makedirs(os.path.dirname(staging), exist_ok=True)
        os.mkdir(staging)
        return [dataclasses.replace(p, storage_data=_RankStorage(i, staging)) for i, p in enumerate(plans)]

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> "Future[List[WriteResult]]":
        """Write this rank's tensors (one safetensors file) and large objects (one objects file), fsynced."""
        st: _RankStorage = plan.storage_data
        self.staging = st.staging
        results = self._write_tensors(st, [i for i in plan.items if i.type != WriteItemType.BYTE_IO], planner)
        results += self._write_objects(st, [i for i in plan.items if i.type == WriteItemType.BYTE_IO], planner)
        fut: Future = Future()
        fut.set_result(results)
        return fut

    def _write_tensors(self, st: _RankStorage, items, planner: SavePlanner) -> List[WriteResult]:
        if not items:
            return []
        fname = data_file_name(st.rank)
        entries, keys, used = [], [], set()
        for item in items:
            t = planner.resolve_data(item)
            if not isinstance(t, torch.Tensor):
                raise CheckpointError(f"save: {item.index.fqn!r} resolved to {type(t).__name__}, expected a tensor")
            t = t.detach()
            if t.device.type != "cpu":
                t = t.to("cpu")
            t = t.contiguous()
            key = item.index.fqn
            if key in used:
                key = f"{key}@{','.join(str(o) for o in item.index.offset)}"
            used.add(key)
            keys.append(key)
            entries.append((key, dtype_name(t.dtype), tuple(t.shape), tensor_buffer(t)))
        placed = write_safetensors(os.path.join(st.staging, fname), entries,
                                   metadata={"format": "pt", "hyper_parallel": "1"}, fsync=self.sync_files)
        return [WriteResult(index=item.index, size_in_bytes=nbytes,
                            storage_data=_ChunkLoc(fname, key, off, nbytes, value))
                for item, key, (off, nbytes, value) in zip(items, keys, placed)]

    def _write_objects(self, st: _RankStorage, items, planner: SavePlanner) -> List[WriteResult]:
        results, blobs, pos = [], [], 0
        fname = objects_file_name(st.rank)
        for item in items:
            data = planner.resolve_data(item)
            data.seek(0)
            value = torch.load(data, weights_only=False)
            encoding, payload = _objects.encode_object(value)
            if encoding == _objects.JSON and len(payload) <= _objects.INLINE_LIMIT:
                loc = _ObjLoc(encoding, value)
            else:
                loc = _ObjLoc(encoding, None, fname, pos, len(payload), checksum_function(DEFAULT_ALGORITHM)(payload))
                blobs.append(payload)
                pos += len(payload)
            results.append(WriteResult(index=item.index, size_in_bytes=len(payload), storage_data=loc))
        if blobs:
            with open(os.path.join(st.staging, fname), "wb") as f:
                for b in blobs:
                    f.write(b)
                f.flush()
                if self.sync_files:
                    os.fsync(f.fileno())
        return results

    def finish(self, metadata: Metadata, results: List[List[WriteResult]]) -> None:
        """Coordinator, after every rank's data is durable: write ``metadata.json`` and publish the folder."""
        staging = self.staging
        if staging is None:
            raise CheckpointError("FileSystemWriter.finish: no staging folder (write_data did not run here)")
        md = build_metadata(metadata, results, staging)
        from hyper_parallel.checkpoint.publish import write_file_atomic
        write_file_atomic(os.path.join(staging, METADATA_FILE), md.dumps().encode())
        publish_dir(staging, self.path)

    def storage_meta(self) -> Optional[StorageMeta]:
        """DCP storage meta (checkpoint id and save id)."""
        return StorageMeta(checkpoint_id=self.path, save_id=self.save_id)

    @property
    def checkpoint_id(self) -> str:
        """The destination folder."""
        return self.path

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: "str | os.PathLike") -> bool:
        """Any path names a folder."""
        return isinstance(checkpoint_id, (str, os.PathLike))


def _created_by() -> str:
    from hyper_parallel import __version__
    return f"hyper_parallel {__version__} (torch {torch.__version__})"


def build_metadata(metadata: Metadata, results: List[List[WriteResult]], folder: str) -> CheckpointMetadata:
    """Our metadata from DCP's global metadata and every rank's write results."""
    where: Dict[Tuple[str, Tuple[int, ...]], Any] = {}
    for per_rank in results:
        for wr in per_rank:
            off = tuple(wr.index.offset) if wr.index.offset is not None else None
            where[(wr.index.fqn, off)] = wr.storage_data
    md = CheckpointMetadata(world_size=len(results), created_by=_created_by(), checksum_algorithm=DEFAULT_ALGORITHM)
    for fqn, smd in metadata.state_dict_metadata.items():
        if isinstance(smd, TensorStorageMetadata):
            entry = TensorEntry(dtype_name(smd.properties.dtype), tuple(smd.size))
            for chunk in smd.chunks:
                loc = where.get((fqn, tuple(chunk.offsets)))
                if loc is None:
                    raise CheckpointError(f"save: no rank wrote the chunk of {fqn!r} at {list(chunk.offsets)}")
                entry.chunks.append(ChunkEntry(tuple(chunk.offsets), tuple(chunk.sizes), loc.file, loc.key,
                                               loc.data_offset, loc.nbytes, loc.checksum))
            md.tensors[fqn] = entry
        else:
            loc = where.get((fqn, None))
            if loc is None:
                raise CheckpointError(f"save: no rank wrote the object {fqn!r}")
            md.objects[fqn] = ObjectEntry(loc.encoding, loc.value, loc.file, loc.offset, loc.length, loc.checksum)
    for name in sorted(os.listdir(folder)):
        if name != METADATA_FILE:
            md.files[name] = os.path.getsize(os.path.join(folder, name))
    record_headers(folder, md)
    if metadata.planner_data:
        md.paths = {k: list(v) for k, v in metadata.planner_data.items()}
    return md


def to_torch_metadata(md: CheckpointMetadata) -> Metadata:
    """DCP ``Metadata`` (with our storage locations) for a parsed ``metadata.json``."""
    sd_md: Dict[str, Any] = {}
    storage: Dict[MetadataIndex, Any] = {}
    for fqn, t in md.tensors.items():
        dt = torch_dtype(t.dtype)
        chunks = []
        for c in t.chunks:
            chunks.append(ChunkStorageMetadata(torch.Size(c.offsets), torch.Size(c.sizes)))
            storage[MetadataIndex(fqn, torch.Size(c.offsets))] = _ChunkLoc(c.file, c.key, c.data_offset, c.nbytes,
                                                                           c.checksum, t.dtype, tuple(c.sizes),
                                                                           md.checksum_algorithm)
        sd_md[fqn] = TensorStorageMetadata(TensorProperties(dtype=dt), torch.Size(t.shape), chunks)
    for fqn, o in md.objects.items():
        sd_md[fqn] = BytesStorageMetadata()
        storage[MetadataIndex(fqn)] = _ObjLoc(o.encoding, o.value, o.file, o.offset, o.length, o.checksum,
                                              md.checksum_algorithm)
    planner_data = {k: tuple(v) for k, v in md.paths.items()} or None
    return Metadata(state_dict_metadata=sd_md, planner_data=planner_data, storage_data=storage)


def read_object(folder: str, fqn: str, loc: Any) -> Any:
    """Decode one stored object (inline or from its objects file, CRC-checked)."""
    if loc.file is None:
        return loc.value
    raw = read_range(os.path.join(folder, loc.file), loc.offset, loc.length, loc.checksum, f"object {fqn!r}",
                     loc.algorithm)
    return _objects.decode_object(loc.encoding, bytes(raw), f"object {fqn!r}")


def chunk_tensor(folder: str, fqn: str, loc: _ChunkLoc, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """One stored chunk as a CPU tensor, checksum verified; read straight into ``out`` when given (a
    contiguous CPU tensor of the chunk's dtype and sizes, e.g. the loading target itself)."""
    dt = torch_dtype(loc.dtype)
    if out is None:
        out = torch.empty(loc.sizes, dtype=dt)
    if loc.nbytes:
        read_range_into(os.path.join(folder, loc.file), loc.data_offset, tensor_buffer(out), loc.checksum,
                        f"tensor {fqn!r} chunk {loc.key!r}", loc.algorithm)
    return out


def _direct_target(reqs, loc: _ChunkLoc, planner) -> Optional[torch.Tensor]:
    """The target itself when one request covers the whole chunk and the target can take its bytes."""
    if len(reqs) != 1 or list(reqs[0].lengths) != list(loc.sizes) or any(reqs[0].storage_offsets):
        return None
    target = planner.resolve_tensor(reqs[0]).detach()
    if (target.device.type != "cpu" or not target.is_contiguous() or target.dtype != torch_dtype(loc.dtype)
            or list(target.shape) != list(loc.sizes)):
        return None
    return target


class FileSystemReader(StorageReader):
    """Read a hyper-parallel checkpoint folder with torch's DCP (``torch.distributed.checkpoint.load``).

    Works with any torch load planner (objects are handed to the planner in ``torch.save`` form), so
    ``torch.distributed.checkpoint.load(sd, storage_reader=FileSystemReader(path))`` loads our folders
    into torch's own DTensors too.
    """

    def __init__(self, path: "str | os.PathLike") -> None:
        super().__init__()
        self.path = os.path.abspath(os.fspath(path))
        self.storage_data: Dict[MetadataIndex, Any] = {}
        self.load_id = new_save_id()
        self._metadata: Optional[Metadata] = None

    def reset(self, checkpoint_id: "str | os.PathLike | None" = None) -> None:
        """Start a new load (optionally from another folder)."""
        self.storage_data = {}
        if checkpoint_id and os.path.abspath(os.fspath(checkpoint_id)) != self.path:
            self.path = os.path.abspath(os.fspath(checkpoint_id))
            self._metadata = None
        self.load_id = new_save_id()

    def check(self) -> Metadata:
        """Parse ``metadata.json`` and check the manifest (file sizes) now, raising
        ``CheckpointCorruptError`` naming a damaged file (``load`` calls it before DCP does)."""
        if self._metadata is None:
            self._metadata = to_torch_metadata(read_metadata(self.path))
        return self._metadata

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        """The checked metadata (see :meth:`check`)."""
        md = self.check()
        md.storage_meta = StorageMeta(checkpoint_id=self.path, load_id=self.load_id)
        return md

    def set_up_storage_reader(self, metadata: Metadata, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        """Keep the storage locations."""
        self.storage_data = metadata.storage_data

    def prepare_local_plan(self, plan: LoadPlan) -> LoadPlan:
        """Unchanged."""
        return plan

    def prepare_global_plan(self, plans: List[LoadPlan]) -> List[LoadPlan]:
        """Unchanged."""
        return plans

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> "Future[None]":
        """Read every stored chunk this rank needs once (checksum verified) and copy the overlaps into place."""
        by_chunk: Dict[MetadataIndex, List[Any]] = {}
        for req in plan.items:
            if req.type == LoadItemType.BYTE_IO:
                loc = self.storage_data[req.storage_index]
                value = read_object(self.path, req.storage_index.fqn, loc)
                buf = io.BytesIO()
                torch.save(value, buf)
                buf.seek(0)
                planner.load_bytes(req, buf)
            else:
                by_chunk.setdefault(req.storage_index, []).append(req)
        for index, reqs in by_chunk.items():
            loc = self.storage_data[index]
            direct = _direct_target(reqs, loc, planner)
            if direct is not None:  # no intermediate buffer: the bytes land in the target
                chunk_tensor(self.path, index.fqn, loc, direct)
                planner.commit_tensor(reqs[0], direct)
                continue
            src = chunk_tensor(self.path, index.fqn, loc)
            for req in reqs:
                piece = src
                for d, (o, n) in enumerate(zip(req.storage_offsets, req.lengths)):
                    piece = piece.narrow(d, o, n)
                target = planner.resolve_tensor(req).detach()
                if target.size() != piece.size():
                    raise CheckpointError(f"load {index.fqn!r}: read {list(piece.size())} elements for a target "
                                          f"region of {list(target.size())}")
                target.copy_(piece)
                planner.commit_tensor(req, target)
        fut: Future = Future()
        fut.set_result(None)
        return fut

    @property
    def checkpoint_id(self) -> str:
        """The source folder."""
        return self.path

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: "str | os.PathLike") -> bool:
        """True for a folder holding our ``metadata.json``."""
        try:
            return os.path.isfile(os.path.join(os.fspath(checkpoint_id), METADATA_FILE))
        except TypeError:
            return False
