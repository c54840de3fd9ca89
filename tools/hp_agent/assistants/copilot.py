# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""GitHub Copilot: ``.github/copilot-instructions.md`` and ``.github/instructions/*.instructions.md``.

Hook payloads (Copilot coding agent / CLI): ``toolName``, ``toolArgs`` (object or JSON string), ``cwd``; the
event comes from the registration (``preToolUse``/``postToolUse``). A block is exit 2 plus
``{"permissionDecision": "deny", "permissionDecisionReason": ...}`` on stdout. Hook registration
(``.github/hooks/``) is not generated: register ``.agent/hooks/before-shell --assistant copilot`` there.
"""
from __future__ import annotations

import json

from hp_agent.assistants.base import Assistant
from hp_agent.shared.protocol import HookAnswer, HookEvent

INSTRUCTIONS = """{{ marker }}
# Copilot instructions for hyper-parallel

See AGENTS.md for the overview, build/test commands and the asset catalog. Path-scoped rules are in
`.github/instructions/`; `hp-agent rules --for PATH` prints the rules for any path.

{% for r in always %}
{{ r.body.strip() }}

{% endfor %}"""


class Copilot(Assistant):
    """GitHub Copilot (coding agent, CLI)."""

    name = "copilot"
    title = "GitHub Copilot"
    detect_priority = 10
    payload_events = {"postToolUse": "after-write", "preToolUse": "before-shell"}
    registered = {"after-write": "postToolUse", "before-shell": "preToolUse"}
    write_tools = frozenset({"edit", "create", "write", "str_replace_editor", "str_replace", "insert"})
    shell_tools = frozenset({"bash", "shell", "powershell"})
    owned_dirs = (".github/instructions",)

    def detects(self, payload: dict) -> bool:
        """Copilot uses camelCase ``toolName``/``toolArgs``."""
        return "toolName" in payload or "toolArgs" in payload

    def block(self, ev: HookEvent | None, reason: str) -> HookAnswer:
        """Exit 2 and, before a shell command, ``permissionDecision: deny``."""
        stdout = ""
        if ev is not None and ev.event == "before-shell":
            stdout = json.dumps({"permissionDecision": "deny", "permissionDecisionReason": reason})
        return HookAnswer(2, stdout, reason.rstrip() + "\n")

    def generate(self, assets, out) -> None:
        """The always-apply rules in copilot-instructions.md, the scoped ones as ``applyTo`` instructions."""
        from hp_agent.shared import generated as T  # pylint: disable=import-outside-toplevel

        out[".github/copilot-instructions.md"] = T.Generated(T.render(
            INSTRUCTIONS, marker=T.marker(".agent/rules/ (always-apply rules)"), always=T.always_rules(assets)),
            ".agent/rules/")
        for r in T.scoped_rules(assets):
            meta = {"applyTo": ",".join(T.rule_globs(r)), "description": r.description}
            out[f".github/instructions/{r.name}.instructions.md"] = T.Generated(T.with_marker(meta, r.body, r.path),
                                                                                r.path)

    def probe_payload(self, event, root, subject) -> dict:
        """Copilot's camelCase payload."""
        if event == "before-shell":
            return {"timestamp": 0, "cwd": str(root), "toolName": "bash", "toolArgs": {"command": subject}}
        return {"timestamp": 0, "cwd": str(root), "toolName": "edit", "toolArgs": {"path": subject}}


ASSISTANT = Copilot()
