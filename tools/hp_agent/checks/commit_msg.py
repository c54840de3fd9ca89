# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Commit message policy: Conventional Commits header and no third-party AI attribution.

The list of known assistants lives in ``data/ai_attribution.toml`` (data, not code; read with the standard
library's ``tomllib`` so the check runs without the repository's environment); see that file for the matching
rules. :func:`check_commit_message` is the single entry point used by the ``commit-msg`` git hook,
``hp-agent check commit-msg`` and autogit.
"""
from __future__ import annotations

import functools
import re
import tomllib
from pathlib import Path

TYPES = ("feat", "fix", "refactor", "perf", "test", "docs", "chore", "ci", "build", "style", "revert")
MAX_HEADER = 100
MAX_BODY_LINE = 100
REGISTRY_PATH = Path(__file__).with_name("data") / "ai_attribution.toml"

_HEADER_RE = re.compile(r"^(?P<type>[a-z]+)(?:\((?P<scope>[^()\s][^()]*)\))?(?P<bang>!)?: (?P<subject>\S.*)$")
_TRAILER_RE = re.compile(r"^(?P<key>[A-Za-z][A-Za-z0-9-]*)\s*:\s*(?P<value>.*)$")
_IDENTITY_RE = re.compile(r"^(?P<name>[^<]*?)\s*(?:<(?P<email>[^>]*)>)?\s*$")
_SCISSORS = "# ------------------------ >8 ------------------------"
# Headers git itself writes; accepted as-is (merge commits, autosquash markers).
_GIT_GENERATED = re.compile(r"^(Merge (branch|remote-tracking branch|pull request|tag|commit) |(fixup|squash|amend)! "
                            r"|Revert \")")


class _Agent:  # pylint: disable=too-few-public-methods
    """One registry entry (plain class: the before-shell hook loads this, ``dataclasses`` is slow to import)."""

    __slots__ = ("name", "names", "emails", "markers", "trailers", "examples")

    def __init__(self, name: str, names: list[re.Pattern], emails: list[re.Pattern],  # pylint: disable=too-many-arguments
                 markers: list[re.Pattern], trailers: set[str], examples: list[str]) -> None:
        self.name, self.names, self.emails, self.markers = name, names, emails, markers
        self.trailers, self.examples = trailers, examples


class AttributionRegistry:
    """The parsed registry: attribution trailer keys, agents (the generic entry first), human examples."""

    __slots__ = ("attribution_trailers", "agents", "human_examples")

    def __init__(self, attribution_trailers: set[str], agents: list[_Agent], human_examples: list[str]) -> None:
        self.attribution_trailers, self.agents, self.human_examples = attribution_trailers, agents, human_examples

    def examples(self) -> list[tuple[str, str]]:
        """Return ``(agent name, message line)`` for every example that must be rejected."""
        return [(a.name, ex) for a in self.agents for ex in a.examples]


def _compile(patterns: list[str], source: str) -> list[re.Pattern]:
    out = []
    for pat in patterns or []:
        try:
            out.append(re.compile(pat, re.IGNORECASE))
        except re.error as exc:
            raise ValueError(f"{REGISTRY_PATH}: bad regex {pat!r} in {source}: {exc}") from exc
    return out


def _agent_from(name: str, spec: dict) -> _Agent:
    return _Agent(name=name, names=_compile(spec.get("names", []), name),
                  emails=_compile(spec.get("emails", []), name), markers=_compile(spec.get("markers", []), name),
                  trailers={t.lower() for t in spec.get("trailers", [])}, examples=list(spec.get("examples", [])))


@functools.lru_cache(maxsize=4)
def load_registry(path: Path = REGISTRY_PATH) -> AttributionRegistry:
    """Load and validate the attribution registry at ``path`` (cached)."""
    data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict) or "agents" not in data:
        raise ValueError(f"{path}: expected a mapping with 'agents'")
    agents = [_agent_from("generic AI attribution", data.get("generic", {}))]
    for spec in data["agents"]:
        if "name" not in spec:
            raise ValueError(f"{path}: agent entry without 'name': {spec!r}")
        agents.append(_agent_from(spec["name"], spec))
    return AttributionRegistry(attribution_trailers={k.lower() for k in data.get("attribution_trailers", [])},
                               agents=agents, human_examples=list(data.get("human_examples", [])))


def clean_message(message: str) -> list[str]:
    """Return the message lines as git's default cleanup leaves them (comments, scissors, edge blanks gone)."""
    lines = []
    for line in message.splitlines():
        if line.startswith(_SCISSORS):
            break
        if line.startswith("#"):
            continue
        lines.append(line.rstrip())
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    return lines


def _trailer_block(lines: list[str]) -> set[int]:
    """Indexes of the lines in the final paragraph when every line there is a ``Key: value`` trailer."""
    if len(lines) < 3:
        return set()
    start = len(lines)
    while start > 1 and lines[start - 1].strip():
        start -= 1
    idx = range(start, len(lines))
    if start <= 1 or not all(_TRAILER_RE.match(lines[i]) and " " not in lines[i].split(":", 1)[0] for i in idx):
        return set()
    return set(idx)


def _identity_hits(agent: _Agent, value: str) -> bool:
    m = _IDENTITY_RE.match(value.strip())
    if not m:
        return False
    name, email = (m.group("name") or "").strip(), (m.group("email") or "").strip()
    return any(p.fullmatch(name) for p in agent.names if name) or any(p.fullmatch(email) for p in agent.emails if email)


def attribution_problems(lines: list[str], registry: AttributionRegistry | None = None) -> list[str]:
    """Return one problem per line that carries third-party AI attribution."""
    reg = registry or load_registry()
    problems = []
    for number, line in enumerate(lines, start=1):
        trailer = _TRAILER_RE.match(line.strip())
        key = trailer.group("key").lower() if trailer else ""
        for agent in reg.agents:
            why = None
            if trailer and key in agent.trailers:
                why = f"assistant session trailer '{trailer.group('key')}'"
            elif trailer and key in reg.attribution_trailers and _identity_hits(agent, trailer.group("value")):
                why = f"'{trailer.group('key')}' names an AI assistant"
            elif any(p.search(line) for p in agent.markers):
                why = "AI attribution marker"
            if why:
                problems.append(f"line {number}: {why} ({agent.name}): {line.strip()!r}; "
                                "commits here carry human authorship only, remove the line")
                break
    return problems


def _header_problems(header: str) -> list[str]:
    if _GIT_GENERATED.match(header):
        return []
    problems = []
    if len(header) > MAX_HEADER:
        problems.append(f"header is {len(header)} characters, the limit is {MAX_HEADER}")
    m = _HEADER_RE.match(header)
    if not m:
        problems.append(f"header {header!r} is not a Conventional Commit 'type(scope)!: subject' "
                        f"(types: {', '.join(TYPES)})")
        return problems
    if m.group("type") not in TYPES:
        problems.append(f"unknown type {m.group('type')!r}; use one of: {', '.join(TYPES)}")
    if m.group("subject").rstrip().endswith("."):
        problems.append("header ends with a period; drop it")
    return problems


def check_commit_message(message: str) -> list[str]:
    """Return the problems of a commit message (empty list: accepted).

    Rules: a Conventional Commits header ``type(scope)!: subject`` (types feat, fix, refactor, perf, test,
    docs, chore, ci, build, style, revert), at most 100 characters, no trailing period; a blank line between
    header and body; body lines at most 100 characters except trailer lines and lone URLs; and no
    third-party AI attribution (registry ``data/ai_attribution.toml``). Human ``Co-authored-by`` is allowed.
    """
    lines = clean_message(message)
    if not lines:
        return ["the commit message is empty"]
    problems = _header_problems(lines[0])
    if len(lines) > 1 and lines[1].strip():
        problems.append("line 2 must be blank (separate the header from the body)")
    trailers = _trailer_block(lines)
    for i, line in enumerate(lines[1:], start=1):
        if i in trailers or len(line) <= MAX_BODY_LINE or re.fullmatch(r"\s*\S+", line):
            continue
        problems.append(f"line {i + 1} is {len(line)} characters, the body limit is {MAX_BODY_LINE}")
    problems.extend(attribution_problems(lines))
    return problems
