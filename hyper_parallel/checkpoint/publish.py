# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Crash-safe publication of checkpoint folders and of the ``latest`` pointer (pure Python).

* A save writes into a hidden staging folder next to its destination, fsyncs every file and the folder,
  then publishes it with one ``rename``: a reader sees either the complete checkpoint or nothing.
* ``latest`` is replaced by writing a temporary file, fsyncing it and renaming it over the old one,
  only after the checkpoint it names is published.
* Interrupted saves leave only hidden staging folders, which :func:`remove_staging` deletes.
"""
from __future__ import annotations

import os
import shutil
import uuid
from typing import List, Optional

from hyper_parallel.checkpoint.format import METADATA_FILE, CheckpointError
from hyper_parallel.checkpoint.retention import LATEST_FILE, is_staging_name, parse_step_dir, staging_name
from hyper_parallel.checkpoint.safetensors_io import fsync_dir

__all__ = ["new_save_id", "staging_path", "publish_dir", "write_file_atomic", "read_latest", "write_latest",
           "remove_staging", "is_published", "list_published_steps"]


def new_save_id() -> str:
    """A fresh id for a save (hex)."""
    return uuid.uuid4().hex[:16]


def staging_path(final_path: str, save_id: str) -> str:
    """Where a save of ``final_path`` is written before publication."""
    final_path = os.path.abspath(final_path)
    parent, name = os.path.split(final_path.rstrip(os.sep))
    return os.path.join(parent, staging_name(name, save_id))


def publish_dir(staging: str, final_path: str) -> None:
    """Publish the (fully written and fsynced) folder ``staging`` as ``final_path`` atomically.

    An existing ``final_path`` (a checkpoint saved again to the same place) is first moved aside to a
    hidden ``.old-`` name and deleted after the rename, so a crash in between leaves a complete old copy.
    """
    final_path = os.path.abspath(final_path).rstrip(os.sep)
    parent, name = os.path.split(final_path)
    fsync_dir(staging)
    old = None
    if os.path.lexists(final_path):
        old = os.path.join(parent, f".{name}.old-{new_save_id()}")
        os.rename(final_path, old)
    os.rename(staging, final_path)
    fsync_dir(parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def write_file_atomic(path: str, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically and durably (temp file, fsync, rename, fsync folder)."""
    parent = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(parent, f".{os.path.basename(path)}.tmp-{new_save_id()}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(parent)


def read_latest(folder: str) -> Optional[str]:
    """The checkpoint name ``<folder>/latest`` points to, or None when there is no valid pointer."""
    path = os.path.join(folder, LATEST_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            name = f.read().strip()
    except FileNotFoundError:
        return None
    if not name or os.sep in name or name.startswith("."):
        return None
    return name


def write_latest(folder: str, name: str) -> None:
    """Point ``<folder>/latest`` at the published checkpoint ``name`` (which must exist)."""
    if not is_published(os.path.join(folder, name)):
        raise CheckpointError(f"write_latest: {os.path.join(folder, name)} is not a published checkpoint")
    write_file_atomic(os.path.join(folder, LATEST_FILE), (name + "\n").encode())


def is_published(path: str) -> bool:
    """True when ``path`` is a folder holding a ``metadata.json`` (only published folders have one)."""
    return os.path.isfile(os.path.join(path, METADATA_FILE))


def list_published_steps(folder: str) -> List[int]:
    """Steps of the published ``step-*`` checkpoints in ``folder`` (sorted)."""
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    steps = []
    for name in names:
        step = parse_step_dir(name)
        if step is not None and is_published(os.path.join(folder, name)):
            steps.append(step)
    return sorted(steps)


def remove_staging(folder: str) -> List[str]:
    """Delete the hidden staging/replaced folders left by interrupted saves in ``folder``; returns their names.

    Call it only when no save into ``folder`` is running (e.g. when a run starts).
    """
    removed = []
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return removed
    for name in names:
        if is_staging_name(name):
            path = os.path.join(folder, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.remove(path)
            removed.append(name)
    return sorted(removed)
