# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The ``hp-agent ...`` command lines that skills, commands and AGENTS.md tell an assistant to run.

:func:`documented_lines` extracts them (backquoted spans and the commands' ``run:`` lines);
:func:`instance_of` tells whether a concrete argv is an instance of a documented line (placeholders such as
``N``, ``NAME``, ``plans/<op>.md``, ``"<message>"`` filled, ``[--push]`` present or not); :func:`documented`
returns the argv of a documented line with its placeholders filled, failing when the docs no longer have it.
"""
from __future__ import annotations

import re
import shlex
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_SPAN = re.compile(r"`(hp-agent(?: [^`]*)?)`")
_RUN = re.compile(r"^run:\s*(hp-agent\b.*)$")
PLACEHOLDERS = {"N", "NAME", "PATH", "OP", "REF", "KEY=VALUE", "...", "plans/<op>.md"}


def sources() -> list[Path]:
    """The documents assistants follow: every skill, every command, AGENTS.md."""
    return [*sorted((REPO / ".agent" / "skills").glob("*/SKILL.md")), *sorted((REPO / ".agent" / "commands").glob("*.md")),
            REPO / "AGENTS.md"]


def documented_lines() -> dict[str, list[str]]:
    """Documented command line -> where it appears (``file:line``)."""
    found: dict[str, list[str]] = {}
    for path in sources():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            spans = _SPAN.findall(line)
            run = _RUN.match(line.strip())
            for text in spans + ([run.group(1).strip()] if run else []):
                found.setdefault(" ".join(text.split()), []).append(f"{path.relative_to(REPO)}:{number}")
    return found


def _is_placeholder(token: str) -> bool:
    return token in PLACEHOLDERS or (token.startswith("<") and token.endswith(">"))


def _match(doc: list[str], argv: list[str]) -> bool:
    if not doc:
        return not argv
    head, rest = doc[0], doc[1:]
    if head.startswith("[") and head.endswith("...]"):
        return _match(rest, argv) or (bool(argv) and _match(doc, argv[1:]))
    if head.startswith("[") and head.endswith("]"):
        inner = shlex.split(head[1:-1])
        return _match(rest, argv) or _match(inner + rest, argv)
    if not argv:
        return False
    if _is_placeholder(head) or ("<" in head and ">" in head):
        return bool(argv[0]) and _match(rest, argv[1:])
    return head == argv[0] and _match(rest, argv[1:])


def instance_of(documented_line: str, argv: list[str]) -> bool:
    """True when ``argv`` (without ``hp-agent``) is the documented line with its placeholders filled."""
    tokens = re.findall(r'\[[^\]]*\]|"[^"]*"|\S+', documented_line)
    doc = [t.strip('"') if t.startswith('"') else t for t in tokens]
    if doc[0] != "hp-agent":
        return False
    return _match(doc[1:], argv) or (argv[-1:] == ["--json"] and _match(doc[1:], argv[:-1]))  # any takes --json


def documented(line: str, *argv: str) -> list[str]:
    """``argv`` after checking that ``line`` is still documented and ``argv`` is an instance of it."""
    if line not in documented_lines():
        raise AssertionError(f"{line!r} is no longer in the skills/commands/AGENTS.md; update the test")
    if not instance_of(line, list(argv)):
        raise AssertionError(f"{list(argv)} is not an instance of the documented {line!r}")
    return list(argv)
