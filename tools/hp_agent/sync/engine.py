# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Writing the generated files and checking them for drift (JSON settings: only the keys sync owns)."""
from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from pathlib import Path

from hp_agent.assets import load_assets
from hp_agent.findings import Finding
from hp_agent.sync.merge import merge
from hp_agent.sync.targets import (AGENTS_BEGIN, AGENTS_END, Generated, agents_block, dump_json, expected_files,
                                   stale_files)

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


def _expected_with_agents(root: Path) -> dict[str, Generated]:
    assets = load_assets(root)
    files = expected_files(assets)
    agents = root / AGENTS_FILE
    if agents.is_file():
        updated = _replace_block(agents.read_text(encoding="utf-8"), agents_block(assets))
        if updated is not None:
            files[AGENTS_FILE] = Generated(updated, ".agent/rules/")
    return files


class BadJson(ValueError):
    """A generated JSON file on disk is not valid JSON (it is left untouched)."""


def target_text(path: Path, gen: Generated) -> tuple[str | None, str]:
    """``(current text or None, the text sync wants)``; JSON settings are merged into the current file."""
    current = path.read_text(encoding="utf-8") if path.is_file() else None
    if not isinstance(gen.content, dict):
        return current, gen.content
    if current is None:
        return None, dump_json(gen.content)
    try:
        data = json.loads(current)
    except json.JSONDecodeError as exc:
        raise BadJson(f"not valid JSON ({exc}); fix or remove it, then run `hp-agent sync`") from exc
    merged = merge(data, gen.content, gen.owns or (lambda item: False))
    return current, (current if merged == data else dump_json(merged))


def _drift(rel: str, current: str | None, text: str, gen: Generated) -> Finding:
    if current is None:
        return Finding(rel, None, "sync-missing", "generated file is missing; run `hp-agent sync`")
    what = "the keys sync owns differ from" if isinstance(gen.content, dict) else "differs from"
    return Finding(rel, _first_diff(current, text), "sync-drift",
                   f"{what} what .agent/ generates (edited by hand?); run `hp-agent sync`")


def sync(root: Path, check: bool = False) -> SyncResult:
    """Generate (or, with ``check``, compare) every assistant file; AGENTS.md needs its rules markers."""
    res = SyncResult()
    files = _expected_with_agents(root)
    if (root / AGENTS_FILE).is_file() and AGENTS_FILE not in files:
        res.drift.append(Finding(AGENTS_FILE, None, "sync-agents-markers",
                                 f"AGENTS.md has no {AGENTS_BEGIN} ... {AGENTS_END} block for the rules"))
    for rel, gen in sorted(files.items()):
        path = root / rel
        try:
            current, text = target_text(path, gen)
        except BadJson as exc:
            res.drift.append(Finding(rel, None, "sync-bad-json", str(exc)))
            continue
        if current == text:
            res.unchanged += 1
            continue
        if check:
            res.drift.append(_drift(rel, current, text, gen))
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
    for rel, gen in sorted(_expected_with_agents(root).items()):
        try:
            current, text = target_text(root / rel, gen)
        except BadJson:
            continue
        if (current or "") != text:
            chunks.extend(difflib.unified_diff((current or "").splitlines(keepends=True),
                                               text.splitlines(keepends=True), fromfile=f"a/{rel}", tofile=f"b/{rel}"))
    return "".join(chunks)
