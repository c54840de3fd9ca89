# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The hook runner: ``hp-agent hook <event>`` for assistants (after-write, before-shell) and git hooks.

Guard hooks fail closed: a payload we cannot read or an internal error blocks with a message that names
the problem, rather than letting the action through unchecked.
"""
from __future__ import annotations

import json
import os
import subprocess
import traceback
from pathlib import Path

from hp_agent.checks.commit_msg import check_commit_message
from hp_agent.checks.op_registry import check_registry, is_registry_path
from hp_agent.checks.pre_push import check_push, parse_updates, updates_from_pre_commit_env
from hp_agent.checks.shell_guard import check_shell_command
from hp_agent.checks.style import style_file, style_text
from hp_agent.hooks.protocol import (CANONICAL_EVENTS, HookAnswer, HookEvent, PayloadError, is_shell_tool,
                                     is_write_tool, normalize, render_block, render_ok)
from hp_agent.repo import NotARepositoryError, relative_to_repo, repo_root


def _after_write(ev: HookEvent) -> HookAnswer:
    base = Path(ev.cwd) if ev.cwd else Path.cwd()
    problems, fixed = [], []
    registry_roots = set()
    for name in ev.files:
        path = Path(name) if Path(name).is_absolute() else base / name
        if not path.is_file():
            continue  # deleted or moved by the tool; nothing to check
        try:
            root = repo_root(path.parent)
        except NotARepositoryError:
            continue  # outside any repository: not ours to police
        rel = relative_to_repo(path, root)
        res = style_file(path, rel, fix=True)
        if res.fixed:
            fixed.append(f"{rel}: fixed {', '.join(res.fixed)}")
        problems.extend(str(f) for f in res.findings)
        if is_registry_path(rel):
            registry_roots.add(root)
    for root in sorted(registry_roots):
        findings, _summary = check_registry(root)
        problems.extend(str(f) for f in findings)
    note = "hp-agent style: " + "; ".join(fixed) + " (re-read the file before editing it again)" if fixed else ""
    if problems:
        text = "hp-agent after-write found problems; fix them:\n" + "\n".join(f"  {p}" for p in problems)
        return render_block(ev, text + (f"\n{note}" if note else ""))
    return render_ok(ev, note)


def _before_shell(ev: HookEvent) -> HookAnswer:
    if ev.command is None:
        return render_block(ev, "hp-agent before-shell: the payload has no command; blocking (fail closed)")
    problems = check_shell_command(ev.command)
    if problems:
        return render_block(ev, "hp-agent blocked this command:\n" + "\n".join(f"  - {p}" for p in problems))
    return render_ok(ev)


def run_assistant_hook(event: str, stdin_text: str, assistant: str | None = None) -> HookAnswer:
    """Run the ``event`` hook (after-write | before-shell) on an assistant payload; never raises."""
    ev = None
    try:
        if event not in CANONICAL_EVENTS:
            return render_block(None, f"hp-agent hook: unknown event {event!r}; expected {CANONICAL_EVENTS}")
        try:
            payload = json.loads(stdin_text) if stdin_text.strip() else None
        except json.JSONDecodeError as exc:
            return render_block(None, f"hp-agent hook {event}: stdin is not JSON ({exc}); blocking (fail closed)")
        if payload is None:
            return render_block(None, f"hp-agent hook {event}: no hook payload on stdin; blocking (fail closed)")
        ev = normalize(payload, assistant=assistant, registered_event=event)
        if ev.event is None:
            return render_ok(ev)  # an event this hook does not handle
        if ev.event != event:
            return render_block(ev, f"hp-agent hook {event} received a {ev.raw_event} payload from {ev.assistant}: "
                                    "the hook is registered for the wrong event (run `hp-agent sync`)")
        if event == "after-write":
            return _after_write(ev) if is_write_tool(ev.tool) or not ev.tool else render_ok(ev)
        return _before_shell(ev) if is_shell_tool(ev.tool) or not ev.tool else render_ok(ev)
    except PayloadError as exc:
        return render_block(ev, f"hp-agent hook {event}: {exc}; blocking (fail closed)")
    except Exception as exc:  # pylint: disable=broad-except  # fail closed: any crash blocks, with the cause
        tb = traceback.format_exc(limit=3)
        return render_block(ev, f"hp-agent hook {event}: internal error {type(exc).__name__}: {exc}; "
                                f"blocking (fail closed)\n{tb}")


def run_commit_msg_hook(message_file: Path) -> HookAnswer:
    """The git ``commit-msg`` hook: exit 1 with the problems when the message breaks the policy."""
    try:
        text = Path(message_file).read_text(encoding="utf-8")
    except OSError as exc:
        return HookAnswer(1, stderr=f"hp-agent commit-msg: cannot read {message_file}: {exc}\n")
    problems = check_commit_message(text)
    if problems:
        body = "\n".join(f"  - {p}" for p in problems)
        return HookAnswer(1, stderr=f"hp-agent commit-msg: commit rejected:\n{body}\n")
    return HookAnswer(0)


def run_pre_push_hook(stdin_text: str, cwd: Path | None = None, env: dict | None = None) -> HookAnswer:
    """The git ``pre-push`` hook: refuse (exit 2) non-fast-forward pushes and deletes of protected branches."""
    env = dict(os.environ) if env is None else env
    try:
        updates = parse_updates(stdin_text) or updates_from_pre_commit_env(env)
        root = repo_root(cwd)
        problems = check_push(root, updates)
    except (ValueError, NotARepositoryError, OSError) as exc:
        return HookAnswer(2, stderr=f"hp-agent pre-push: {exc}; push refused (fail closed)\n")
    if problems:
        return HookAnswer(2, stderr="hp-agent pre-push: push refused:\n" + "\n".join(f"  - {p}" for p in problems)
                          + "\n")
    return HookAnswer(0)


def staged_files(root: Path) -> list[str]:
    """Files added, copied, modified or renamed in the index."""
    out = subprocess.run(["git", "diff", "--cached", "--name-only", "--diff-filter=ACMR", "-z"], cwd=root,
                         check=True, capture_output=True, text=True).stdout
    return [p for p in out.split("\0") if p]


def run_pre_commit_hook(cwd: Path | None = None, files: list[str] | None = None) -> HookAnswer:
    """The git ``pre-commit`` hook: staged files need the license header, no trailing whitespace, a final
    newline, valid Python; a staged registry/rule file runs the op-registry pairing check. Check-only."""
    root = repo_root(cwd)
    paths = files if files else staged_files(root)
    problems = []
    for rel in paths:
        blob = subprocess.run(["git", "show", f":{rel}"], cwd=root, capture_output=True, check=False)
        if blob.returncode != 0:
            continue  # not in the index (deleted)
        try:
            text = blob.stdout.decode("utf-8")
        except UnicodeDecodeError:
            continue  # binary file
        res = style_text(text, rel, fix=False)
        problems.extend(str(f) for f in res.findings if f.rule in ("style-fixable", "syntax-error"))
    if any(is_registry_path(p) for p in paths):
        problems.extend(str(f) for f in check_registry(root)[0])
    if problems:
        return HookAnswer(1, stderr="hp-agent pre-commit: fix these first (`hp-agent check style --fix PATH` "
                                    "fixes the fixable ones):\n" + "\n".join(f"  {p}" for p in problems) + "\n")
    return HookAnswer(0)
