# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The AGENTS.md catalog vs .agent/ files, both directions."""
from __future__ import annotations

from pathlib import Path

from hp_agent.assets import load_assets
from hp_agent.catalog import check_catalog, render_tables

from .conftest import REPO, copy_agent_tree


def _setup(root: Path) -> None:
    copy_agent_tree(root)


def test_this_repository_catalog_is_complete():
    assert check_catalog(REPO) == []


def test_rendered_tables_pass_the_check(tmp_repo):
    root = Path(tmp_repo.working_tree_dir)
    _setup(root)
    (root / "AGENTS.md").write_text("# Agents\n\n" + render_tables(load_assets(root)))
    assert check_catalog(root) == []


def test_missing_row_and_stale_row_and_wrong_name(tmp_repo, cli):
    root = Path(tmp_repo.working_tree_dir)
    _setup(root)
    text = (root / "AGENTS.md").read_text()
    text = "\n".join(line for line in text.splitlines() if "(.agent/agents/planner.md)" not in line) + "\n"
    text = text.replace("## Skills\n\n| name | kind | description |\n|---|---|---|\n",
                        "## Skills\n\n| name | kind | description |\n|---|---|---|\n"
                        "| [ghost](.agent/skills/ghost/SKILL.md) | skill | gone |\n"
                        "| [wrongname](.agent/skills/debug/SKILL.md) | skill | x |\n")
    (root / "AGENTS.md").write_text(text)
    got = {(f.file, f.rule) for f in check_catalog(root)}
    assert (".agent/agents/planner.md", "catalog-unlisted") in got
    assert ("AGENTS.md", "catalog-stale") in got
    assert ("AGENTS.md", "catalog-name") in got
    proc = cli(["catalog", "check"], cwd=root)
    assert proc.returncode == 1 and "planner" in proc.stdout and "ghost" in proc.stdout


def test_new_asset_without_row_is_reported(tmp_repo):
    root = Path(tmp_repo.working_tree_dir)
    _setup(root)
    new = root / ".agent" / "skills" / "profile" / "SKILL.md"
    new.parent.mkdir(parents=True)
    new.write_text("---\nname: profile\ndescription: Profile things.\n---\nRun `hp-agent gate run`.\n")
    findings = check_catalog(root)
    assert [(f.file, f.rule) for f in findings] == [(".agent/skills/profile/SKILL.md", "catalog-unlisted")]


def test_malformed_row_and_missing_file(tmp_repo):
    root = Path(tmp_repo.working_tree_dir)
    assert check_catalog(root)[0].rule == "catalog-missing"
    (root / "AGENTS.md").write_text("## Rules\n\n| name | x |\n|---|---|\n| plain-name | y |\n")
    assert check_catalog(root)[0].rule == "catalog-row"
