# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""What ``hp-agent sync`` generates from ``.agent/``: each assistant's module adds its files (see
:mod:`hp_agent.assistants`); the shapes they share live in :mod:`hp_agent.shared.generated` (re-exported
here), this module collects the files.

* Markdown outputs carry a "generated from" comment and are owned whole.
* JSON settings cannot carry a comment and may hold a team's own keys, so they are *merged*: sync owns
  only the keys it writes (and, inside lists, the entries that point at this repository's hooks), keeps
  every other key, and ``sync --check`` reports drift only in what it owns. Each tool directory with a
  JSON file gets a ``GENERATED.md`` manifest naming its generated files, their sources and owned keys.
* ``AGENTS.md`` (read by Codex, OpenCode and most assistants): sync maintains the block between the
  ``hp-agent:rules`` markers.
"""
from __future__ import annotations

import json
from pathlib import Path

from hp_agent.assets import Assets
from hp_agent.assistants.base import hook_command, hook_events  # noqa: F401  pylint: disable=unused-import
from hp_agent.shared.generated import (  # noqa: F401  pylint: disable=unused-import  # re-exported
    AGENTS_BEGIN, AGENTS_END, MARKER, SHIM, Generated, Output, always_rules, marker, render, scoped_rules, with_marker)
from hp_agent.rules import rule_globs  # noqa: F401  pylint: disable=unused-import

AGENTS_BLOCK = """{{ begin }}
<!-- {{ marker_text }} from .agent/rules/. Do not edit this block: edit the rules and run `hp-agent sync`. -->

## Rule index

Always-apply rules are below; path-scoped rules apply to the files they name - print them for a path
with `hp-agent rules --for PATH` (or read the file).

| rule | applies to | file |
|---|---|---|
{% for r in rules %}
| {{ r.name }} | {{ ("`" ~ (globs(r) | join("`, `")) ~ "`") if globs(r) else "always" }} | `{{ r.path }}` |
{% endfor %}

{% for r in always %}
{{ r.body.strip() | replace("\\n# ", "\\n### ") | regex_h1 }}

{% endfor %}
{{ end }}"""

MANIFEST = """{{ marker }}
# Generated files

`hp-agent sync` writes these files from `.agent/`; `hp-agent sync --check` (part of the gate) fails when
they drift. JSON files cannot carry a comment, so this manifest records their source. In a JSON file sync
owns only the keys listed here: add your own keys and entries freely, sync keeps them.

| file | source | owned by sync |
|---|---|---|
{% for path, source, owned in files %}
| `{{ path }}` | `{{ source }}` | {{ owned }} |
{% endfor %}
"""


def agents_block(assets: Assets) -> str:
    """The generated rules block of AGENTS.md (between the hp-agent:rules markers)."""
    return render(AGENTS_BLOCK, begin=AGENTS_BEGIN, end=AGENTS_END, marker_text=MARKER, rules=assets.rules,
                  always=always_rules(assets))


def expected_files(assets: Assets) -> dict[str, Generated]:
    """Every generated file of every assistant, plus a manifest per tool directory holding a JSON file."""
    from hp_agent.assistants import all_assistants  # pylint: disable=import-outside-toplevel

    out: dict[str, Generated] = {}
    for assistant in all_assistants():
        assistant.generate(assets, out)
    tops = sorted({p.split("/")[0] for p, g in out.items() if isinstance(g.content, dict) and "/" in p})
    for top in tops:
        listed = sorted((p, g.source, g.owned_keys or "the whole file") for p, g in out.items()
                        if p.startswith(top + "/"))
        out[f"{top}/GENERATED.md"] = Generated(render(MANIFEST, marker=marker(".agent/"), files=listed), ".agent/")
    return out


def owned_dirs() -> tuple[str, ...]:
    """Directories whose marked Markdown files sync owns (a marked file no longer produced is stale)."""
    from hp_agent.assistants import all_assistants  # pylint: disable=import-outside-toplevel

    return tuple(d for a in all_assistants() for d in a.owned_dirs)


def stale_files(root: Path, expected: dict[str, object]) -> list[str]:
    """Generated (marked) files under the owned directories that sync no longer produces."""
    stale = []
    for top in owned_dirs():
        base = root / top
        for path in sorted(base.rglob("*")) if base.is_dir() else []:
            rel = path.relative_to(root).as_posix()
            if path.is_file() and rel not in expected and MARKER in path.read_text(encoding="utf-8",
                                                                                  errors="replace"):
                stale.append(rel)
    return stale


def dump_json(data: dict) -> str:
    """JSON as sync writes it (2-space indent, UTF-8, final newline)."""
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"
