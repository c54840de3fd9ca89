# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Loading ``.agent/`` (the single source of every assistant-facing asset).

Layout::

    .agent/rules/<name>.md            front matter: name, description, paths (globs; none = always applies)
    .agent/skills/<name>/SKILL.md     Agent Skills format: name (= folder), description (<= 1024 chars)
    .agent/agents/<name>.md           name, description, tools, tier (fast | standard | deep)
    .agent/commands/<name>.md         description, command (the hp-agent subcommand that does the work)
    .agent/hooks/<event>              executables that call ``hp-agent hook <event>``
    .agent/settings.json              which hook runs on which event (assistant-neutral)
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

AGENT_DIR = ".agent"
_FRONT = re.compile(r"\A---[ \t]*\n(?P<meta>.*?)^---[ \t]*\n?", re.DOTALL | re.MULTILINE)
KINDS = ("rules", "skills", "agents", "commands", "hooks")


class AssetError(ValueError):
    """An asset file that cannot be parsed (bad front matter)."""


@dataclass
class Asset:
    """One asset: its kind, name, path relative to the repo root, front matter and body."""

    kind: str
    name: str
    path: str
    meta: dict = field(default_factory=dict)
    body: str = ""

    @property
    def description(self) -> str:
        """The asset's one-line description ('' when missing)."""
        return str(self.meta.get("description") or "").strip()


def split_front_matter(text: str, source: str) -> tuple[dict, str]:
    """Split ``---`` YAML front matter from a Markdown text; returns ``({}, text)`` when there is none."""
    m = _FRONT.match(text)
    if not m:
        return {}, text
    try:
        meta = yaml.safe_load(m.group("meta")) or {}
    except yaml.YAMLError as exc:
        raise AssetError(f"{source}: front matter is not valid YAML: {exc}") from exc
    if not isinstance(meta, dict):
        raise AssetError(f"{source}: front matter must be a mapping, got {type(meta).__name__}")
    return meta, text[m.end():]


def join_front_matter(meta: dict, body: str) -> str:
    """Render ``meta`` as YAML front matter followed by ``body``."""
    dumped = yaml.safe_dump(meta, sort_keys=False, allow_unicode=True, width=1000).strip()
    return f"---\n{dumped}\n---\n{body}"


def _load_md(kind: str, path: Path, root: Path, default_name: str) -> Asset:
    rel = path.relative_to(root).as_posix()
    meta, body = split_front_matter(path.read_text(encoding="utf-8"), rel)
    return Asset(kind=kind, name=str(meta.get("name") or default_name), path=rel, meta=meta, body=body)


@dataclass
class Assets:
    """Every asset under ``.agent/`` of one repository."""

    root: Path
    rules: list[Asset] = field(default_factory=list)
    skills: list[Asset] = field(default_factory=list)
    agents: list[Asset] = field(default_factory=list)
    commands: list[Asset] = field(default_factory=list)
    hooks: list[Asset] = field(default_factory=list)
    settings: dict = field(default_factory=dict)

    def by_kind(self, kind: str) -> list[Asset]:
        """Return the assets of ``kind`` (one of :data:`KINDS`)."""
        if kind not in KINDS:
            raise KeyError(f"unknown asset kind {kind!r}; expected one of {KINDS}")
        return getattr(self, kind)


def load_assets(root: Path) -> Assets:
    """Read ``root/.agent``; raises :class:`AssetError` on malformed files."""
    base = root / AGENT_DIR
    out = Assets(root=root)
    for path in sorted((base / "rules").glob("*.md")):
        out.rules.append(_load_md("rules", path, root, path.stem))
    for path in sorted((base / "skills").glob("*/SKILL.md")):
        out.skills.append(_load_md("skills", path, root, path.parent.name))
    for path in sorted((base / "agents").glob("*.md")):
        out.agents.append(_load_md("agents", path, root, path.stem))
    for path in sorted((base / "commands").glob("*.md")):
        out.commands.append(_load_md("commands", path, root, path.stem))
    for path in sorted((base / "hooks").glob("*")):
        if path.is_file() and not path.name.startswith("."):
            out.hooks.append(Asset(kind="hooks", name=path.name, path=path.relative_to(root).as_posix(),
                                   body=path.read_text(encoding="utf-8")))
    settings = base / "settings.json"
    if settings.exists():
        try:
            out.settings = json.loads(settings.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise AssetError(f"{AGENT_DIR}/settings.json: invalid JSON: {exc}") from exc
    for hook in out.hooks:
        spec = (out.settings.get("hooks") or {}).get(hook.name) or {}
        hook.meta = {"description": spec.get("description", "")} if isinstance(spec, dict) else {}
    return out
