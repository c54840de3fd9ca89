# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""`hp-agent hook after-write|before-shell` with each assistant's payload shape, through the real CLI."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from hp_agent.checks import style
from hp_agent.hooks import runner
from hp_agent import assistants
from hp_agent.license import has_license_header

CLEAN = ('# Copyright 2026 The hyper-parallel Authors. All rights reserved.\n'
         '# SPDX-License-Identifier: Apache-2.0\n"""A module."""\n\n\n'
         'def add(a: int, b: int) -> int:\n    """Add."""\n    return a + b\n')
DIRTY = 'def show(x: int):   \n    """Show."""\n    print(x)\n\n\ndef half(y):\n    return y / 2'


def write_payload(assistant: str, path: Path, cwd: Path) -> dict:
    """The after-write payload each assistant sends for an edit of ``path``."""
    if assistant in ("claude", "codex"):
        return {"session_id": "s", "hook_event_name": "PostToolUse", "tool_name": "Edit", "cwd": str(cwd),
                "tool_input": {"file_path": str(path), "old_string": "a", "new_string": "b"}}
    if assistant == "gemini":
        return {"hook_event_name": "AfterTool", "tool_name": "write_file", "cwd": str(cwd),
                "tool_input": {"file_path": str(path), "content": "..."}}
    if assistant == "cursor":
        return {"hook_event_name": "afterFileEdit", "conversation_id": "c", "workspace_roots": [str(cwd)],
                "file_path": str(path), "edits": [{"old_string": "a", "new_string": "b"}]}
    return {"timestamp": 1, "cwd": str(cwd), "toolName": "edit", "toolArgs": json.dumps({"path": str(path)})}


def shell_payload(assistant: str, command: str, cwd: Path) -> dict:
    """The before-shell payload each assistant sends for ``command``."""
    if assistant in ("claude", "codex"):
        return {"hook_event_name": "PreToolUse", "tool_name": "Bash", "cwd": str(cwd),
                "tool_input": {"command": command}}
    if assistant == "gemini":
        return {"hook_event_name": "BeforeTool", "tool_name": "run_shell_command", "cwd": str(cwd),
                "tool_input": {"command": command}}
    if assistant == "cursor":
        return {"hook_event_name": "beforeShellExecution", "conversation_id": "c", "command": command,
                "cwd": str(cwd), "workspace_roots": [str(cwd)]}
    return {"timestamp": 1, "cwd": str(cwd), "toolName": "bash", "toolArgs": {"command": command}}


ASSISTANTS = ["claude", "codex", "gemini", "cursor", "copilot"]


@pytest.mark.parametrize("assistant", ASSISTANTS)
def test_after_write_fixes_and_reports_for_every_assistant(tmp_repo, cli, assistant):
    root = Path(tmp_repo.working_tree_dir)
    (root / "pkg").mkdir()
    target = root / "pkg" / "mod.py"
    target.write_text(DIRTY)
    payload = write_payload(assistant, target, root)
    proc = cli(["hook", "after-write", "--assistant", assistant], cwd=root / "pkg", stdin=json.dumps(payload))
    # Cursor ignores afterFileEdit answers: the findings wait for its stop hook (exit 0); others see exit 2
    assert proc.returncode == (0 if assistant == "cursor" else 2), proc
    text = target.read_text()
    assert has_license_header(text)
    assert "def show(x: int) -> None:" in text and "   \n" not in text and text.endswith("\n")
    assert "def half(y):" in text  # returns a value: not annotated by the hook
    assert "pkg/mod.py:1: [missing-docstring] module has no docstring" in proc.stderr
    assert "pkg/mod.py:8: [missing-annotation] half: parameter(s) without annotation: y" in proc.stderr
    assert "license header" in proc.stderr  # the fix is reported too
    assert not proc.stdout.strip().startswith("{") or "deny" not in proc.stdout


@pytest.mark.parametrize("assistant", ASSISTANTS)
def test_after_write_on_a_clean_file_passes(tmp_repo, cli, assistant):
    root = Path(tmp_repo.working_tree_dir)
    target = root / "clean.py"
    target.write_text(CLEAN)
    proc = cli(["hook", "after-write"], cwd=root, stdin=json.dumps(write_payload(assistant, target, root)))
    assert proc.returncode == 0, proc.stderr
    assert target.read_text() == CLEAN


def test_payload_shape_is_detected_without_assistant_flag(tmp_path):
    for assistant in ASSISTANTS:
        payload = shell_payload(assistant, "ls", tmp_path)
        ev = assistants.detect(payload).normalize(payload, registered_event="before-shell")
        expected = "claude" if assistant == "codex" else assistant  # codex speaks the Claude shape
        assert ev.assistant == expected and ev.event == "before-shell" and ev.command == "ls"


BLOCKED = ["git push --force origin main", "git commit --no-verify -m 'feat(x): y'", "git push origin :master",
           "git commit -m 'wip'", "git -c core.hooksPath=/dev/null commit -m 'feat(x): y'",
           "cd sub && git push -f origin feature"]


@pytest.mark.parametrize("assistant", ASSISTANTS)
@pytest.mark.parametrize("command", BLOCKED)
def test_before_shell_blocks(tmp_repo, cli, assistant, command):
    root = Path(tmp_repo.working_tree_dir)
    proc = cli(["hook", "before-shell", "--assistant", assistant], cwd=root,
               stdin=json.dumps(shell_payload(assistant, command, root)))
    assert proc.returncode == 2
    assert proc.stderr.startswith("hp-agent blocked this command")
    if assistant == "cursor":
        assert json.loads(proc.stdout)["permission"] == "deny"
    elif assistant == "copilot":
        assert json.loads(proc.stdout)["permissionDecision"] == "deny"
    else:
        assert proc.stdout == ""


@pytest.mark.parametrize("assistant", ASSISTANTS)
def test_before_shell_allows_ordinary_commands(tmp_repo, cli, assistant):
    root = Path(tmp_repo.working_tree_dir)
    for command in ("ls -la | grep x", "git commit -m 'feat(core): add mesh helper'",
                    "git push --force-with-lease=feature:abc123 origin feature", "git push origin HEAD"):
        proc = cli(["hook", "before-shell"], cwd=root, stdin=json.dumps(shell_payload(assistant, command, root)))
        assert proc.returncode == 0, (command, proc.stderr)
        if assistant == "cursor":  # no decision: Cursor's own approval settings stay in charge
            assert json.loads(proc.stdout) == {}
        else:
            assert "allow" not in proc.stdout


def test_other_tools_and_events_pass_through(tmp_repo, cli):
    root = Path(tmp_repo.working_tree_dir)
    read = {"hook_event_name": "PostToolUse", "tool_name": "Read", "tool_input": {"file_path": "x"}, "cwd": str(root)}
    assert cli(["hook", "after-write"], cwd=root, stdin=json.dumps(read)).returncode == 0
    start = {"hook_event_name": "SessionStart", "cwd": str(root)}
    assert cli(["hook", "before-shell"], cwd=root, stdin=json.dumps(start)).returncode == 0


@pytest.mark.parametrize("stdin,fragment", [("", "no hook payload"), ("{not json", "not JSON"),
                                            ("[1, 2]", "must be a JSON object")])
def test_bad_input_fails_closed(tmp_repo, cli, stdin, fragment):
    proc = cli(["hook", "before-shell"], cwd=Path(tmp_repo.working_tree_dir), stdin=stdin)
    assert proc.returncode == 2 and fragment in proc.stderr and "fail closed" in proc.stderr


def test_wrong_event_registration_blocks(tmp_repo, cli):
    root = Path(tmp_repo.working_tree_dir)
    proc = cli(["hook", "after-write"], cwd=root, stdin=json.dumps(shell_payload("claude", "ls", root)))
    assert proc.returncode == 2 and "registered for the wrong event" in proc.stderr


def test_internal_error_blocks_with_the_cause(tmp_repo, monkeypatch):
    root = Path(tmp_repo.working_tree_dir)
    target = root / "a.py"
    target.write_text(CLEAN)

    def boom(*_args, **_kwargs):
        raise OSError("disk on fire")

    monkeypatch.setattr(style, "style_file", boom)
    answer = runner.run_assistant_hook("after-write", json.dumps(write_payload("claude", target, root)))
    assert answer.exit_code == 2 and "disk on fire" in answer.stderr and "fail closed" in answer.stderr


def test_registry_change_triggers_the_pairing_check(tmp_repo, cli):
    root = Path(tmp_repo.working_tree_dir)
    yaml_dir = root / "hyper_parallel/core/ops/yaml"
    yaml_dir.mkdir(parents=True)
    target = yaml_dir / "elementwise.yaml"
    target.write_text("torch.add:\n  rule: AddRule\n  module: hyper_parallel.core.ops.rules.nowhere\n")
    proc = cli(["hook", "after-write"], cwd=root, stdin=json.dumps(write_payload("claude", target, root)))
    assert proc.returncode == 2
    assert "elementwise.yaml:1: [registry-module] torch.add: module" in proc.stderr


def test_claude_gets_the_fix_note_as_additional_context(tmp_repo, cli):
    root = Path(tmp_repo.working_tree_dir)
    target = root / "clean.py"
    target.write_text(CLEAN.replace("return a + b\n", "return a + b   \n"))
    proc = cli(["hook", "after-write"], cwd=root, stdin=json.dumps(write_payload("claude", target, root)))
    assert proc.returncode == 0
    context = json.loads(proc.stdout)["hookSpecificOutput"]["additionalContext"]
    assert "clean.py: fixed trailing whitespace" in context


def test_codex_apply_patch_payload_names_the_files(tmp_repo, cli):
    root = Path(tmp_repo.working_tree_dir)
    (root / "p.py").write_text(DIRTY)
    patch = "*** Begin Patch\n*** Update File: p.py\n@@\n-x\n+y\n*** End Patch\n"
    payload = {"hook_event_name": "PostToolUse", "tool_name": "apply_patch", "cwd": str(root),
               "tool_input": {"command": patch}}
    proc = cli(["hook", "after-write", "--assistant", "codex"], cwd=root, stdin=json.dumps(payload))
    assert proc.returncode == 2 and "p.py:1: [missing-docstring]" in proc.stderr
    assert has_license_header((root / "p.py").read_text())


@pytest.mark.parametrize("assistant", ["claude", "copilot"])
def test_the_installed_console_script_speaks_the_protocol(tmp_repo, cli_process, assistant):
    root = Path(tmp_repo.working_tree_dir)
    blocked = cli_process(["hook", "before-shell"], cwd=root,
                          stdin=json.dumps(shell_payload(assistant, "git push -f origin main", root)))
    assert blocked.returncode == 2 and "protected branch 'main'" in blocked.stderr
    assert (json.loads(blocked.stdout)["permissionDecision"] == "deny") if assistant == "copilot" \
        else blocked.stdout == ""
    allowed = cli_process(["hook", "before-shell"], cwd=root, stdin=json.dumps(shell_payload(assistant, "ls", root)))
    assert allowed.returncode == 0 and allowed.stderr == ""
