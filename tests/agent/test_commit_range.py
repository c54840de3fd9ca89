# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The `commit-msgs` gate stage: every commit between the merge base (or the floor, on main) and HEAD."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

from hp_agent.checks.commits import check_commits

from .conftest import REPO

LONG = "feat(core): " + "a very long subject " * 6


def _commit(root: Path, message: str) -> str:
    (root / "f.txt").write_text((root / "f.txt").read_text() + "x\n" if (root / "f.txt").exists() else "x\n")
    subprocess.run(["git", "add", "f.txt"], cwd=root, check=True)
    subprocess.run(["git", "commit", "-q", "-m", message], cwd=root, check=True)
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, check=True, capture_output=True,
                          text=True).stdout.strip()


def test_main_checks_after_the_floor_and_a_branch_after_its_merge_base(tmp_repo, cli):
    root = Path(tmp_repo.working_tree_dir)
    old_bad = _commit(root, LONG)  # history from before the policy: never rewritten
    floor = _commit(root, "ci(gate): check commit messages")
    assert check_commits(root, floor=floor)[0] == []
    proc = cli(["check", "commits", "--floor", floor, "--json"], cwd=root)
    assert proc.returncode == 0 and "0 commit(s) after floor" in json.loads(proc.stdout)["summary"]
    _commit(root, "fix(core): a good one")
    assert check_commits(root, floor=floor)[0] == []
    findings, summary = check_commits(root, floor=old_bad + "~1")
    assert len(findings) == 1 and findings[0].file == f"commit {old_bad[:12]}" and "100" in findings[0].message
    subprocess.run(["git", "checkout", "-q", "-b", "topic"], cwd=root, check=True)
    bad = _commit(root, "Updated things.")
    _commit(root, "test(core): fine")
    findings, summary = check_commits(root, base="main", floor=floor)
    assert [f.file for f in findings] == [f"commit {bad[:12]}"] * len(findings) and findings
    assert "2 commit(s) after merge base with main" in summary
    proc = cli(["check", "commits", "--floor", floor], cwd=root)
    assert proc.returncode == 1 and "Conventional Commit" in proc.stdout
    (root / "ci").mkdir()
    (root / "ci" / "commit_msg_allowlist.txt").write_text(f"# known\n{bad[:10]} landed before the hook existed\n")
    findings, summary = check_commits(root, base="main", floor=floor)
    assert findings == [] and "1 allow-listed" in summary


def test_a_missing_floor_is_a_usage_error(tmp_repo, cli):
    root = Path(tmp_repo.working_tree_dir)
    proc = cli(["check", "commits", "--floor", "0" * 40], cwd=root)
    assert proc.returncode == 2 and "not a commit in this clone" in proc.stderr


def test_this_repository_passes_its_own_stage():
    stage = next(s for s in yaml.safe_load((REPO / "ci" / "stages.yaml").read_text())["stages"]
                 if s["name"] == "commit-msgs")
    floor = stage["run"][stage["run"].index("--floor") + 1]
    findings, summary = check_commits(REPO, floor=floor)
    assert findings == [], summary
