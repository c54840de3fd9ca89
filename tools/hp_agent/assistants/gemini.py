# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Gemini CLI: ``GEMINI.md`` and ``.gemini/settings.json`` (context files, ``BeforeTool``/``AfterTool`` hooks).

Hook payload: ``hook_event_name`` (``BeforeTool``/``AfterTool``), ``tool_name`` (``write_file``, ``replace``,
``run_shell_command``), ``tool_input``, ``cwd``. Answers: stdout must hold only JSON (``{}`` for "nothing
to say"); exit 2 blocks with stderr as the reason; ``hookSpecificOutput.additionalContext`` after a tool
reaches the model. No "ask" answer: what needs approval is blocked with that explanation.
Sync owns ``context.fileName`` entries ``AGENTS.md``/``GEMINI.md`` and the hook entries running ``.agent/hooks/``.
"""
from __future__ import annotations

import json

from hp_agent.assistants.base import Assistant, owned_hook_item
from hp_agent.shared.protocol import HookAnswer, HookEvent

CONTEXT_FILES = ["AGENTS.md", "GEMINI.md"]

GEMINI_MD = """{{ marker }}
# GEMINI.md

Instructions for Gemini CLI in hyper-parallel. Overview, commands and catalog:

@AGENTS.md

{% for r in always %}
{{ r.body.strip() }}

{% endfor %}
## Path-scoped rules

Before editing a file, read the rules for it: `hp-agent rules --for PATH`.

{% for r in scoped %}
- `{{ r.name }}` ({{ globs(r) | join(", ") }}): {{ r.description }}
{% endfor %}
"""


class Gemini(Assistant):
    """Gemini CLI."""

    name = "gemini"
    title = "Gemini CLI"
    detect_priority = 30
    payload_events = {"AfterTool": "after-write", "BeforeTool": "before-shell"}
    registered = {"after-write": "AfterTool", "before-shell": "BeforeTool"}
    matchers = {"after-write": "write_file|replace", "before-shell": "run_shell_command"}
    write_tools = frozenset({"write_file", "replace", "edit"})
    shell_tools = frozenset({"run_shell_command"})
    hooks_file = ".gemini/settings.json"
    project_dir_env = "GEMINI_PROJECT_DIR"

    def detects(self, payload: dict) -> bool:
        """Gemini names its events BeforeTool/AfterTool."""
        return str(payload.get("hook_event_name", "")) in self.payload_events

    def allow(self, ev: HookEvent | None, note: str = "") -> HookAnswer:
        """``{}``, or the note as ``additionalContext``."""
        if not note:
            return HookAnswer(0, "{}")
        event = ev.raw_event if ev is not None and ev.raw_event else "AfterTool"
        return HookAnswer(0, json.dumps({"hookSpecificOutput": {"hookEventName": event, "additionalContext": note}}))

    def generate(self, assets, out) -> None:
        """GEMINI.md and .gemini/settings.json (merged)."""
        from hp_agent.shared import generated as T  # pylint: disable=import-outside-toplevel

        out["GEMINI.md"] = T.Generated(T.render(GEMINI_MD, marker=T.marker("AGENTS.md and .agent/rules/"),
                                                always=T.always_rules(assets), scoped=T.scoped_rules(assets)),
                                       ".agent/rules/")
        hooks = self.hook_groups(assets, lambda event, spec, command: {
            "name": f"hp-agent-{event}", "type": "command", "command": command,
            "timeout": int(spec.get("timeout", 60)) * 1000})
        out[".gemini/settings.json"] = T.Generated(
            {"context": {"fileName": list(CONTEXT_FILES)}, "hooks": hooks}, ".agent/settings.json",
            owns=owned_hook_item, owned_keys="`context.fileName` entries AGENTS.md and GEMINI.md, hook entries "
                                             "running `.agent/hooks/`")

    def probe_payload(self, event, root, subject) -> dict:
        """Gemini's tool names."""
        payload = super().probe_payload(event, root, subject)
        payload["tool_name"] = "run_shell_command" if event == "before-shell" else "write_file"
        return payload


ASSISTANT = Gemini()
