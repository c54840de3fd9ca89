# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""after-write and pre-commit judge an edit by the lines it changed, not by what the file already had."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

from hp_agent.checks.difflines import changed_lines, hunk_lines
from hp_agent.hooks.runner import run_assistant_hook
from hp_agent.install import install

LEGACY = ('def old(a, b):\n    return a + b   \n\n\n'
          'def keep(x: int) -> int:\n    """Keep."""\n    return x\n')


def _edit_payload(path: Path, root: Path) -> str:
    return json.dumps({"hook_event_name": "PostToolUse", "tool_name": "Edit", "cwd": str(root),
                       "tool_input": {"file_path": str(path), "old_string": "x", "new_string": "y"}})


def _legacy(tmp_repo) -> tuple[Path, Path]:
    root = Path(tmp_repo.working_tree_dir)
    path = root / "legacy.py"
    path.write_text(LEGACY)
    tmp_repo.index.add(["legacy.py"])
    tmp_repo.index.commit("chore(repo): legacy file")
    return root, path


def test_hunk_lines():
    diff = "@@ -3,0 +4,2 @@\n+a\n+b\n@@ -10 +12 @@\n-x\n+y\n@@ -20,3 +21,0 @@\n"
    assert hunk_lines(diff) == {4, 5, 12}


def test_an_edit_is_not_blocked_by_problems_the_file_already_had(tmp_repo):
    root, path = _legacy(tmp_repo)
    assert changed_lines(root, "legacy.py") == set()
    path.write_text(LEGACY.replace("return x\n", "return x + 1\n"))
    assert changed_lines(root, "legacy.py") == {7}
    answer = run_assistant_hook("after-write", _edit_payload(path, root), "claude")
    assert answer.exit_code == 0, answer.stderr
    text = path.read_text()
    assert "return a + b   \n" in text and not text.startswith("# Copyright")  # untouched lines stay as they were


def test_only_what_the_edit_introduced_is_reported_and_fixed(tmp_repo):
    root, path = _legacy(tmp_repo)
    path.write_text(LEGACY + "\n\ndef new(y):   \n    print(y)\n")
    answer = run_assistant_hook("after-write", _edit_payload(path, root), "claude")
    assert answer.exit_code == 2
    assert "legacy.py:10: [missing-docstring] public function new has no docstring" in answer.stderr
    assert "legacy.py:10: [missing-annotation] new: parameter(s) without annotation: y" in answer.stderr
    assert "old" not in answer.stderr and "missing-docstring] module" not in answer.stderr
    text = path.read_text()
    assert "def new(y) -> None:\n" in text and "return a + b   \n" in text


def test_a_new_file_is_checked_whole(tmp_repo):
    root = Path(tmp_repo.working_tree_dir)
    path = root / "fresh.py"
    path.write_text(LEGACY)
    answer = run_assistant_hook("after-write", _edit_payload(path, root), "claude")
    assert answer.exit_code == 2 and "fresh.py:1: [missing-docstring] module has no docstring" in answer.stderr
    assert path.read_text().startswith("# Copyright") and "return a + b\n" in path.read_text()


def test_pre_commit_judges_the_staged_change(tmp_repo):
    root, path = _legacy(tmp_repo)
    install(root, with_config=False)
    path.write_text(LEGACY.replace("return x\n", "return x + 1\n"))
    tmp_repo.git.add("legacy.py")
    ok = subprocess.run(["git", "commit", "-q", "-m", "fix(legacy): keep adds one"], cwd=root, capture_output=True,
                        text=True, check=False)
    assert ok.returncode == 0, ok.stderr  # the file has no header and trailing blanks, but not on changed lines
    path.write_text(path.read_text() + "Y = 2   \n")
    tmp_repo.git.add("legacy.py")
    bad = subprocess.run(["git", "commit", "-q", "-m", "fix(legacy): add Y"], cwd=root, capture_output=True,
                         text=True, check=False)
    assert bad.returncode != 0 and "trailing whitespace" in bad.stderr
