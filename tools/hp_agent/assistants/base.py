# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The protocol every assistant module implements (see :mod:`hp_agent.assistants`).

Three parts, one class per assistant:

* **hooks** - which payload events map to our canonical events (``after-write``, ``before-shell``,
  ``after-turn``), which tool names write files or run shells, and how to answer: allow, block, ask the
  user, report findings, hand over findings at the end of a turn;
* **sync** - :meth:`Assistant.generate` adds the assistant's generated files to the sync output
  (JSON settings are merged into the existing file: sync owns only what it writes);
* **doctor** - where the hook registration lives, which environment the assistant gives a hook, the
  payload of a test event, and what else must be set up (trust, feature flags).

The hook half imports only the standard library; the sync half imports its helpers when called.
"""
from __future__ import annotations

import json

from hp_agent.shared.protocol import HookAnswer, HookEvent, as_dict, command_text, first, payload_files

TYPE_CHECKING = False  # no `typing`/`pathlib` import on the hook path
if TYPE_CHECKING:  # pragma: no cover - typing only
    from pathlib import Path
    from typing import Any

    from hp_agent.assets import Assets
    from hp_agent.shared.generated import Output

def hook_command(assets: "Assets", event: str, assistant: str, project_var: str | None = None,
                 dir_var: str | None = None) -> str:
    """The command an assistant registers for ``event``: the ``.agent/hooks`` script from the project root.

    ``project_var``: the assistant always sets this variable to the project root. Otherwise the root is
    ``$dir_var`` when set, else the work tree of the hook's working directory. When the hook cannot be found
    there (the working directory is outside the work tree, git is missing), the command fails closed: a
    ``before-shell`` payload that mentions git is blocked (exit 2) with the error, anything else goes through
    with the error on stderr (there is nothing of this project to protect or check).
    """
    hook = assets.settings["hooks"][event]["hook"]
    if project_var:
        return f'"${project_var}"/{hook} --assistant {assistant}'
    root = f'${{{dir_var}:-$(git rev-parse --show-toplevel 2>&1)}}' if dir_var else \
        '$(git rev-parse --show-toplevel 2>&1)'
    error = f'echo "hp-agent {event}: cannot run {hook} from $PWD ($t)' + '{what}" >&2'
    if event == "before-shell":
        fallback = (error.format(what="; a git command is blocked (fail closed): start the assistant in the "
                                      "project") + '; if grep -q git; then exit 2; fi; exit 0')
    else:
        fallback = error.format(what="; nothing checked") + "; exit 0"
    return f'sh -c \'t={root}; [ -x "$t/{hook}" ] && exec "$t/{hook}" --assistant {assistant}; {fallback}\''


def hook_events(assets: "Assets") -> dict[str, dict]:
    """The hook events declared in ``.agent/settings.json`` (event -> spec)."""
    return dict(assets.settings.get("hooks") or {})


ASK_FALLBACK = ("{reason}\n(this needs the user's approval and {title} hooks cannot ask for it: tell the user what "
                "you want to run and why, and let them run it themselves)")


class Assistant:
    """Base class: Claude-Code-like defaults; each assistant module overrides what differs."""

    name = ""
    title = ""
    detect_priority = 50
    payload_events: dict[str, str] = {}
    registered: dict[str, str] = {}
    write_tools: frozenset[str] = frozenset()
    shell_tools: frozenset[str] = frozenset()
    implied_tools: dict[str, str] = {}
    supports_ask = False
    hooks_file: str | None = None
    project_dir_env: str | None = None
    command_var: str | None = None
    matchers: dict[str, str] = {}
    owned_dirs: tuple[str, ...] = ()

    # -- hooks --------------------------------------------------------------------------------------
    def detects(self, payload: dict) -> bool:
        """True when ``payload`` has this assistant's shape (used without ``--assistant``)."""
        del payload
        return False

    def normalize(self, payload: dict, registered_event: str | None = None) -> HookEvent:
        """The payload as a :class:`HookEvent`; ``registered_event`` fills a missing event name."""
        raw = first(payload, "hook_event_name", "hookEventName")
        event = self.payload_events.get(raw) if raw else registered_event
        tool = first(payload, "tool_name", "toolName") or self.implied_tools.get(raw, "")
        tool_input = as_dict(payload.get("tool_input") if "tool_input" in payload else payload.get("toolArgs"))
        command = command_text(tool_input.get("command", payload.get("command")))
        roots = payload.get("workspace_roots") or [None]
        return HookEvent(assistant=self.name, event=event, raw_event=raw, tool=tool,
                         files=payload_files(tool_input, payload), command=command,
                         cwd=payload.get("cwd") or roots[0], payload=payload)

    def handles_tool(self, ev: HookEvent) -> bool:
        """True when the event's tool is one the hook checks (a payload without a tool name always is)."""
        tools = {"after-write": self.write_tools, "before-shell": self.shell_tools}.get(ev.event or "")
        return not ev.tool or tools is None or ev.tool.lower() in tools

    def block(self, ev: HookEvent | None, reason: str) -> HookAnswer:
        """Refuse the action: exit 2 with the reason on stderr (what every assistant shows the model)."""
        del ev
        return HookAnswer(2, stderr=reason.rstrip() + "\n")

    def ask(self, ev: HookEvent, reason: str) -> HookAnswer:
        """Let the user decide; assistants without an "ask" answer get a block that says so."""
        return self.block(ev, ASK_FALLBACK.format(reason=reason.rstrip(), title=self.title))

    def allow(self, ev: HookEvent | None, note: str = "") -> HookAnswer:
        """Let the action through without taking a decision away from the user; ``note`` goes to the model."""
        del ev
        return HookAnswer(0, stderr=note + "\n" if note else "")

    def findings(self, ev: HookEvent, text: str) -> HookAnswer:
        """After a write with problems: tell the model (a block, shown to it, for most assistants)."""
        return self.block(ev, text)

    def turn_end(self, ev: HookEvent) -> HookAnswer:
        """At the end of an agent turn (only registered where findings must be handed over later)."""
        return self.allow(ev)

    # -- sync ---------------------------------------------------------------------------------------
    def generate(self, assets: "Assets", out: "Output") -> None:
        """Add this assistant's generated files to ``out`` (path -> :class:`~hp_agent.sync.targets.Generated`)."""
        del assets, out

    def hook_groups(self, assets: "Assets", make_entry) -> dict[str, list]:
        """Native event -> ``[{"matcher", "hooks": [make_entry(event, spec, command)]}]`` for the hooks it takes."""
        groups: dict[str, list] = {}
        for event, spec in hook_events(assets).items():
            if event in self.registered:
                command = hook_command(assets, event, self.name, self.command_var, self.project_dir_env)
                groups.setdefault(self.registered[event], []).append(
                    {"matcher": self.matchers[event], "hooks": [make_entry(event, spec, command)]})
        return groups

    # -- doctor -------------------------------------------------------------------------------------
    def registrations(self, root: Path) -> dict[str, str]:
        """Canonical event -> the exact command the assistant's hook file registers (empty if none)."""
        path = root / self.hooks_file if self.hooks_file else None
        if path is None or not path.is_file():
            return {}
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return {}
        native = {v: k for k, v in self.registered.items()}
        found: dict[str, str] = {}
        for event, groups in (data.get("hooks") or {}).items():
            for command in _commands(groups):
                if event in native and owned_hook_item(command):
                    found.setdefault(native.get(event, event), command)
        return found

    def probe_payload(self, event: str, root: Path, subject: str) -> dict:
        """The payload this assistant sends for ``event`` (``subject``: a command or a file path)."""
        native = self.registered.get(event, event)
        if event == "before-shell":
            return {"session_id": "hp-agent-doctor", "hook_event_name": native, "tool_name": "Bash",
                    "tool_input": {"command": subject}, "cwd": str(root)}
        return {"session_id": "hp-agent-doctor", "hook_event_name": native, "tool_name": "Write",
                "tool_input": {"file_path": subject}, "cwd": str(root)}

    def probe_env(self, root: Path) -> dict[str, str]:
        """Environment variables the assistant sets for a hook command."""
        return {self.project_dir_env: str(root)} if self.project_dir_env else {}

    def setup_problems(self, root: Path, home: Path) -> list[str]:
        """What else keeps this assistant's hooks from running (trust, feature flags); [] when nothing."""
        del root, home
        return []


def _commands(groups: "Any") -> list[str]:
    """Every ``command`` string in a hook registration list (nested ``hooks`` lists included)."""
    out: list[str] = []
    for group in groups if isinstance(groups, list) else []:
        if not isinstance(group, dict):
            continue
        if isinstance(group.get("command"), str):
            out.append(group["command"])
        out.extend(_commands(group.get("hooks")))
    return out


def owned_hook_item(item: object) -> bool:
    """True for a hook registration entry (or a string) that points at this repository's hp-agent hooks."""
    text = json.dumps(item) if not isinstance(item, str) else item
    return ".agent/hooks/" in text or ".agent/bin/hp-agent" in text
