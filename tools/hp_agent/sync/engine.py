# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Writing the generated files and checking them for drift."""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path

from hp_agent.assets import load_assets
from hp_agent.checks.findings import Finding
from hp_agent.sync.targets import AGENTS_BEGIN, AGENTS_END, agents_block, expected_files, stale_files

AGENTS_FILE = "AGENTS.md"


@dataclass
class SyncResult:
    """Files written, removed, unchanged; drift findings (check mode)."""

    written: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    unchanged: int = 0
    drift: list[Finding] = field(default_factory=list)


def _replace_block(text: str, block: str) -> str | None:
    start, end = text.find(AGENTS_BEGIN), text.find(AGENTS_END)
    if start < 0 or end < start:
        return None
    return text[:start] + block + text[end + len(AGENTS_END):]


def _first_diff(old: str, new: str) -> int:
    for number, (a, b) in enumerate(zip(old.splitlines(), new.splitlines()), start=1):
        if a != b:
            return number
    return min(len(old.splitlines()), len(new.splitlines())) + 1


def _expected_with_agents(root: Path) -> dict[str, str]:
    assets = load_assets(root)
    files = expected_files(assets)
    agents = root / AGENTS_FILE
    if agents.is_file():
        current = agents.read_text(encoding="utf-8")
        updated = _replace_block(current, agents_block(assets))
        if updated is not None:
            files[AGENTS_FILE] = updated
    return files


def sync(root: Path, check: bool = False) -> SyncResult:
    """Generate (or, with ``check``, compare) every assistant file; AGENTS.md needs its rules markers."""
    res = SyncResult()
    files = _expected_with_agents(root)
    if (root / AGENTS_FILE).is_file() and AGENTS_FILE not in files:
        res.drift.append(Finding(AGENTS_FILE, None, "sync-agents-markers",
                                 f"AGENTS.md has no {AGENTS_BEGIN} ... {AGENTS_END} block for the rules"))
    for rel, text in sorted(files.items()):
        path = root / rel
        current = path.read_text(encoding="utf-8") if path.is_file() else None
        if current == text:
            res.unchanged += 1
            continue
        if check:
            if current is None:
                res.drift.append(Finding(rel, None, "sync-missing", "generated file is missing; run `hp-agent sync`"))
            else:
                res.drift.append(Finding(rel, _first_diff(current, text), "sync-drift",
                                         "differs from what .agent/ generates (edited by hand?); run `hp-agent sync`"))
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        res.written.append(rel)
    for rel in stale_files(root, files):
        if check:
            res.drift.append(Finding(rel, None, "sync-stale",
                                     "generated file has no source any more; run `hp-agent sync`"))
        else:
            (root / rel).unlink()
            parent = (root / rel).parent
            if parent != root and not any(parent.iterdir()):
                parent.rmdir()  # e.g. the folder of a removed skill
            res.removed.append(rel)
    return res


def diff(root: Path) -> str:
    """A unified diff between the files on disk and what sync would write."""
    chunks = []
    for rel, text in sorted(_expected_with_agents(root).items()):
        path = root / rel
        current = path.read_text(encoding="utf-8") if path.is_file() else ""
        if current != text:
            chunks.extend(difflib.unified_diff(current.splitlines(keepends=True), text.splitlines(keepends=True),
                                               fromfile=f"a/{rel}", tofile=f"b/{rel}"))
    return "".join(chunks)
