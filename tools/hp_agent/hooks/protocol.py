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
import shlex
from dataclasses import dataclass, field

CANONICAL_EVENTS = ("after-write", "before-shell", "after-turn")
_PATCH_FILE = re.compile(r"^\*\*\* (?:Add|Update) File: (.+)$", re.MULTILINE)


class PayloadError(ValueError):
    """The hook input is not a payload we understand."""


@dataclass
class HookEvent:  # pylint: disable=too-many-instance-attributes
    """A payload normalised: assistant, canonical event, tool, touched files, shell command, cwd, raw payload."""

    assistant: str
    event: str | None
    raw_event: str
    tool: str
    files: list[str] = field(default_factory=list)
    command: str | None = None
    cwd: str | None = None
    payload: dict = field(default_factory=dict, repr=False)


@dataclass
class HookAnswer:
    """What the runner tells the assistant: exit status, stdout, stderr."""

    exit_code: int
    stdout: str = ""
    stderr: str = ""


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
