# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The assistant-independent half of the hook protocol: the normalised event and the answer.

What each assistant sends and how it wants to be answered lives in its own module under
:mod:`hp_agent.assistants`; this module only holds the shapes they share and helpers to read payloads.
Only the standard library is imported here (the hooks run before the repository's environment exists).
"""
from __future__ import annotations

import json
import re

CANONICAL_EVENTS = ("after-write", "before-shell", "after-turn")
_PATCH_FILE = re.compile(r"^\*\*\* (?:Add|Update) File: (.+)$", re.MULTILINE)


class PayloadError(ValueError):
    """The hook input is not a payload we understand."""


class HookEvent:  # pylint: disable=too-many-instance-attributes,too-few-public-methods
    """A payload normalised: assistant, canonical event, tool, touched files, shell command, cwd, raw payload.

    (Plain classes here and in the guard: ``dataclasses`` costs ~20 ms per hook call.)
    """

    __slots__ = ("assistant", "event", "raw_event", "tool", "files", "command", "cwd", "payload")

    def __init__(self, assistant: str, event: str | None, raw_event: str, tool: str,  # pylint: disable=too-many-arguments
                 files: list[str] | None = None, command: str | None = None, cwd: str | None = None,
                 payload: dict | None = None) -> None:
        self.assistant, self.event, self.raw_event, self.tool = assistant, event, raw_event, tool
        self.files = list(files or [])
        self.command, self.cwd = command, cwd
        self.payload = payload or {}

    def __repr__(self) -> str:
        return (f"HookEvent({self.assistant!r}, {self.event!r}, raw={self.raw_event!r}, tool={self.tool!r}, "
                f"files={self.files!r}, command={self.command!r}, cwd={self.cwd!r})")


class HookAnswer:  # pylint: disable=too-few-public-methods
    """What the runner tells the assistant: exit status, stdout, stderr."""

    __slots__ = ("exit_code", "stdout", "stderr")

    def __init__(self, exit_code: int, stdout: str = "", stderr: str = "") -> None:
        self.exit_code, self.stdout, self.stderr = exit_code, stdout, stderr

    def __repr__(self) -> str:
        return f"HookAnswer(exit_code={self.exit_code!r}, stdout={self.stdout!r}, stderr={self.stderr!r})"


def as_dict(value: object) -> dict:
    """A JSON object given as a dict or as a JSON string ({} otherwise)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return {}
    return value if isinstance(value, dict) else {}


def command_text(value: object) -> str | None:
    """A shell command given as a string or as an argv list (``["bash", "-lc", "..."]`` → the script)."""
    if isinstance(value, list):
        import shlex  # pylint: disable=import-outside-toplevel  # rare (argv-style payloads)
        parts = [str(v) for v in value]
        if len(parts) >= 3 and parts[-2] in ("-c", "-lc"):
            return parts[-1]
        return shlex.join(parts)
    return str(value) if value is not None else None


def payload_files(tool_input: dict, payload: dict) -> list[str]:
    """Paths a write tool touched: the usual path keys, and the files named in an ``apply_patch`` patch."""
    files: list[str] = []
    for key in ("file_path", "path", "notebook_path", "filePath", "target_file"):
        for source in (tool_input, payload):
            if isinstance(source.get(key), str) and source[key] not in files:
                files.append(source[key])
    for key in ("input", "patch", "command"):
        if isinstance(tool_input.get(key), str) and "*** " in tool_input[key]:
            files.extend(m.strip() for m in _PATCH_FILE.findall(tool_input[key]) if m.strip() not in files)
    return files


def first(payload: dict, *keys: str) -> str:
    """The first non-empty value among ``keys`` as a string ('' when none)."""
    for key in keys:
        if payload.get(key):
            return str(payload[key])
    return ""
