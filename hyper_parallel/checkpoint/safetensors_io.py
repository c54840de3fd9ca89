# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Streaming safetensors files from raw buffers, with CRC-32 and fsync (pure Python, no framework).

The `safetensors format <https://github.com/huggingface/safetensors>`_ is an 8-byte little-endian header
length, a JSON header (``{key: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}``,
padded with spaces to a multiple of 8) and the tensors' bytes back to back. The ``safetensors`` library
serialises a whole dict into one in-memory ``bytes`` first; this writer streams each buffer straight
from the tensor's memory to the file instead (no extra copy of the payload), computes the CRC-32 of
every buffer while the kernel flushes the file, and fsyncs it. Files are readable by ``safetensors``.

Readers here read one chunk's byte range and check its length and CRC-32, raising
:class:`~hyper_parallel.checkpoint.format.CheckpointCorruptError` that names the file.
"""
from __future__ import annotations

import contextlib
import json
import os
import struct
import threading
import zlib
from typing import Any, Dict, List, Optional, Sequence, Tuple

from hyper_parallel.checkpoint.format import DTYPES, CheckpointCorruptError

__all__ = ["write_safetensors", "read_header", "read_range", "fsync_dir", "HEADER_LEN_BYTES"]

HEADER_LEN_BYTES = 8
_CRC_BLOCK = 64 << 20  # CRC in 64 MiB slices (zlib releases the GIL on large buffers)
_MAX_HEADER = 100 << 20


def _st_dtype(dtype: str) -> Tuple[str, bool]:
    """(safetensors dtype code, stored as raw bytes?) for a dtype name."""
    code = DTYPES[dtype][0]
    return (code, False) if code is not None else ("U8", True)


def _header(entries: Sequence[Tuple[str, str, Sequence[int], int]], metadata: Optional[Dict[str, str]]):
    """JSON header bytes and the data offset of each entry (relative to the data section)."""
    head: Dict[str, Any] = {}
    if metadata:
        head["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    begin = 0
    offsets = []
    for key, dtype, shape, nbytes in entries:
        code, raw = _st_dtype(dtype)
        head[key] = {"dtype": code, "shape": [nbytes] if raw else [int(s) for s in shape],
                     "data_offsets": [begin, begin + nbytes]}
        offsets.append(begin)
        begin += nbytes
    text = json.dumps(head, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return text, offsets


def _crc_all(buffers: Sequence[memoryview], out: List[int]) -> None:
    for buf in buffers:
        crc = 0
        for start in range(0, buf.nbytes, _CRC_BLOCK):
            crc = zlib.crc32(buf[start:start + _CRC_BLOCK], crc)
        out.append(crc)


def _byte_view(buf: Any) -> memoryview:
    view = memoryview(buf)
    if view.nbytes == 0:
        return memoryview(b"")
    if not view.c_contiguous:
        raise ValueError("write_safetensors: buffers must be C-contiguous")
    return view.cast("B")


def write_safetensors(path: str, entries: Sequence[Tuple[str, str, Sequence[int], Any]],
                      metadata: Optional[Dict[str, str]] = None, fsync: bool = True) -> List[Tuple[int, int, int]]:
    """Write ``entries`` = ``[(key, dtype name, shape, buffer)]`` (``buffer``: any C-contiguous object with
    the buffer protocol holding the tensor's bytes) as one safetensors file.

    Returns ``[(absolute byte offset of the data, nbytes, crc32)]`` per entry. With ``fsync`` the file is
    flushed to stable storage before returning; the CRCs are computed while the flush runs.
    """
    views = [_byte_view(buf) for _, _, _, buf in entries]
    head, offsets = _header([(k, d, s, v.nbytes) for (k, d, s, _), v in zip(entries, views)], metadata)
    base = HEADER_LEN_BYTES + len(head)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for v in views:
            f.write(v)
        f.flush()
        crcs: List[int] = []
        if fsync:
            worker = threading.Thread(target=_crc_all, args=(views, crcs), name="hp-ckpt-crc")
            worker.start()
            os.fsync(f.fileno())
            worker.join()
        else:
            _crc_all(views, crcs)
    return [(base + off, v.nbytes, crc) for off, v, crc in zip(offsets, views, crcs)]


def read_header(path: str) -> Tuple[Dict[str, Any], int]:
    """(parsed JSON header, byte offset where the data section starts) of a safetensors file."""
    try:
        with open(path, "rb") as f:
            raw = f.read(HEADER_LEN_BYTES)
            if len(raw) != HEADER_LEN_BYTES:
                raise CheckpointCorruptError(path, "shorter than a safetensors header")
            (n,) = struct.unpack("<Q", raw)
            if n > _MAX_HEADER:
                raise CheckpointCorruptError(path, f"header length {n} is not plausible")
            text = f.read(n)
    except FileNotFoundError:
        raise CheckpointCorruptError(path, "file is missing") from None
    if len(text) != n:
        raise CheckpointCorruptError(path, "truncated inside the safetensors header")
    try:
        return json.loads(text), HEADER_LEN_BYTES + n
    except json.JSONDecodeError as exc:
        raise CheckpointCorruptError(path, f"safetensors header is not valid JSON: {exc}") from None


def read_range(path: str, offset: int, nbytes: int, crc32: Optional[int] = None, what: str = "") -> bytearray:
    """Read ``nbytes`` at ``offset`` of ``path`` and verify their CRC-32 (when given).

    A missing file, a short read (truncated file) or a CRC mismatch raises ``CheckpointCorruptError``
    naming the file (and ``what``, e.g. the tensor and chunk).
    """
    buf = bytearray(nbytes)
    try:
        with open(path, "rb", buffering=0) as f:
            f.seek(offset)
            view = memoryview(buf)
            got = 0
            while got < nbytes:
                n = f.readinto(view[got:])
                if not n:
                    break
                got += n
    except FileNotFoundError:
        raise CheckpointCorruptError(path, f"file is missing{_for(what)}") from None
    if got != nbytes:
        raise CheckpointCorruptError(path, f"truncated: expected {nbytes} bytes at offset {offset}{_for(what)}, "
                                           f"found {got}")
    if crc32 is not None:
        crc = 0
        for start in range(0, nbytes, _CRC_BLOCK):
            crc = zlib.crc32(view[start:start + _CRC_BLOCK], crc)
        if crc != crc32:
            raise CheckpointCorruptError(path, f"CRC-32 mismatch{_for(what)} (stored {crc32:#010x}, "
                                               f"read {crc:#010x})")
    return buf


def _for(what: str) -> str:
    return f" for {what}" if what else ""


def fsync_dir(path: str) -> None:
    """Make the directory entries of ``path`` durable (no-op where directories cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # platforms without directory handles: their renames are durable by other means
        return
    try:
        with contextlib.suppress(OSError):  # file systems that cannot fsync a directory (EINVAL)
            os.fsync(fd)
    finally:
        os.close(fd)
