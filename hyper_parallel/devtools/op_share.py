# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Share report: of the ops a baseline coverage report marks unsupported, how many pass now, and through what.

``python -m hyper_parallel.devtools.op_share --baseline OLD.md --report docs/op_coverage.md [--since REV]``
reads two reports written by :mod:`hyper_parallel.devtools.op_coverage` (the newer one must carry its section
"Registry entries per op", which every run writes) and classifies every op that was ``unsupported`` in the
baseline and passes every run now:

* ``generated`` — at least one registry entry it dispatched through comes from a file the ``hp-agent dist-op``
  pipeline writes (:data:`GENERATED_FILES`: ``generated.yaml``, ``mindspore_generated.yaml``, and
  ``pipeline.yaml``, its name before the rename), and no hand-written entry it used is new since ``REV``;
* ``hand-written`` — it used a hand-written entry (any other registry file) that was not registered at
  ``REV`` (a rule written for it by hand); without ``--since``, an op that used hand-written entries only;
* ``existing rules`` — (with ``--since``) only hand-written entries that were already registered at ``REV``
  (it passes because of a fix elsewhere, not a new rule);
* ``no entry`` — it passed without dispatching through any registry entry.

So "no hand-written code per op" is checked from what each op really dispatched, not assumed. The
``op_coverage`` command runs it directly after a coverage run with ``--baseline OLD.md [--since REV]``.
Pure Python (reads Markdown and, for ``--since``, ``git show``); no framework import.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Set

import yaml

__all__ = ["GENERATED_FILES", "ENTRIES_HEADING", "ShareReport", "read_status", "read_entries",
           "hand_written_names_at", "share", "render_share", "main"]

#: registry files written by the dist-op pipeline (``pipeline.yaml``: the name before the rename)
GENERATED_FILES = frozenset({"generated.yaml", "mindspore_generated.yaml", "pipeline.yaml"})
#: the heading of the coverage report's section listing, per op, the registry entries it dispatched through
ENTRIES_HEADING = "## Registry entries per op"
_ROW = re.compile(r"^\| `([^`]+)` \| (.*)\|\s*$")
_ENTRY = re.compile(r"^`([^`]+)` \(([^)]+)\)$")
_CLASSES = ("generated", "hand-written", "existing rules", "no entry")


def _cells(line: str) -> Optional[tuple]:
    m = _ROW.match(line)
    if m is None:
        return None
    return m.group(1), [c.strip() for c in re.split(r"(?<!\\)\|", m.group(2))]


def read_status(text: str) -> Dict[str, str]:
    """OpInfo name -> our status (``pass``, ``partial``, ``fail``, ``unsupported``, ``n/a``) from a coverage
    report's main table (the fifth column)."""
    out: Dict[str, str] = {}
    for line in text.split(ENTRIES_HEADING, 1)[0].splitlines():
        row = _cells(line)
        if row is not None and len(row[1]) >= 4 and row[1][3] in ("pass", "partial", "fail", "unsupported", "n/a"):
            out[row[0]] = row[1][3]
    return out


def read_entries(text: str) -> Optional[Dict[str, Dict[str, str]]]:
    """OpInfo name -> {registry entry name: its file name} from the section :data:`ENTRIES_HEADING`; None when
    the report has no such section (written before the section existed)."""
    if ENTRIES_HEADING not in text:
        return None
    out: Dict[str, Dict[str, str]] = {}
    for line in text.split(ENTRIES_HEADING, 1)[1].splitlines():
        row = _cells(line)
        if row is None:
            continue
        entries = {}
        for item in (row[1][0].split(", ") if row[1] and row[1][0] else []):
            m = _ENTRY.match(item.strip())
            if m is None:
                raise ValueError(f"op_share: {row[0]}: entry {item!r} is not written as `name` (file)")
            entries[m.group(1)] = m.group(2)
        out[row[0]] = entries
    return out


def hand_written_names_at(rev: str, repo: Path = Path(".")) -> Set[str]:
    """Op names registered in hand-written registry files (``*/ops/yaml/*.yaml`` other than
    :data:`GENERATED_FILES`) at git revision ``rev`` of ``repo``."""
    try:
        listing = subprocess.run(["git", "ls-tree", "-r", "--name-only", rev], cwd=repo, capture_output=True,
                                 text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError) as exc:
        raise ValueError(f"op_share: --since {rev!r}: cannot list the registry files of that revision: "
                         f"{getattr(exc, 'stderr', exc)}") from exc
    names: Set[str] = set()
    for path in listing:
        if "/ops/yaml/" not in path or not path.endswith(".yaml") or Path(path).name in GENERATED_FILES:
            continue
        body = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=repo, capture_output=True, text=True,
                              check=True).stdout
        data = yaml.safe_load(body) or {}
        names.update(str(k) for k in data if k != "__default__")
    return names


@dataclass
class ShareReport:
    """Ops unsupported in the baseline and what became of them."""

    baseline_unsupported: List[str]
    passing: Dict[str, str] = field(default_factory=dict)   # op -> class (see the module docstring)
    not_passing: Dict[str, str] = field(default_factory=dict)  # op -> status now (missing: not run)

    def count(self, cls: str) -> int:
        """Passing ops of class ``cls``."""
        return sum(1 for c in self.passing.values() if c == cls)


def _classify(entries: Dict[str, str], old_hand: Optional[Set[str]]) -> str:
    if not entries:
        return "no entry"
    generated = [n for n, f in entries.items() if f in GENERATED_FILES]
    hand = [n for n, f in entries.items() if f not in GENERATED_FILES]
    if old_hand is not None:
        if any(n not in old_hand for n in hand):
            return "hand-written"
        return "generated" if generated else "existing rules"
    return "generated" if generated else "hand-written"


def share(baseline: str, report: str, old_hand: Optional[Set[str]] = None) -> ShareReport:
    """Classify the ops ``baseline`` (report text) marks unsupported by ``report`` (report text with the
    entries section); ``old_hand``: hand-written op names registered at the baseline (``--since``)."""
    entries = read_entries(report)
    if entries is None:
        raise ValueError(f"op_share: the report has no section {ENTRIES_HEADING!r}; re-run op_coverage "
                         "(every run since the share report writes it)")
    before, now = read_status(baseline), read_status(report)
    if not before:
        raise ValueError("op_share: the baseline has no op rows (expected a docs/op_coverage.md report)")
    out = ShareReport(sorted(n for n, s in before.items() if s == "unsupported"))
    for name in out.baseline_unsupported:
        if now.get(name) == "pass":
            out.passing[name] = _classify(entries.get(name, {}), old_hand)
        else:
            out.not_passing[name] = now.get(name, "not run")
    return out


def render_share(rep: ShareReport) -> str:
    """The share report as Markdown (headline, counts per class, the non-generated ops by name)."""
    total = len(rep.baseline_unsupported)
    passing = len(rep.passing)
    pct = (lambda n: f"{100.0 * n / total:.1f} %") if total else (lambda n: "n/a")
    lines = [f"**Of {total} ops unsupported in the baseline, {passing} pass every run now ({pct(passing)}); "
             f"{rep.count('generated')} of them through registry entries written by the dist-op pipeline "
             f"({pct(rep.count('generated'))} of the baseline's unsupported ops).**", "",
             "| class | ops | names |", "|---|---|---|"]
    for cls in _CLASSES:
        names = sorted(n for n, c in rep.passing.items() if c == cls)
        shown = "" if cls == "generated" else ", ".join(f"`{n}`" for n in names)
        lines.append(f"| {cls} | {len(names)} | {shown} |")
    lines.append(f"| not passing | {len(rep.not_passing)} | "
                 + ", ".join(f"`{n}` ({s})" for n, s in sorted(rep.not_passing.items())) + " |")
    return "\n".join(lines) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Command line entry point; returns the exit status (2: bad input)."""
    parser = argparse.ArgumentParser(prog="python -m hyper_parallel.devtools.op_share",
                                     description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--baseline", required=True, help="the older coverage report (Markdown)")
    parser.add_argument("--report", default="docs/op_coverage.md", help="the newer report, with its entries section")
    parser.add_argument("--since", help="git revision of the baseline: hand-written entries new since then "
                                        "count as hand-written code")
    parser.add_argument("--out", help="also write the share report to this Markdown file")
    opts = parser.parse_args(argv)
    try:
        baseline = Path(opts.baseline).read_text(encoding="utf-8")
        report = Path(opts.report).read_text(encoding="utf-8")
        old = hand_written_names_at(opts.since) if opts.since else None
        text = render_share(share(baseline, report, old))
    except (OSError, ValueError) as exc:
        print(f"op_share: {exc}", file=sys.stderr)
        return 2
    print(text, end="")
    if opts.out:
        Path(opts.out).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
