# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Checksums of checkpoint bytes (pure Python): CRC-32C, hardware-accelerated, or zlib's CRC-32.

CRC-32C (Castagnoli, the checksum of iSCSI, ext4 and cloud object stores) runs at several GB/s with the
SSE4.2 / ARMv8 CRC instructions through the ``crc32c`` package, and releases the GIL on large buffers;
zlib's CRC-32 runs at about 1 GB/s. A checkpoint records the algorithm it used (``metadata.json``
``checksum_algorithm``), so any reader verifies with the same one.
"""
from __future__ import annotations

import zlib
from typing import Callable, Dict

from hyper_parallel.checkpoint.format import CheckpointError

__all__ = ["DEFAULT_ALGORITHM", "ALGORITHMS", "checksum_function"]

_BLOCK = 64 << 20


def _crc32c() -> Callable:
    try:
        import crc32c  # pylint: disable=import-outside-toplevel
    except ImportError:
        return None
    return crc32c.crc32c


_CRC32C = _crc32c()
#: algorithm name -> function(buffer, previous value) -> value (``None`` when its package is missing)
ALGORITHMS: Dict[str, Callable] = {"crc32c": _CRC32C, "crc32": zlib.crc32}
#: what new checkpoints use: CRC-32C when the ``crc32c`` package is installed, else CRC-32
DEFAULT_ALGORITHM = "crc32c" if _CRC32C is not None else "crc32"


def checksum_function(algorithm: str) -> Callable[[memoryview], int]:
    """``f(buffer) -> int`` for ``algorithm`` (large buffers in 64 MiB slices)."""
    fn = ALGORITHMS.get(algorithm, KeyError)
    if fn is KeyError:
        raise CheckpointError(f"unknown checksum algorithm {algorithm!r}: expected one of {sorted(ALGORITHMS)}")
    if fn is None:
        raise CheckpointError(f"this checkpoint uses the {algorithm} checksum: install the 'crc32c' package to read it")

    def run(buf) -> int:
        view = memoryview(buf).cast("B") if memoryview(buf).nbytes else memoryview(b"")
        value = 0
        for start in range(0, view.nbytes, _BLOCK):
            value = fn(view[start:start + _BLOCK], value)
        return value

    return run
