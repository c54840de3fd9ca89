# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Every ``hp-agent ...`` line of the skills, commands and AGENTS.md runs as written.

The lines are extracted from the documents (tests/agent/skill_lines.py); each one is either run here, in
order, in a fixture clone (local commands) or against real repositories and the fake GitCode + Jenkins (git
and gate-doctor), or is a prose reference to a command (its ``--help`` must work), or belongs to the dist-op
flow that tests/agent/test_dist_op_dev.py runs with the documented lines. A new line in a document fails
:func:`test_every_documented_line_is_run` until it is given its run here.
"""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fakes import FakeForge  # noqa: E402
from fakes.gate import GateScenario  # noqa: E402
from fakes.gitrepos import git, make_repos  # noqa: E402
from hp_agent.cli import cli  # noqa: E402
from hp_agent.gate_doctor.clock import Clock  # noqa: E402

from .conftest import REPO, _git_env  # noqa: E402
from .skill_lines import documented_lines, instance_of  # noqa: E402

TOKEN = "s3cr3t-t0ken-value"
OK, FINDINGS, REFUSED = {0}, {0, 1}, {2}
REFERENCES = ["hp-agent", "hp-agent git", "hp-agent gate-doctor", "hp-agent gate-doctor watch", "hp-agent dist-op dev",
              "hp-agent dist-op analyze"]
DIST_OP_FLOW = ["hp-agent dist-op analyze OP [OP...]", "hp-agent dist-op status",
                "hp-agent dist-op set plans/<op>.md KEY=VALUE", "hp-agent dist-op confirm plans/<op>.md",
                "hp-agent dist-op dev plans/<op>.md", "hp-agent dist-op dev plans/<op>.md --continue",
                "hp-agent dist-op verify OP", "hp-agent check plans"]
SHELL = json.dumps({"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": "ls"}})
STOP = json.dumps({"hook_event_name": "stop", "conversation_id": "c", "loop_count": 0, "status": "completed"})


def _edit(path: str) -> str:
    return json.dumps({"hook_event_name": "PostToolUse", "tool_name": "Edit", "tool_input": {"file_path": path}})


# (documented line, argv as run, stdin, exit codes allowed, something the output must show) - in run order
LOCAL = [
    ("hp-agent check", ["check"], None, OK, "assets: 0 finding(s)"),
    ("hp-agent catalog check", ["catalog", "check"], None, OK, "0 mismatch"),
    ("hp-agent catalog render", ["catalog", "render"], None, OK, "## Skills"),
    ("hp-agent sync", ["sync"], None, OK, "sync:"),
    ("hp-agent rules --for hyper_parallel/core/placement.py", ["rules", "--for", "hyper_parallel/core/placement.py"],
     None, OK, "distributed-invariants"),
    ("hp-agent rules --for hyper_parallel/core/ops/", ["rules", "--for", "hyper_parallel/core/ops/"], None, OK,
     "op-development"),
    ("hp-agent rules --for PATH", ["rules", "--for", "tests/ut/test_tiny.py"], None, OK, "testing"),
    ("hp-agent rules show distributed-invariants", ["rules", "show", "distributed-invariants"], None, OK, "#"),
    ("hp-agent rules show testing", ["rules", "show", "testing"], None, OK, "#"),
    ("hp-agent rules show op-development", ["rules", "show", "op-development"], None, OK, "#"),
    ("hp-agent rules show NAME", ["rules", "show", "code-style"], None, OK, "#"),
    ("hp-agent install", ["install"], None, OK, "commit-msg"),
    ("hp-agent check op-registry", ["check", "op-registry"], None, OK, "op-registry"),
    ("hp-agent gate list", ["gate", "list"], None, OK, "ut"),
    ("hp-agent gate run --stage ut", ["gate", "run", "--stage", "ut"], None, OK, "PASSED"),
    ("hp-agent gate run --stage NAME", ["gate", "run", "--stage", "tiny-check"], None, OK, "PASSED"),
    ("hp-agent gate run", ["gate", "run"], None, OK, "PASSED"),
    ("hp-agent gate run --changed", ["gate", "run", "--changed"], None, OK, "PASSED"),
    ("hp-agent gate-doctor diagnose local --report .gate/last.json",
     ["gate-doctor", "diagnose", "local", "--report", ".gate/last.json"], None, OK, "verdict=passed"),
    ("hp-agent gate-doctor watch local --local", ["gate-doctor", "watch", "local", "--local"], None, OK,
     "local: passed"),
    ("hp-agent hook before-shell", ["hook", "before-shell"], SHELL, OK, ""),
    ("hp-agent hook after-write", ["hook", "after-write"], "EDIT", OK, ""),
    ("hp-agent hook after-turn", ["hook", "after-turn"], STOP, OK, "{}"),
    ('hp-agent check commit-msg -m "<message>"', ["check", "commit-msg", "-m", "docs(readme): explain the gate"],
     None, OK, "commit message OK"),
    ('hp-agent check commit-msg -m "..."', ["check", "commit-msg", "-m", "fix(mesh): handle size-1 dims"], None, OK,
     "commit message OK"),
    ("CHANGE", [], None, OK, ""),
    ("hp-agent check changed", ["check", "changed"], None, FINDINGS, "README.md"),
    ("hp-agent check changed --json", ["check", "changed", "--json"], None, FINDINGS, "README.md"),
    ("hp-agent git commit --dry-run [PATH...]", ["git", "commit", "--dry-run", "README.md"], None, OK, "README.md"),
    ("hp-agent git commit", ["git", "commit"], None, REFUSED, "nothing staged"),
    ("hp-agent git commit --dry-run", ["git", "commit", "--dry-run"], None, REFUSED, "name the paths"),
    ('hp-agent git commit -m "<confirmed message>" [PATH...]', ["git", "commit", "-m", "docs(readme): the gate",
                                                                "README.md"], None, OK, "committed"),
    ("CHANGE", [], None, OK, ""),
    ('hp-agent git commit -m "<their message>" [PATH...]', ["git", "commit", "-m", "docs(readme): more", "README.md"],
     None, OK, "committed"),
    ("CHANGE", [], None, OK, ""),
    ("hp-agent git commit --yes [PATH...]", ["git", "commit", "--yes", "README.md"], None, OK, "committed"),
    ("hp-agent doctor", ["doctor"], None, FINDINGS, "claude"),
]

FORGE = [
    ("COMMITS", [], OK, ""),
    ("hp-agent git pr --dry-run", ["git", "pr", "--dry-run"], OK, "Fixes #12"),
    ("hp-agent git pr", ["git", "pr"], OK, "opened PR #1"),
    ("hp-agent git status N", ["git", "status", "1"], OK, "PR #1"),
    ("hp-agent git update N", ["git", "update", "1"], OK, "updated PR #1"),
    ("hp-agent git update N [--refresh-body]", ["git", "update", "1", "--refresh-body"], OK, "updated PR #1"),
    ("COMMITS", [], OK, ""),
    ("hp-agent git squash [--push]", ["git", "squash"], OK, "squashed"),
    ("COMMITS", [], OK, ""),
    ("hp-agent git squash [--push]", ["git", "squash", "--push"], OK, "pushed"),
    ("hp-agent git rebase [--push]", ["git", "rebase"], OK, "rebased"),
    ("hp-agent git rebase [--push]", ["git", "rebase", "--push"], OK, "pushed"),
    ("COMMITS", [], OK, ""),
    ("hp-agent git pr --squash", ["git", "pr", "--squash"], OK, "opened PR #2"),
    ("hp-agent gate-doctor watch N --json", ["gate-doctor", "watch", "2", "--json"], OK, '"status": "passed"'),
    ("hp-agent gate-doctor report N", ["gate-doctor", "report", "2"], OK, "PR 2: passed"),
    ("hp-agent gate-doctor diagnose N --json", ["gate-doctor", "diagnose", "2", "--json"], OK, '"green": true'),
]

HEADER = "# Copyright 2026 The hyper-parallel Authors. All rights reserved.\n# SPDX-License-Identifier: Apache-2.0\n"
STAGES = """stages:
  - name: ut
    run: ["{python}", "-c", "print('1 passed in 0.01s')"]
    parser: pytest
  - name: tiny-check
    run: ["{hp_agent}", "check", "commit-msg", "-m", "chore(ci): tiny"]
    parser: findings
"""


def _run(args: list[str], cwd: Path, stdin: str | None = None, env: dict | None = None):
    import os  # pylint: disable=import-outside-toplevel
    old = os.getcwd()
    os.chdir(cwd)
    try:
        return CliRunner().invoke(cli, args, input=stdin, env=env, catch_exceptions=False)
    finally:
        os.chdir(old)


def test_every_documented_line_is_run():
    run_here = {line for line, *_ in LOCAL} | {line for line, *_ in FORGE}
    known = run_here | set(REFERENCES) | set(DIST_OP_FLOW)
    lines = documented_lines()
    missing = {line: where for line, where in lines.items() if line not in known}
    assert not missing, f"documented hp-agent lines without a run in this test: {missing}"
    assert len(lines) >= 50


@pytest.mark.parametrize("line", REFERENCES)
def test_references_name_real_commands(line):
    res = CliRunner().invoke(cli, [*line.split()[1:], "--help"])
    assert res.exit_code == 0 and "Usage:" in res.output


def _clone(tmp: Path) -> Path:
    root = tmp / "clone"
    root.mkdir()
    for name in (".agent", ".claude", ".codex", ".cursor", ".gemini"):
        shutil.copytree(REPO / name, root / name)
    for name in ("AGENTS.md", "CLAUDE.md", "GEMINI.md", ".gitignore"):
        shutil.copy2(REPO / name, root / name)
    shutil.copytree(REPO / ".github", root / ".github")
    files = {"ci/stages.yaml": STAGES, "README.md": "# fixture\n",
             "tests/ut/test_tiny.py": HEADER + '"""Tiny."""\n\n\ndef test_ok():\n    assert 1 + 1 == 2\n',
             "tests/st/test_tiny_st.py": HEADER + '"""Tiny ST."""\n',
             "hyper_parallel/core/placement.py": HEADER + '"""Placement."""\n',
             "hyper_parallel/core/ops/__init__.py": HEADER + '"""Ops."""\n',
             "hyper_parallel/platform/__init__.py": HEADER + '"""Platform."""\n',
             "hyper_parallel/fsdp/_torch/__init__.py": HEADER + '"""FSDP, torch half."""\n',
             "hyper_parallel/fsdp/_mindspore/__init__.py": HEADER + '"""FSDP, MindSpore half."""\n',
             "tools/hp_agent/__init__.py": HEADER + '"""The agent layer (fixture)."""\n'}
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    for args in (("init", "-q", "-b", "main"), ("add", "-A"), ("commit", "-q", "-m", "chore(repo): seed")):
        git(root, *args)
    return root


def test_local_lines_run_as_written(tmp_path, monkeypatch):
    for key, value in _git_env().items():
        if key.startswith("GIT_"):
            monkeypatch.setenv(key, value)
    monkeypatch.delenv("HP_AGENT_REPO", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("HP_AGENT_PYTHON", sys.executable)
    root = _clone(tmp_path)
    changes = 0
    for line, argv, stdin, codes, shows in LOCAL:
        if line == "CHANGE":
            changes += 1
            (root / "README.md").write_text(f"# fixture\n\nchange {changes}\n", encoding="utf-8")
            continue
        assert instance_of(line, argv), line
        stdin = _edit(str(root / "README.md")) if stdin == "EDIT" else stdin
        res = _run(argv, root, stdin)
        assert res.exit_code in codes, (line, res.exit_code, res.output[-2000:])
        assert shows in res.output, (line, res.output[-2000:])


def test_git_and_gate_doctor_lines_run_as_written(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    for key, value in {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"), "GIT_CONFIG_NOSYSTEM": "1"}.items():
        monkeypatch.setenv(key, value)
    for var in ("HP_AGENT_CODEHOST_API", "HP_AGENT_CODEHOST_TOKEN", "HP_AGENT_PROVIDER", "HP_AGENT_REPO"):
        monkeypatch.delenv(var, raising=False)
    repos = make_repos(tmp_path)
    with FakeForge(Clock(), token=TOKEN) as forge:
        forge.scenario = GateScenario(["pass"], check_delay=0, build_time=0)
        env = {"HP_AGENT_CODEHOST_API": forge.api, "HP_AGENT_CODEHOST_TOKEN": TOKEN, "HP_AGENT_PROVIDER": "gitcode",
               "HP_AGENT_JENKINS_URL": forge.jenkins, "HP_AGENT_JENKINS_JOB": "hyper-parallel-gate",
               "HP_AGENT_TIME_SCALE": "0.0001"}
        batch = 0
        for line, argv, codes, shows in FORGE:
            if line == "COMMITS":
                for name in ("a", "b"):
                    batch += 1
                    repos.write(f"hyper_parallel/core/{name}{batch}.py", f"V{batch} = 1\n")
                    message = f"feat(core): add {name}{batch}" + ("\n\nFixes #12" if name == "b" else "")
                    repos.commit(message, f"hyper_parallel/core/{name}{batch}.py")
                continue
            assert instance_of(line, argv), line
            res = _run(argv, repos.work, env=env)
            assert res.exit_code in codes, (line, res.exit_code, res.output[-2000:])
            assert shows in res.output, (line, res.output[-2000:])
    assert git(repos.work, "rev-parse", "HEAD") == repos.remote_sha(repos.fork, "topic")
