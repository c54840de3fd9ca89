# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Normalising the hook payloads of the assistants into one event, and rendering the answer they understand.

Payloads (JSON on stdin):

* Claude Code and Codex: ``hook_event_name`` (``PreToolUse``/``PostToolUse``), ``tool_name``, ``tool_input``
  (``file_path``, ``command``), ``cwd``. A block is exit 2 with the reason on stderr (shown to the model).
* Gemini CLI: ``hook_event_name`` ``BeforeTool``/``AfterTool``, ``tool_name`` (``write_file``, ``replace``,
  ``run_shell_command``), ``tool_input``. Exit 2 blocks, stderr is the reason.
* Cursor: ``hook_event_name`` ``afterFileEdit`` (top-level ``file_path``) / ``beforeShellExecution``
  (top-level ``command``), ``workspace_roots``. Exit 2 blocks; ``{"permission": "deny", ...}`` on stdout too.
* Copilot (coding agent / CLI): ``toolName``, ``toolArgs`` (object or JSON string), ``cwd``; the event comes
  from the hook registration (``preToolUse``/``postToolUse``). Exit 2 plus
  ``{"permissionDecision": "deny", "permissionDecisionReason": ...}`` on stdout.

Every block also goes to stderr with exit status 2; nothing is ever reported with exit 1 on stdout.
"""
from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field

CANONICAL_EVENTS = ("after-write", "before-shell")
ASSISTANTS = ("claude", "codex", "gemini", "cursor", "copilot")

EVENT_NAMES: dict[str, dict[str, str]] = {
    "claude": {"PostToolUse": "after-write", "PreToolUse": "before-shell"},
    "codex": {"PostToolUse": "after-write", "PreToolUse": "before-shell"},
    "gemini": {"AfterTool": "after-write", "BeforeTool": "before-shell"},
    "cursor": {"afterFileEdit": "after-write", "beforeShellExecution": "before-shell",
               "postToolUse": "after-write", "preToolUse": "before-shell"},
    "copilot": {"postToolUse": "after-write", "preToolUse": "before-shell"},
}
WRITE_TOOLS = {"write", "edit", "multiedit", "notebookedit", "write_file", "replace", "create", "apply_patch",
               "str_replace_editor", "str_replace", "edit_file", "search_replace", "insert"}
SHELL_TOOLS = {"bash", "shell", "run_shell_command", "exec_command", "local_shell", "terminal", "powershell"}
_PATCH_FILE = re.compile(r"^\*\*\* (?:Add|Update) File: (.+)$", re.MULTILINE)


class PayloadError(ValueError):
    """The hook input is not a payload we understand."""


@dataclass
class HookEvent:
    """A payload normalised: assistant, canonical event, tool, touched files, shell command, cwd."""

    assistant: str
    event: str | None
    raw_event: str
    tool: str
    files: list[str] = field(default_factory=list)
    command: str | None = None
    cwd: str | None = None


def detect_assistant(payload: dict) -> str:
    """Guess which assistant sent ``payload`` from its shape."""
    name = str(payload.get("hook_event_name", ""))
    if "toolName" in payload or "toolArgs" in payload:
        return "copilot"
    if "workspace_roots" in payload or "conversation_id" in payload or name in ("afterFileEdit",
                                                                              "beforeShellExecution"):
        return "cursor"
    if name in ("BeforeTool", "AfterTool"):
        return "gemini"
    return "claude"


def _as_dict(value: object) -> dict:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return {}
    return value if isinstance(value, dict) else {}


def _command_text(value: object) -> str | None:
    if isinstance(value, list):
        parts = [str(v) for v in value]
        if len(parts) >= 3 and parts[-2] in ("-c", "-lc"):
            return parts[-1]
        return shlex.join(parts)
    return str(value) if value is not None else None


def _files(tool_input: dict, payload: dict) -> list[str]:
    files = []
    for key in ("file_path", "path", "notebook_path", "filePath", "target_file"):
        for source in (tool_input, payload):
            if isinstance(source.get(key), str) and source[key] not in files:
                files.append(source[key])
    for key in ("input", "patch", "command"):
        if isinstance(tool_input.get(key), str) and "*** " in tool_input[key]:
            files.extend(m.strip() for m in _PATCH_FILE.findall(tool_input[key]) if m.strip() not in files)
    return files


_IMPLIED_TOOL = {("cursor", "afterFileEdit"): "edit", ("cursor", "beforeShellExecution"): "shell"}


def _first(payload: dict, *keys: str) -> str:
    for key in keys:
        if payload.get(key):
            return str(payload[key])
    return ""


def normalize(payload: dict, assistant: str | None = None, registered_event: str | None = None) -> HookEvent:
    """Turn an assistant's payload into a :class:`HookEvent`; ``registered_event`` fills a missing name.

    An event name this runner does not handle (e.g. ``SessionStart``) gives ``event=None``.
    """
    if not isinstance(payload, dict):
        raise PayloadError(f"hook input must be a JSON object, got {type(payload).__name__}")
    who = assistant or detect_assistant(payload)
    if who not in EVENT_NAMES:
        raise PayloadError(f"unknown assistant {who!r}; expected one of {', '.join(ASSISTANTS)}")
    raw = _first(payload, "hook_event_name", "hookEventName")
    event = EVENT_NAMES[who].get(raw) if raw else registered_event
    tool = _first(payload, "tool_name", "toolName") or _IMPLIED_TOOL.get((who, raw), "")
    tool_input = _as_dict(payload.get("tool_input") if "tool_input" in payload else payload.get("toolArgs"))
    command = _command_text(tool_input.get("command", payload.get("command")))
    roots = payload.get("workspace_roots") or [None]
    return HookEvent(assistant=who, event=event, raw_event=raw, tool=tool, files=_files(tool_input, payload),
                     command=command, cwd=payload.get("cwd") or roots[0])


def is_write_tool(tool: str) -> bool:
    """True for tools that write files (names of every supported assistant, case-insensitive)."""
    return tool.lower() in WRITE_TOOLS


def is_shell_tool(tool: str) -> bool:
    """True for tools that run a shell command."""
    return tool.lower() in SHELL_TOOLS


@dataclass
class HookAnswer:
    """What the runner tells the assistant: exit status, stdout, stderr."""

    exit_code: int
    stdout: str = ""
    stderr: str = ""


def render_block(ev: HookEvent | None, reason: str) -> HookAnswer:
    """Render a block in the assistant's protocol: always exit 2 + stderr, plus its JSON form where it has one."""
    stdout = ""
    if ev is not None and ev.event == "before-shell" and ev.assistant == "cursor":
        stdout = json.dumps({"permission": "deny", "user_message": reason, "agent_message": reason})
    elif ev is not None and ev.event == "before-shell" and ev.assistant == "copilot":
        stdout = json.dumps({"permissionDecision": "deny", "permissionDecisionReason": reason})
    return HookAnswer(exit_code=2, stdout=stdout, stderr=reason.rstrip() + "\n")


def render_ok(ev: HookEvent | None, note: str = "") -> HookAnswer:
    """Render success; a note (e.g. what the style hook fixed) goes where the assistant's model can read it."""
    if ev is not None and ev.assistant == "cursor" and ev.event == "before-shell":
        return HookAnswer(0, json.dumps({"permission": "allow"}), note + "\n" if note else "")
    if ev is not None and ev.assistant == "gemini" and not note:
        return HookAnswer(0, "{}")
    if not note or ev is None:
        return HookAnswer(exit_code=0)
    if ev.assistant in ("claude", "codex") and ev.raw_event == "PostToolUse":
        return HookAnswer(0, json.dumps({"hookSpecificOutput": {"hookEventName": "PostToolUse",
                                                                 "additionalContext": note}}))
    if ev.assistant == "gemini":
        return HookAnswer(0, json.dumps({"hookSpecificOutput": {"hookEventName": ev.raw_event,
                                                                 "additionalContext": note}}))
    return HookAnswer(0, stderr=note + "\n")
