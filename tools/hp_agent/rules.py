# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Rules: which ``.agent/rules/*.md`` apply to a path, and validation of their front matter."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pathspec

from hp_agent.assets import Asset, load_assets
from hp_agent.findings import Finding


def rule_globs(rule: Asset) -> list[str]:
    """Return the rule's ``paths`` globs (a string or a list in front matter); empty = always applies."""
    paths = rule.meta.get("paths")
    if paths is None:
        return []
    if isinstance(paths, str):
        return [p.strip() for p in paths.split(",") if p.strip()]
    return [str(p) for p in paths]


def is_always(rule: Asset) -> bool:
    """True when the rule has no ``paths`` and so applies to every file."""
    return not rule_globs(rule)


def rule_matches(rule: Asset, rel_path: str) -> bool:
    """True when ``rel_path`` (POSIX, relative to the repo root) is in the rule's scope."""
    globs = rule_globs(rule)
    return not globs or pathspec.GitIgnoreSpec.from_lines(globs).match_file(rel_path)


def rules_for(root: Path, rel_path: str) -> list[Asset]:
    """Return the rules that apply to ``rel_path``: always-rules first, then path-scoped ones, by name.

    For a directory, the rules that apply to the files inside it.
    """
    probes = [rel_path]
    if (root / rel_path).is_dir():
        probes.append(rel_path.rstrip("/") + "/_")
    rules = [r for r in load_assets(root).rules if any(rule_matches(r, p) for p in probes)]
    return sorted(rules, key=lambda r: (not is_always(r), r.name))


def repo_files(root: Path) -> list[str]:
    """Tracked and untracked-but-not-ignored files of the repository (POSIX, relative)."""
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=root, check=True,
                         capture_output=True, text=True).stdout
    return [p for p in out.split("\0") if p]


def check_rules(root: Path, files: list[str] | None = None) -> list[Finding]:
    """Validate every rule: name and description present, name equals the file stem, every glob matches."""
    findings = []
    files = repo_files(root) if files is None else files
    for rule in load_assets(root).rules:
        for key in ("name", "description"):
            if not str(rule.meta.get(key) or "").strip():
                findings.append(Finding(rule.path, 1, "rule-front-matter", f"missing '{key}' in front matter"))
        if rule.meta.get("name") and rule.meta["name"] != Path(rule.path).stem:
            findings.append(Finding(rule.path, 1, "rule-front-matter",
                                    f"name {rule.meta['name']!r} differs from the file name {Path(rule.path).stem!r}"))
        for glob in rule_globs(rule):
            if not any(pathspec.GitIgnoreSpec.from_lines([glob]).match_file(f) for f in files):
                findings.append(Finding(rule.path, 1, "rule-glob", f"glob {glob!r} matches no file in the repository"))
        if not rule.body.strip():
            findings.append(Finding(rule.path, 1, "rule-body", "rule has no text"))
    return findings
