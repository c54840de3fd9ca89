# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Reading ``metadata.json`` and checking a checkpoint folder against its manifest (pure Python).

The manifest (``files`` in ``metadata.json``) records every data and objects file with its size; a
missing or truncated file, or a safetensors file whose header (length + JSON) differs from its recorded
checksum (``headers``), is found before any tensor is read, with an error that names it. Chunk contents are
verified by their checksums when read (``safetensors_io.read_range``).
"""
from __future__ import annotations

import os
from typing import List

from hyper_parallel.checkpoint.format import METADATA_FILE, CheckpointCorruptError, CheckpointError, CheckpointMetadata
from hyper_parallel.checkpoint.safetensors_io import header_checksum

__all__ = ["read_metadata", "manifest_problems", "record_headers"]


def manifest_problems(folder: str, md: CheckpointMetadata) -> List[CheckpointCorruptError]:
    """The files of the manifest that are missing, whose size differs or whose safetensors header does not match
    its recorded checksum (one error per file)."""
    problems = []
    for name, size in md.files.items():
        path = os.path.join(folder, name)
        try:
            actual = os.path.getsize(path)
        except FileNotFoundError:
            problems.append(CheckpointCorruptError(path, "file is missing"))
            continue
        if actual != size:
            problems.append(CheckpointCorruptError(path, f"size {actual} bytes, the manifest records {size} "
                                                         "(truncated or overwritten)"))
            continue
        recorded = md.headers.get(name)
        if recorded is not None:
            found = header_checksum(path, md.checksum_algorithm)
            if found != recorded:
                problems.append(CheckpointCorruptError(path, f"safetensors header checksum mismatch "
                                                             f"({md.checksum_algorithm}: stored {recorded:#010x}, "
                                                             f"read {found:#010x}): the header was altered"))
    return problems


def record_headers(folder: str, md: CheckpointMetadata) -> None:
    """Fill ``md.headers`` with the header checksum of every ``*.safetensors`` file of the manifest (writers
    call it after the data files are written)."""
    for name in md.files:
        if name.endswith(".safetensors"):
            md.headers[name] = header_checksum(os.path.join(folder, name), md.checksum_algorithm)


def read_metadata(folder: str, check_files: bool = True) -> CheckpointMetadata:
    """Parse ``<folder>/metadata.json``; with ``check_files`` every file of the manifest must exist with its
    recorded size (the first problem raises ``CheckpointCorruptError`` naming the file)."""
    path = os.path.join(folder, METADATA_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise CheckpointError(f"{folder} is not a hyper-parallel checkpoint (no {METADATA_FILE})") from None
    md = CheckpointMetadata.loads(text, path)
    if check_files:
        problems = manifest_problems(folder, md)
        if problems:
            raise problems[0]
    return md
