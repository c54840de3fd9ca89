# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Locating the repository that hp-agent works on."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path


class NotARepositoryError(RuntimeError):
    """Raised when a path is not inside a git work tree."""


def repo_root(start: Path | None = None) -> Path:
    """Return the top-level directory of the git work tree that contains ``start`` (default: the cwd).

    ``HP_AGENT_REPO`` overrides the lookup (used by tests and CI). Raises :class:`NotARepositoryError`
    with the offending path when ``start`` is not inside a git work tree.
    """
    override = os.environ.get("HP_AGENT_REPO")
    if override and start is None:
        return Path(override).resolve()
    here = Path(start) if start is not None else Path.cwd()
    if here.is_file():
        here = here.parent
    if not here.exists():
        raise NotARepositoryError(f"{here}: path does not exist")
    try:
        out = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=here, check=True,
                             capture_output=True, text=True)
    except FileNotFoundError as exc:
        raise NotARepositoryError("git is not installed or not on PATH") from exc
    except subprocess.CalledProcessError as exc:
        raise NotARepositoryError(f"{here}: not inside a git repository ({exc.stderr.strip()})") from exc
    return Path(out.stdout.strip()).resolve()


def relative_to_repo(path: Path, root: Path) -> str:
    """Return ``path`` as a POSIX path relative to ``root`` (absolute or cwd-relative input accepted)."""
    p = Path(path)
    if not p.is_absolute():
        p = Path.cwd() / p
    try:
        return p.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return p.as_posix()
