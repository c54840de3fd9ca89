# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""`hp-agent check commit-msg | shell | changed | style` through the CLI."""
from __future__ import annotations

import json
from pathlib import Path

from hp_agent.license import license_header


def test_commit_msg_cli(tmp_repo, cli):
    root = Path(tmp_repo.working_tree_dir)
    ok = cli(["check", "commit-msg", "-m", "feat(core): add mesh"], cwd=root)
    assert ok.returncode == 0 and "OK" in ok.stdout
    bad = cli(["check", "commit-msg", "--json", "-m", "feat: x\n\nCo-authored-by: Claude <noreply@anthropic.com>"],
              cwd=root)
    data = json.loads(bad.stdout)
    assert bad.returncode == 1 and data["ok"] is False and "Claude" in data["problems"][0]
    msg = root / "MSG"
    msg.write_text("fix(x): y\n")
    assert cli(["check", "commit-msg", str(msg)], cwd=root).returncode == 0
    assert cli(["check", "commit-msg"], cwd=root).returncode == 2


def test_shell_cli(tmp_repo, cli):
    root = Path(tmp_repo.working_tree_dir)
    blocked = cli(["check", "shell", "--json", "git push -f origin main"], cwd=root)
    assert blocked.returncode == 2 and json.loads(blocked.stdout)["blocked"] is True
    assert cli(["check", "shell", "git status"], cwd=root).returncode == 0


def test_changed_reviews_branch_files_rules_and_commits(tmp_repo, cli):
    root = Path(tmp_repo.working_tree_dir)
    rules = root / ".agent" / "rules"
    rules.mkdir(parents=True)
    (rules / "py.md").write_text("---\nname: py\ndescription: python\npaths: ['**/*.py']\n---\nPy.\n")
    tmp_repo.git.add(".")
    tmp_repo.git.commit("-q", "-m", "chore(x): rules")
    tmp_repo.git.checkout("-q", "-b", "feature")
    (root / "lib.py").write_text(license_header() + '"""Lib."""\n\n\ndef run(x):\n    """Run."""\n    print(x)\n')
    tmp_repo.git.add("lib.py")
    tmp_repo.git.commit("-q", "--no-verify", "-m", "added lib.")
    (root / "new.py").write_text('"""New."""\n')  # untracked
    proc = cli(["check", "changed", "--json"], cwd=root)
    data = json.loads(proc.stdout)
    assert proc.returncode == 1
    assert data["files"] == {"lib.py": ["py"], "new.py": ["py"]}
    got = {(f["file"], f["line"], f["rule"]) for f in data["findings"]}
    assert ("lib.py", 6, "style-fixable") in got  # -> None can be added at the def line
    assert ("lib.py", 6, "missing-annotation") in got
    assert ("new.py", None, "style-fixable") in got  # header missing
    assert any(f.startswith("commit ") and r == "commit-msg" for f, _, r in got)
    text = cli(["check", "changed"], cwd=root).stdout
    assert "rules to review against" in text and "lib.py: py" in text
