# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Rules: resolution for a path, validation, the CLI from any directory."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from hp_agent.rules import check_rules, rules_for

from .conftest import REPO


def _rule(root: Path, name: str, text: str) -> None:
    path = root / ".agent" / "rules" / f"{name}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _sample(root: Path) -> None:
    _rule(root, "always", "---\nname: always\ndescription: everywhere\n---\nBody A.\n")
    _rule(root, "py", "---\nname: py\ndescription: python\npaths: ['**/*.py']\n---\nBody P.\n")
    _rule(root, "core", "---\nname: core\ndescription: core\npaths:\n  - 'lib/core/**'\n  - 'docs/*.md'\n---\nC.\n")
    for rel in ("lib/core/a.py", "lib/other/b.py", "docs/x.md"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("x\n")


def test_resolution(tmp_repo):
    root = Path(tmp_repo.working_tree_dir)
    _sample(root)
    assert [r.name for r in rules_for(root, "lib/core/a.py")] == ["always", "core", "py"]
    assert [r.name for r in rules_for(root, "lib/other/b.py")] == ["always", "py"]
    assert [r.name for r in rules_for(root, "docs/x.md")] == ["always", "core"]
    assert [r.name for r in rules_for(root, "README.md")] == ["always"]
    assert [r.name for r in rules_for(root, "lib/core")] == ["always", "core"]  # a directory
    assert check_rules(root) == []


def test_glob_matching_nothing_and_missing_fields_are_findings(tmp_repo):
    root = Path(tmp_repo.working_tree_dir)
    _sample(root)
    _rule(root, "ghost", "---\nname: ghost\ndescription: d\npaths: ['nowhere/**']\n---\nG.\n")
    _rule(root, "anon", "---\npaths: ['**/*.py']\n---\nNo name.\n")
    _rule(root, "misnamed", "---\nname: other\ndescription: d\n---\nM.\n")
    got = {(f.file, f.rule, f.message) for f in check_rules(root)}
    assert (".agent/rules/ghost.md", "rule-glob", "glob 'nowhere/**' matches no file in the repository") in got
    assert (".agent/rules/anon.md", "rule-front-matter", "missing 'name' in front matter") in got
    assert (".agent/rules/anon.md", "rule-front-matter", "missing 'description' in front matter") in got
    assert any(f == ".agent/rules/misnamed.md" and "differs from the file name" in m for f, _, m in got)


def test_cli_rules_for_from_a_subdirectory(tmp_repo, cli):
    root = Path(tmp_repo.working_tree_dir)
    _sample(root)
    proc = cli(["rules", "--for", "a.py", "--json"], cwd=root / "lib" / "core")
    data = json.loads(proc.stdout)
    assert proc.returncode == 0 and data["path"] == "lib/core/a.py"
    assert [r["name"] for r in data["rules"]] == ["always", "core", "py"]
    names = cli(["rules", "--for", "docs/x.md", "--names"], cwd=root)
    assert names.stdout.split() == ["always", "core"]
    text = cli(["rules", "--for", "lib/other/b.py"], cwd=root).stdout
    assert "Body A." in text and "Body P." in text and "C." not in text


def test_cli_check_fails_on_a_bad_rule(tmp_repo, cli):
    root = Path(tmp_repo.working_tree_dir)
    _sample(root)
    assert cli(["check"], cwd=root).returncode == 0
    _rule(root, "ghost", "---\nname: ghost\ndescription: d\npaths: ['nowhere/**']\n---\nG.\n")
    proc = cli(["check", "--json"], cwd=root)
    assert proc.returncode == 1
    assert json.loads(proc.stdout)["findings"][0]["rule"] == "rule-glob"


def test_outside_a_repository_is_a_usage_error(tmp_path, cli):
    proc = cli(["rules", "--for", "x.py"], cwd=tmp_path)
    assert proc.returncode == 2 and "not inside a git repository" in proc.stderr


def test_this_repository_rules_resolve():
    assert "distributed-invariants" in [r.name for r in rules_for(REPO, "hyper_parallel/core/placement.py")]
    assert "testing" in [r.name for r in rules_for(REPO, "tests/ut/test_x.py")]
    assert check_rules(REPO) == []


@pytest.mark.parametrize("path", ["hyper_parallel/fsdp/_torch/param.py", "hyper_parallel/optim/_mindspore/x.py",
                                  "hyper_parallel/models/llama3/_mindspore/model.py", "hyper_parallel/core/spec.py"])
def test_backend_rules_cover_every_feature_backend_folder(path):
    """The new layout: DTensor invariants and dual-backend symmetry apply to each ``<feature>/_torch|_mindspore``."""
    names = [r.name for r in rules_for(REPO, path)]
    assert "distributed-invariants" in names
    assert ("dual-backend" in names) == ("/_torch/" in path or "/_mindspore/" in path)


def test_backend_rules_leave_backend_free_feature_code_alone():
    names = [r.name for r in rules_for(REPO, "hyper_parallel/fsdp/api.py")]
    assert "dual-backend" not in names and "distributed-invariants" not in names
