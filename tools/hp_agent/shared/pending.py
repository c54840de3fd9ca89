# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Findings kept for later: assistants whose after-edit hook cannot reach the model (Cursor's
``afterFileEdit`` is observe-only) get them at the end of the turn instead.

Stored per conversation in ``<git dir>/hp-agent/pending/<assistant>-<conversation>.json`` (the work
tree's own git dir, so worktrees do not mix), written atomically; reading takes and clears them.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path


def git_dir(start: str | None) -> Path | None:
    """The git directory of the work tree holding ``start`` (a linked work tree's ``.git`` file is followed)."""
    here = Path(start or ".").resolve()
    for folder in (here, *here.parents):
        dot = folder / ".git"
        if dot.is_dir():
            return dot
        if dot.is_file():
            text = dot.read_text(encoding="utf-8", errors="replace").strip()
            if text.startswith("gitdir:"):
                target = Path(text.split(":", 1)[1].strip())
                return target if target.is_absolute() else (folder / target).resolve()
    return None


def _store(start: str | None, assistant: str, conversation: str) -> Path | None:
    base = git_dir(start)
    if base is None:
        return None
    safe = re.sub(r"[^\w.-]", "_", conversation or "default")[:120]
    return base / "hp-agent" / "pending" / f"{assistant}-{safe}.json"


def add(start: str | None, assistant: str, conversation: str, text: str) -> bool:
    """Keep ``text`` for the conversation; False when ``start`` is not in a git work tree."""
    path = _store(start, assistant, conversation)
    if path is None:
        return False
    items = _read(path)
    if text not in items:
        items.append(text)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(items, ensure_ascii=False), encoding="utf-8")
    os.replace(tmp, path)
    return True


def take(start: str | None, assistant: str, conversation: str) -> list[str]:
    """The kept texts of the conversation, oldest first; the store is emptied."""
    path = _store(start, assistant, conversation)
    if path is None or not path.is_file():
        return []
    items = _read(path)
    path.unlink()
    return items


def _read(path: Path) -> list[str]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return []
    return [str(x) for x in data] if isinstance(data, list) else []
