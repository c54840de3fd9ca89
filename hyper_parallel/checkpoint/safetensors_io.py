# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Streaming safetensors files from raw buffers, with checksums and fsync (pure Python, no framework).

The `safetensors format <https://github.com/huggingface/safetensors>`_ is an 8-byte little-endian header
length, a JSON header (``{key: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}``,
padded with spaces to a multiple of 8) and the tensors' bytes back to back. The ``safetensors`` library
serialises a whole dict into one in-memory ``bytes`` first; this writer streams each buffer straight
from the tensor's memory to the file instead (no extra copy of the payload), computes the checksum of
every buffer (:mod:`.checksum`) while the kernel flushes the file, and fsyncs it. Files are readable by
``safetensors``.

Readers here read one chunk's byte range (into a new buffer, or into the caller's) and check its length
and checksum, raising
:class:`~hyper_parallel.checkpoint.format.CheckpointCorruptError` that names the file.
"""
from __future__ import annotations

import contextlib
import json
import os
import struct
import threading
from typing import Any, Dict, List, Optional, Sequence, Tuple

from hyper_parallel.checkpoint.checksum import DEFAULT_ALGORITHM, checksum_function
from hyper_parallel.checkpoint.format import DTYPES, CheckpointCorruptError

__all__ = ["write_safetensors", "read_header", "read_range", "read_range_into", "fsync_dir", "HEADER_LEN_BYTES",
           "header_checksum"]

HEADER_LEN_BYTES = 8
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


def _checksum_all(buffers: Sequence[memoryview], out: List[int], algorithm: str) -> None:
    fn = checksum_function(algorithm)
    for buf in buffers:
        out.append(fn(buf))


def _byte_view(buf: Any) -> memoryview:
    view = memoryview(buf)
    if view.nbytes == 0:
        return memoryview(b"")
    if not view.c_contiguous:
        raise ValueError("write_safetensors: buffers must be C-contiguous")
    return view.cast("B")


def write_safetensors(path: str, entries: Sequence[Tuple[str, str, Sequence[int], Any]],
                      metadata: Optional[Dict[str, str]] = None, fsync: bool = True,
                      algorithm: str = DEFAULT_ALGORITHM) -> List[Tuple[int, int, int]]:
    """Write ``entries`` = ``[(key, dtype name, shape, buffer)]`` (``buffer``: any C-contiguous object with
    the buffer protocol holding the tensor's bytes) as one safetensors file.

    Returns ``[(absolute byte offset of the data, nbytes, checksum)]`` per entry. With ``fsync`` the file
    is flushed to stable storage before returning; the checksums are computed while the flush runs.
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
        sums: List[int] = []
        if fsync:
            worker = threading.Thread(target=_checksum_all, args=(views, sums, algorithm), name="hp-ckpt-checksum")
            worker.start()
            os.fsync(f.fileno())
            worker.join()
        else:
            _checksum_all(views, sums, algorithm)
    if len(sums) != len(views):
        raise RuntimeError(f"write_safetensors({path}): computing the {algorithm} checksums failed")
    return [(base + off, v.nbytes, c) for off, v, c in zip(offsets, views, sums)]


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


def header_checksum(path: str, algorithm: str = DEFAULT_ALGORITHM) -> int:
    """The checksum of a safetensors file's 8-byte length and JSON header (what the chunk checksums do not
    cover: one flipped byte there leaves every tensor's bytes intact but the file unreadable by
    ``safetensors``). Never raises on damaged content: a damaged length is hashed with what follows it (up
    to the plausible maximum), so the value differs from the recorded one."""
    with open(path, "rb") as f:
        raw = f.read(HEADER_LEN_BYTES)
        n = struct.unpack("<Q", raw)[0] if len(raw) == HEADER_LEN_BYTES else 0
        raw += f.read(min(n, _MAX_HEADER))
    return checksum_function(algorithm)(raw)


def read_range_into(path: str, offset: int, out: Any, checksum: Optional[int] = None, what: str = "",
                    algorithm: str = DEFAULT_ALGORITHM) -> None:
    """Read ``len(out)`` bytes at ``offset`` of ``path`` into the writable buffer ``out`` (e.g. a tensor's own
    memory) and verify their checksum when given.

    A missing file, a short read (truncated file) or a checksum mismatch raises ``CheckpointCorruptError``
    naming the file (and ``what``, e.g. the tensor and chunk).
    """
    view = memoryview(out).cast("B") if memoryview(out).nbytes else memoryview(bytearray())
    nbytes = view.nbytes
    got = 0
    try:
        with open(path, "rb", buffering=0) as f:
            f.seek(offset)
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
    if checksum is not None:
        found = checksum_function(algorithm)(view)
        if found != checksum:
            raise CheckpointCorruptError(path, f"checksum mismatch{_for(what)} ({algorithm}: stored {checksum:#010x}, "
                                               f"read {found:#010x})")


def read_range(path: str, offset: int, nbytes: int, checksum: Optional[int] = None, what: str = "",
               algorithm: str = DEFAULT_ALGORITHM) -> bytearray:
    """``nbytes`` at ``offset`` of ``path`` in a new buffer, checksum verified (see :func:`read_range_into`)."""
    buf = bytearray(nbytes)
    read_range_into(path, offset, buf, checksum, what, algorithm)
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
