# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Validation of skills, agents, commands, hooks and settings."""
from __future__ import annotations

import json
from pathlib import Path

from hp_agent.checks.assets import check_all_assets
from hp_agent.cli import get_cli

from .conftest import REPO, copy_agent_tree


def test_this_repository_assets_are_valid():
    assert check_all_assets(REPO, get_cli()) == []


def _rules(findings):
    return {(f.file, f.rule) for f in findings}


def test_bad_assets_are_reported(tmp_repo):
    root = Path(tmp_repo.working_tree_dir)
    copy_agent_tree(root)
    (root / "hyper_parallel/core/ops").mkdir(parents=True)  # the repo's rule globs need files
    for rel in ("hyper_parallel/core/ops/x.py", "hyper_parallel/platform/x.py", "tests/x.py",
                "tools/hp_agent/x.py"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("x\n")
    agent = root / ".agent"
    (agent / "skills/Bad_Name").mkdir()
    (agent / "skills/Bad_Name/SKILL.md").write_text("---\nname: Bad_Name\ndescription: x\n---\nno command\n")
    (agent / "skills/long").mkdir()
    (agent / "skills/long/SKILL.md").write_text(f"---\nname: long\ndescription: {'a' * 1100}\n---\nhp-agent x\n")
    (agent / "agents/cheap.md").write_text("---\nname: cheap\ndescription: d\ntools: [Read]\ntier: premium\n---\nx\n")
    (agent / "commands/raw.md").write_text("---\ndescription: d\nrun: make test\n---\nx\n")
    (agent / "hooks/after-write").chmod(0o644)
    settings = json.loads((agent / "settings.json").read_text())
    settings["hooks"]["on-idle"] = {"hook": ".agent/hooks/on-idle"}
    (agent / "settings.json").write_text(json.dumps(settings))
    got = _rules(check_all_assets(root, get_cli()))
    assert (".agent/skills/Bad_Name/SKILL.md", "skill-name") in got
    assert (".agent/skills/Bad_Name/SKILL.md", "skill-body") in got
    assert (".agent/skills/long/SKILL.md", "skill-description") in got
    assert (".agent/agents/cheap.md", "agent-tier") in got
    assert (".agent/commands/raw.md", "command-run") in got
    assert (".agent/hooks/after-write", "hook-executable") in got
    assert (".agent/settings.json", "settings-event") in got
    assert (".agent/settings.json", "settings-hook") in got


def test_command_run_must_resolve_in_the_cli():
    from hp_agent.checks.assets import resolve_cli
    assert resolve_cli("hp-agent gate run --changed", get_cli()) is None
    assert resolve_cli("hp-agent check changed --base main", get_cli()) is None
    assert resolve_cli("hp-agent git commit --dry-run", get_cli()) is None
    assert "no subcommand 'launch'" in resolve_cli("hp-agent gate launch", get_cli())
    assert "no option '--fast'" in resolve_cli("hp-agent gate run --fast", get_cli())
    assert "is a group" in resolve_cli("hp-agent gate", get_cli())
    assert "must start with" in resolve_cli("make test", get_cli())
    assert resolve_cli("hp-agent rules --for hyper_parallel/core/x.py", get_cli()) is None
    assert resolve_cli("hp-agent git", get_cli(), allow_group=True) is None


def test_cli_references_in_asset_text_must_resolve(tmp_repo, cli):
    root = Path(tmp_repo.working_tree_dir)
    copy_agent_tree(root)
    skill = root / ".agent" / "skills" / "debug" / "SKILL.md"
    skill.write_text(skill.read_text() + "\nThen run `hp-agent gate rerun --fast` and `hp-agent check style --fix X`.\n")
    findings = [f for f in check_all_assets(root, get_cli()) if f.rule == "asset-cli-ref"]
    assert len(findings) == 1 and findings[0].file == ".agent/skills/debug/SKILL.md"
    assert "no subcommand 'rerun'" in findings[0].message and findings[0].line == len(skill.read_text().splitlines())

    # `hp-agent check` resolves them in the CLI it runs under (handed down, not imported by the checker)
    proc = cli(["check", "--json"], cwd=root)
    refs = [f for f in json.loads(proc.stdout)["findings"] if f["rule"] == "asset-cli-ref"]
    assert proc.returncode == 1 and len(refs) == 1 and "no subcommand 'rerun'" in refs[0]["message"], proc.stdout


def test_malformed_front_matter_is_a_finding(tmp_repo):
    root = Path(tmp_repo.working_tree_dir)
    (root / ".agent/rules").mkdir(parents=True)
    (root / ".agent/rules/x.md").write_text("---\nname: [unclosed\n---\nx\n")
    findings = check_all_assets(root, get_cli())
    assert findings[0].rule == "asset-parse" and "x.md" in findings[0].message
