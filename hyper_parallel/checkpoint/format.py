# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The on-disk checkpoint format, backend-free (pure Python: no torch, no mindspore).

A checkpoint is a folder::

    metadata.json              written last: tensors, their chunks, objects, files, self-checksum
    __<rank>_0.safetensors     the tensor chunks this rank wrote (a valid safetensors file)
    __<rank>_0.objects         the non-tensor objects this rank wrote that are too big to inline

``metadata.json`` describes every tensor by its *global* shape and dtype and lists its chunks (offsets,
sizes, the file and byte range holding them, a checksum of their bytes: CRC-32C, see ``checksum.py``);
objects are either inlined
(small JSON values such as a step counter) or stored by byte range in an objects file; ``files`` is the
manifest (name -> size). A CRC-32 of the document itself guards against silent edits and truncation.
Nothing in it depends on a framework: the torch path (on torch's DCP engine) and the MindSpore path read
and write the same folders, and any rank layout can load any checkpoint by overlapping chunks.
"""
from __future__ import annotations

import json
import math
import zlib
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

__all__ = ["FORMAT_NAME", "FORMAT_VERSION", "METADATA_FILE", "DTYPES", "CheckpointError", "CheckpointCorruptError",
           "ChunkEntry", "TensorEntry", "ObjectEntry", "CheckpointMetadata", "dtype_itemsize", "data_file_name",
           "objects_file_name", "numel"]

FORMAT_NAME = "hyper-parallel-checkpoint"
FORMAT_VERSION = 1
METADATA_FILE = "metadata.json"

#: dtype name (torch spelling) -> (safetensors dtype code or None when safetensors has none, bytes per element).
DTYPES: Dict[str, Tuple[Optional[str], int]] = {
    "bool": ("BOOL", 1), "uint8": ("U8", 1), "int8": ("I8", 1), "int16": ("I16", 2), "uint16": ("U16", 2),
    "int32": ("I32", 4), "uint32": ("U32", 4), "int64": ("I64", 8), "uint64": ("U64", 8),
    "float16": ("F16", 2), "bfloat16": ("BF16", 2), "float32": ("F32", 4), "float64": ("F64", 8),
    "float8_e4m3fn": ("F8_E4M3", 1), "float8_e5m2": ("F8_E5M2", 1), "complex64": ("C64", 8),
    "complex128": (None, 16),
}
#: safetensors dtype code -> dtype name (torch spelling)
SAFETENSORS_TO_DTYPE = {code: name for name, (code, _) in DTYPES.items() if code is not None}


class CheckpointError(RuntimeError):
    """A checkpoint cannot be saved or loaded (bad input, missing folder, layout mismatch)."""


class CheckpointCorruptError(CheckpointError):
    """A checkpoint file is truncated, corrupted or inconsistent with ``metadata.json``; ``path`` names it."""

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"corrupted checkpoint file {path}: {problem}")

    def __reduce__(self):
        return (CheckpointCorruptError, (self.path, self.problem))


def dtype_itemsize(dtype: str) -> int:
    """Bytes per element of a dtype name (``'float32'`` -> 4)."""
    try:
        return DTYPES[dtype][1]
    except KeyError:
        raise CheckpointError(f"unsupported dtype {dtype!r}: expected one of {sorted(DTYPES)}") from None


def numel(shape: Sequence[int]) -> int:
    """Element count of a shape (1 for a 0-d tensor)."""
    return math.prod(int(s) for s in shape)


def data_file_name(rank: int, index: int = 0) -> str:
    """Name of the safetensors data file ``index`` of ``rank``."""
    return f"__{rank}_{index}.safetensors"


def objects_file_name(rank: int) -> str:
    """Name of the objects file of ``rank``."""
    return f"__{rank}_0.objects"


def _ints(value: Any, what: str) -> Tuple[int, ...]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, int) and v >= 0 for v in value):
        raise ValueError(f"{what}: expected a list of non-negative ints, got {value!r}")
    return tuple(value)


@dataclass(frozen=True)
class ChunkEntry:
    """One stored chunk of a tensor: where it sits in the global tensor and in which file bytes."""

    offsets: Tuple[int, ...]
    sizes: Tuple[int, ...]
    file: str
    key: str
    data_offset: int
    nbytes: int
    checksum: int

    def to_json(self) -> Dict[str, Any]:
        """Plain-dict form."""
        return {"offsets": list(self.offsets), "sizes": list(self.sizes), "file": self.file, "key": self.key,
                "data_offset": self.data_offset, "nbytes": self.nbytes, "checksum": self.checksum}

    @staticmethod
    def from_json(d: Dict[str, Any], what: str) -> "ChunkEntry":
        """Parse (validating types)."""
        try:
            return ChunkEntry(_ints(d["offsets"], f"{what}.offsets"), _ints(d["sizes"], f"{what}.sizes"),
                              str(d["file"]), str(d["key"]), int(d["data_offset"]), int(d["nbytes"]),
                              int(d["checksum"]))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"{what}: malformed chunk entry {d!r} ({exc})") from None


@dataclass
class TensorEntry:
    """A tensor: dtype name, global shape and its chunks (together they cover it exactly once)."""

    dtype: str
    shape: Tuple[int, ...]
    chunks: List[ChunkEntry] = field(default_factory=list)

    @property
    def nbytes(self) -> int:
        """Bytes of the global tensor."""
        return numel(self.shape) * dtype_itemsize(self.dtype)

    def to_json(self) -> Dict[str, Any]:
        """Plain-dict form."""
        return {"dtype": self.dtype, "shape": list(self.shape), "chunks": [c.to_json() for c in self.chunks]}

    @staticmethod
    def from_json(d: Dict[str, Any], what: str) -> "TensorEntry":
        """Parse (validating types and dtype)."""
        dtype = d.get("dtype")
        if dtype not in DTYPES:
            raise ValueError(f"{what}.dtype: unsupported dtype {dtype!r}")
        chunks = [ChunkEntry.from_json(c, f"{what}.chunks[{i}]") for i, c in enumerate(d.get("chunks", []))]
        return TensorEntry(dtype, _ints(d.get("shape"), f"{what}.shape"), chunks)


@dataclass(frozen=True)
class ObjectEntry:
    """A non-tensor value: inlined JSON (``encoding='json'``, ``value``) or bytes in an objects file."""

    encoding: str
    value: Any = None
    file: Optional[str] = None
    offset: int = 0
    length: int = 0
    checksum: int = 0

    def to_json(self) -> Dict[str, Any]:
        """Plain-dict form."""
        if self.file is None:
            return {"encoding": self.encoding, "value": self.value}
        return {"encoding": self.encoding, "file": self.file, "offset": self.offset, "length": self.length,
                "checksum": self.checksum}

    @staticmethod
    def from_json(d: Dict[str, Any], what: str) -> "ObjectEntry":
        """Parse."""
        if not isinstance(d, dict) or "encoding" not in d:
            raise ValueError(f"{what}: malformed object entry {d!r}")
        if "file" in d:
            return ObjectEntry(str(d["encoding"]), None, str(d["file"]), int(d["offset"]), int(d["length"]),
                               int(d["checksum"]))
        return ObjectEntry(str(d["encoding"]), d.get("value"))


@dataclass
class CheckpointMetadata:
    """The whole ``metadata.json``: tensors, objects, the file manifest and the nesting of the state dict.

    ``paths`` maps each flat key to its path in the nested state dict (``"model.w"`` -> ``["model", "w"]``),
    so a checkpoint can be rebuilt as the nested dict it was saved from without a template. ``headers`` maps
    each safetensors file to the checksum of its length and JSON header (the chunk checksums cover the data).
    """

    tensors: Dict[str, TensorEntry] = field(default_factory=dict)
    objects: Dict[str, ObjectEntry] = field(default_factory=dict)
    files: Dict[str, int] = field(default_factory=dict)
    paths: Dict[str, List[Any]] = field(default_factory=dict)
    world_size: int = 1
    created_by: str = ""
    checksum_algorithm: str = "crc32c"
    extra: Dict[str, Any] = field(default_factory=dict)
    headers: Dict[str, int] = field(default_factory=dict)

    @property
    def total_bytes(self) -> int:
        """Bytes of all tensors (global sizes, each counted once)."""
        return sum(t.nbytes for t in self.tensors.values())

    def to_json(self) -> Dict[str, Any]:
        """The document, with its self-checksum."""
        body = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "created_by": self.created_by,
                "world_size": self.world_size, "checksum_algorithm": self.checksum_algorithm,
                "tensors": {k: self.tensors[k].to_json() for k in sorted(self.tensors)},
                "objects": {k: self.objects[k].to_json() for k in sorted(self.objects)},
                "files": {k: self.files[k] for k in sorted(self.files)},
                "paths": {k: self.paths[k] for k in sorted(self.paths)}, "extra": self.extra}
        if self.headers:  # checksum of each safetensors file's length + JSON header (absent in older checkpoints)
            body["headers"] = {k: self.headers[k] for k in sorted(self.headers)}
        body["checksum"] = _doc_crc(body)
        return body

    def dumps(self) -> str:
        """Serialized ``metadata.json`` text."""
        return json.dumps(self.to_json(), indent=1, sort_keys=False)

    @staticmethod
    def loads(text: str, path: str = METADATA_FILE) -> "CheckpointMetadata":
        """Parse ``metadata.json`` text; a truncated, edited or foreign document raises
        :class:`CheckpointCorruptError` naming ``path``."""
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise CheckpointCorruptError(path, f"not valid JSON (truncated?): {exc}") from None
        if not isinstance(doc, dict) or doc.get("format") != FORMAT_NAME:
            raise CheckpointCorruptError(path, f"not a {FORMAT_NAME} metadata document")
        if doc.get("version") != FORMAT_VERSION:
            raise CheckpointError(f"{path}: format version {doc.get('version')!r} is not supported "
                                  f"(this library reads version {FORMAT_VERSION})")
        stored = doc.pop("checksum", None)
        if stored != _doc_crc(doc):
            raise CheckpointCorruptError(path, f"checksum mismatch (stored {stored!r}, computed {_doc_crc(doc)})")
        try:
            md = CheckpointMetadata(
                tensors={k: TensorEntry.from_json(v, f"tensors[{k!r}]") for k, v in doc["tensors"].items()},
                objects={k: ObjectEntry.from_json(v, f"objects[{k!r}]") for k, v in doc["objects"].items()},
                files={str(k): int(v) for k, v in doc["files"].items()},
                paths={str(k): list(v) for k, v in doc.get("paths", {}).items()},
                world_size=int(doc.get("world_size", 1)), created_by=str(doc.get("created_by", "")),
                checksum_algorithm=str(doc.get("checksum_algorithm", "crc32c")),
                extra=dict(doc.get("extra", {})),
                headers={str(k): int(v) for k, v in doc.get("headers", {}).items()})
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointCorruptError(path, f"malformed metadata: {exc}") from None
        return md

    def validate(self) -> None:
        """Check that every tensor's chunks lie inside it and cover it exactly (sum of volumes, no
        overlap); raises :class:`CheckpointError` naming the tensor."""
        for name, t in self.tensors.items():
            total = 0
            boxes = []
            for c in t.chunks:
                if len(c.offsets) != len(t.shape) or len(c.sizes) != len(t.shape):
                    raise CheckpointError(f"tensor {name!r}: chunk rank {len(c.offsets)} != tensor rank {len(t.shape)}")
                if any(o + s > d for o, s, d in zip(c.offsets, c.sizes, t.shape)):
                    raise CheckpointError(f"tensor {name!r}: chunk at {list(c.offsets)} of size {list(c.sizes)} "
                                          f"exceeds the shape {list(t.shape)}")
                if c.nbytes != numel(c.sizes) * dtype_itemsize(t.dtype):
                    raise CheckpointError(f"tensor {name!r}: chunk at {list(c.offsets)} holds {c.nbytes} bytes, "
                                          f"expected {numel(c.sizes) * dtype_itemsize(t.dtype)}")
                if numel(c.sizes):
                    boxes.append(c)
                total += numel(c.sizes)
            if total != numel(t.shape) or _any_overlap(boxes):
                raise CheckpointError(f"tensor {name!r}: its chunks do not cover the shape {list(t.shape)} exactly "
                                      f"once ({total} of {numel(t.shape)} elements)")


def _any_overlap(chunks: Sequence[ChunkEntry]) -> bool:
    ordered = sorted(chunks, key=lambda c: c.offsets)
    for i, a in enumerate(ordered):
        for b in ordered[i + 1:]:
            if all(ao < bo + bs and bo < ao + as_ for ao, as_, bo, bs in zip(a.offsets, a.sizes, b.offsets, b.sizes)):
                return True
    return False


def _doc_crc(body: Dict[str, Any]) -> int:
    return zlib.crc32(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())
