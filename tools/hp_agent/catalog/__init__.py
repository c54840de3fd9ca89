# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The catalog tables in ``AGENTS.md`` and their check against ``.agent/`` (both directions).

Each ``## Rules|Skills|Agents|Commands|Hooks`` section of AGENTS.md holds a Markdown table whose first
column is ``[name](path)``. Every asset file needs a row; every row must point at an existing asset of that
kind whose name matches.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import jinja2

from hp_agent.assets import KINDS, Assets, load_assets
from hp_agent.findings import Finding

CATALOG_FILE = "AGENTS.md"
_HEADING = re.compile(r"^##\s+(?P<title>.+?)\s*$")
_LINK = re.compile(r"^\[(?P<name>[^\]]+)\]\((?P<path>[^)\s]+)\)$")


@dataclass
class Row:
    """One catalog table row: kind, name, linked path, the line it is on."""

    kind: str
    name: str
    path: str
    line: int


def parse_catalog(text: str) -> tuple[list[Row], list[Finding]]:
    """Parse the catalog tables; rows whose first cell is not ``[name](path)`` are findings."""
    rows, problems, kind = [], [], None
    for number, line in enumerate(text.splitlines(), start=1):
        head = _HEADING.match(line)
        if head:
            title = head.group("title").lower()
            kind = title if title in KINDS else None
            continue
        if kind is None or not line.lstrip().startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not cells or set(cells[0]) <= set("-: ") or cells[0].lower() == "name":
            continue
        link = _LINK.match(cells[0])
        if not link:
            problems.append(Finding(CATALOG_FILE, number, "catalog-row",
                                    f"first cell {cells[0]!r} is not [name](path)"))
            continue
        rows.append(Row(kind, link.group("name"), link.group("path"), number))
    return rows, problems


def check_catalog(root: Path) -> list[Finding]:
    """Compare AGENTS.md tables with the files under ``.agent/``, both ways."""
    path = root / CATALOG_FILE
    if not path.is_file():
        return [Finding(CATALOG_FILE, None, "catalog-missing", "AGENTS.md not found")]
    rows, findings = parse_catalog(path.read_text(encoding="utf-8"))
    assets = load_assets(root)
    for kind in KINDS:
        by_path = {a.path: a for a in assets.by_kind(kind)}
        listed: dict[str, Row] = {}
        for row in (r for r in rows if r.kind == kind):
            rel = row.path
            if rel in listed:
                findings.append(Finding(CATALOG_FILE, row.line, "catalog-duplicate",
                                        f"{kind}: {rel} is listed twice (also line {listed[rel].line})"))
            listed.setdefault(rel, row)
            asset = by_path.get(rel)
            if asset is None:
                findings.append(Finding(CATALOG_FILE, row.line, "catalog-stale",
                                        f"{kind}: row {row.name!r} points at {rel}, which is not a {kind[:-1]} file"))
            elif asset.name != row.name:
                findings.append(Finding(CATALOG_FILE, row.line, "catalog-name",
                                        f"{kind}: row says {row.name!r}, {rel} is named {asset.name!r}"))
        for rel, asset in by_path.items():
            if rel not in listed:
                findings.append(Finding(rel, None, "catalog-unlisted",
                                        f"{kind[:-1]} {asset.name!r} has no row in the AGENTS.md "
                                        f"'## {kind.title()}' table"))
    return findings


_TABLES = jinja2.Environment(autoescape=False, trim_blocks=True, lstrip_blocks=True).from_string("""\
{% for kind, items in sections %}
## {{ kind.title() }}

| name | {{ extra[kind] }} | description |
|---|---|---|
{% for a in items %}
| [{{ a.name }}]({{ a.path }}) | {{ detail(kind, a) }} | {{ a.description or "-" }} |
{% endfor %}

{% endfor %}""")


def _detail(kind: str, asset) -> str:
    if kind == "rules":
        paths = asset.meta.get("paths")
        return "always" if not paths else ", ".join(f"`{p}`" for p in (paths if isinstance(paths, list) else [paths]))
    if kind == "agents":
        return str(asset.meta.get("tier", "-"))
    if kind == "commands":
        return f"`{asset.meta.get('run', '-')}`"
    if kind == "hooks":
        return f"`hp-agent hook {asset.name}`"
    return "skill"


def render_tables(assets: Assets) -> str:
    """Render the catalog tables for the current ``.agent/`` (to paste into AGENTS.md)."""
    extra = {"rules": "applies to", "skills": "kind", "agents": "tier", "commands": "runs", "hooks": "runs"}
    sections = [(k, assets.by_kind(k)) for k in KINDS]
    return _TABLES.render(sections=sections, extra=extra, detail=_detail)
