# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Each assistant's registered hook command, run exactly as its hooks file says, fed the payloads it sends.

Claude Code (.claude/settings.json), Codex (.codex/hooks.json), Gemini CLI (.gemini/settings.json), Cursor
(.cursor/hooks.json, including the ``stop`` hand-over of afterFileEdit findings); Copilot registers no file
here, so its wrapper is called directly.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hp_agent import assistants

from .conftest import REPO, _git_env

REGISTERED = ["claude", "codex", "gemini", "cursor"]
NO_DOC = "X = 1\n"


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A repository holding this repository's agent layer and generated assistant files, one commit."""
    root = tmp_path_factory.mktemp("protocols") / "proj"
    root.mkdir()
    for name in (".agent", ".claude", ".codex", ".cursor", ".gemini"):
        shutil.copytree(REPO / name, root / name)
    shutil.copytree(REPO / "tools" / "hp_agent", root / "tools" / "hp_agent",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (root / "tracked.txt").write_text("one\n")
    env = _git_env()
    for args in (("init", "-q", "-b", "feature"), ("add", "-A"), ("commit", "-q", "-m", "chore(repo): seed")):
        subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, env=env)
    return root


def _payload(name: str, event: str, root: Path, subject: str) -> dict:
    return assistants.get(name).probe_payload(event, root, subject)


def _run(name: str, event: str, root: Path, payload: dict) -> subprocess.CompletedProcess:
    assistant = assistants.get(name)
    command = assistant.registrations(root)[event] if name in REGISTERED else \
        f"{root}/.agent/hooks/{event} --assistant {name}"
    env = {**_git_env(), **assistant.probe_env(root), "HP_AGENT_PYTHON": sys.executable}
    return subprocess.run(["sh", "-c", command], input=json.dumps(payload), capture_output=True, text=True,
                          cwd=root, env=env, timeout=60, check=False)


def test_every_registered_assistant_registers_our_hooks(project):
    for name in REGISTERED:
        events = assistants.get(name).registrations(project)
        expected = {"after-write", "before-shell"} | ({"after-turn"} if name == "cursor" else set())
        assert set(events) == expected, (name, events)


@pytest.mark.parametrize("name", REGISTERED + ["copilot"])
def test_allowed_commands_get_no_decision(project, name):
    proc = _run(name, "before-shell", project, _payload(name, "before-shell", project, "ls -la"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() in ("", "{}")


@pytest.mark.parametrize("name", REGISTERED + ["copilot"])
def test_refusals_speak_each_protocol(project, name):
    proc = _run(name, "before-shell", project, _payload(name, "before-shell", project, "git push -f origin main"))
    assert proc.returncode == 2 and "protected branch 'main'" in proc.stderr
    if name == "cursor":
        assert json.loads(proc.stdout)["permission"] == "deny"
    elif name == "copilot":
        assert json.loads(proc.stdout)["permissionDecision"] == "deny"
    else:
        assert proc.stdout == ""


@pytest.mark.parametrize("name", REGISTERED + ["copilot"])
def test_approval_is_asked_where_the_assistant_can(project, name):
    (project / "tracked.txt").write_text("changed\n")
    try:
        proc = _run(name, "before-shell", project, _payload(name, "before-shell", project, "git reset --hard"))
    finally:
        (project / "tracked.txt").write_text("one\n")
    if name == "claude":
        out = json.loads(proc.stdout)["hookSpecificOutput"]
        assert proc.returncode == 0 and out["permissionDecision"] == "ask" and "tracked.txt" in out["permissionDecisionReason"]
    elif name == "cursor":
        assert proc.returncode == 0 and json.loads(proc.stdout)["permission"] == "ask"
    else:
        assert proc.returncode == 2 and "needs the user's approval" in proc.stderr and "tracked.txt" in proc.stderr


@pytest.mark.parametrize("name", ["claude", "codex", "gemini", "copilot"])
def test_after_write_findings_reach_the_model(project, name):
    target = project / f"new_{name}.py"
    target.write_text(NO_DOC)
    proc = _run(name, "after-write", project, _payload(name, "after-write", project, target.name))
    assert proc.returncode == 2 and f"new_{name}.py:1: [missing-docstring] module has no docstring" in proc.stderr
    assert target.read_text().startswith("# Copyright")


def test_cursor_gets_after_edit_findings_when_the_turn_ends(project):
    target = project / "new_cursor.py"
    target.write_text(NO_DOC)
    edit = _run("cursor", "after-write", project, _payload("cursor", "after-write", project, str(target)))
    assert edit.returncode == 0 and edit.stdout.strip() == ""  # observe-only in Cursor: nothing to answer
    assert "handed to the agent when its turn ends" in edit.stderr
    other = dict(_payload("cursor", "after-turn", project, ""), conversation_id="another-conversation")
    assert json.loads(_run("cursor", "after-turn", project, other).stdout) == {}
    stop = _run("cursor", "after-turn", project, _payload("cursor", "after-turn", project, ""))
    followup = json.loads(stop.stdout)["followup_message"]
    assert stop.returncode == 0 and "new_cursor.py:1: [missing-docstring] module has no docstring" in followup
    assert json.loads(_run("cursor", "after-turn", project, _payload("cursor", "after-turn", project, "")).stdout) == {}
    target.write_text(NO_DOC)
    _run("cursor", "after-write", project, _payload("cursor", "after-write", project, str(target)))
    late = dict(_payload("cursor", "after-turn", project, ""), loop_count=5)  # Cursor's follow-up limit reached
    assert json.loads(_run("cursor", "after-turn", project, late).stdout) == {}


def test_codex_apply_patch_edits_are_checked_and_shell_guard_ignores_patches(project):
    target = project / "patched.py"
    target.write_text(NO_DOC)
    payload = _payload("codex", "after-write", project, "patched.py")
    assert payload["tool_name"] == "apply_patch" and "*** Update File: patched.py" in payload["tool_input"]["command"]
    assert _run("codex", "after-write", project, payload).returncode == 2
    pre = dict(payload, hook_event_name="PreToolUse")  # Codex also fires PreToolUse for apply_patch
    assert _run("codex", "before-shell", project, pre).returncode == 0


def _run_from(name: str, event: str, root: Path, cwd: Path, command_text: str, env_extra: dict | None = None):
    assistant = assistants.get(name)
    payload = dict(_payload(name, event, root, command_text), cwd=str(cwd))
    env = {**_git_env(), "HP_AGENT_PYTHON": sys.executable, **(env_extra or {})}
    return subprocess.run(["sh", "-c", assistant.registrations(root)[event]], input=json.dumps(payload),
                          capture_output=True, text=True, cwd=cwd, env=env, timeout=60, check=False)


@pytest.mark.parametrize("name", ["codex", "cursor", "gemini"])
def test_hook_outside_the_work_tree_fails_closed_on_git(project, tmp_path, name):
    """Started from a directory outside the work tree (no project variable), the registered command cannot find
    the hook: a git command is blocked with the error named, other commands go through (nothing to protect)."""
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    blocked = _run_from(name, "before-shell", project, outside, "git push -f origin main")
    assert blocked.returncode == 2, blocked.stderr
    assert "cannot run .agent/hooks/before-shell" in blocked.stderr and "not a git repository" in blocked.stderr
    allowed = _run_from(name, "before-shell", project, outside, "ls -la")
    assert allowed.returncode == 0 and "cannot run" in allowed.stderr
    wrote = _run_from(name, "after-write", project, outside, str(outside / "x.py"))
    assert wrote.returncode == 0 and "nothing checked" in wrote.stderr


def test_gemini_hook_finds_the_project_from_its_variable(project, tmp_path):
    proc = _run_from("gemini", "before-shell", project, tmp_path, "git push -f origin main",
                     {"GEMINI_PROJECT_DIR": str(project)})
    assert proc.returncode == 2 and "protected branch 'main'" in proc.stderr


@pytest.mark.parametrize("name", REGISTERED)
def test_a_crashing_hook_blocks_with_its_error(project, tmp_path, name):
    """A hook that dies before answering (here: its Python exits 1 with a traceback) blocks, naming the error."""
    crash = tmp_path / "python"
    crash.write_text("#!/bin/sh\necho 'Traceback (most recent call last): ImportError: boom' >&2\nexit 1\n")
    crash.chmod(0o755)
    assistant = assistants.get(name)
    env = {**_git_env(), **assistant.probe_env(project), "HP_AGENT_PYTHON": str(crash)}
    payload = json.dumps(_payload(name, "before-shell", project, "git status"))
    proc = subprocess.run(["sh", "-c", assistant.registrations(project)["before-shell"]], input=payload,
                          capture_output=True, text=True, cwd=project, env=env, timeout=60, check=False)
    assert proc.returncode == 2, proc.stderr
    assert "ImportError: boom" in proc.stderr and "exit status 1" in proc.stderr
