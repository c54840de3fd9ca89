# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Cursor: ``.cursor/rules/*.mdc`` and ``.cursor/hooks.json`` (hooks since Cursor 1.7; 2.x payloads).

Hook payload: ``hook_event_name``, ``conversation_id``, ``workspace_roots``, and per event ``command``/``cwd``
(``beforeShellExecution``), ``file_path``/``edits`` (``afterFileEdit``), ``loop_count`` (``stop``).

Answers:

* ``beforeShellExecution``: ``{"permission": "deny"|"ask", "user_message", "agent_message"}``; an allowed
  command gets ``{}`` (no decision), so Cursor's own approval settings still apply - answering
  ``"allow"`` would auto-approve commands the user wants to confirm.
* ``afterFileEdit`` is observe-only (Cursor ignores its output), so findings are kept per conversation
  (:mod:`hp_agent.hooks.pending`) and the ``stop`` hook hands them back as ``followup_message``, which
  Cursor sends to the agent as the next message (at most 5 follow-ups per run: ``loop_count``).
"""
from __future__ import annotations

import json

from hp_agent.assistants.base import Assistant, hook_command, hook_events, owned_hook_item
from hp_agent.shared import pending
from hp_agent.shared.protocol import HookAnswer, HookEvent

MAX_FOLLOWUPS = 5


class Cursor(Assistant):
    """Cursor."""

    name = "cursor"
    title = "Cursor"
    detect_priority = 20
    payload_events = {"afterFileEdit": "after-write", "beforeShellExecution": "before-shell", "stop": "after-turn",
                      "postToolUse": "after-write", "preToolUse": "before-shell"}
    registered = {"after-write": "afterFileEdit", "before-shell": "beforeShellExecution", "after-turn": "stop"}
    implied_tools = {"afterFileEdit": "edit", "beforeShellExecution": "shell"}
    write_tools = frozenset({"edit", "write", "strreplace", "multiedit", "delete"})
    shell_tools = frozenset({"shell", "terminal"})
    supports_ask = True
    hooks_file = ".cursor/hooks.json"
    owned_dirs = (".cursor/rules",)

    def detects(self, payload: dict) -> bool:
        """Cursor sends ``workspace_roots``/``conversation_id`` and camelCase event names."""
        return "workspace_roots" in payload or "conversation_id" in payload or \
            payload.get("hook_event_name") in ("afterFileEdit", "beforeShellExecution")

    def block(self, ev: HookEvent | None, reason: str) -> HookAnswer:
        """Exit 2 and, before a shell command, ``permission: deny`` with the reason for user and agent."""
        stdout = ""
        if ev is not None and ev.event == "before-shell":
            stdout = json.dumps({"permission": "deny", "user_message": reason, "agent_message": reason})
        return HookAnswer(2, stdout, reason.rstrip() + "\n")

    def ask(self, ev: HookEvent, reason: str) -> HookAnswer:
        """``permission: ask``: Cursor asks the user."""
        return HookAnswer(0, json.dumps({"permission": "ask", "user_message": reason, "agent_message": reason}))

    def allow(self, ev: HookEvent | None, note: str = "") -> HookAnswer:
        """No decision: ``{}`` (Cursor's approval settings apply); a note goes to the hook log (stderr)."""
        return HookAnswer(0, "{}" if ev is None or ev.event != "after-write" else "", note + "\n" if note else "")

    def findings(self, ev: HookEvent, text: str) -> HookAnswer:
        """Keep the findings for the ``stop`` hook (Cursor does not show afterFileEdit output to the agent)."""
        kept = pending.add(ev.cwd, self.name, str(ev.payload.get("conversation_id") or ""), text)
        where = "they are handed to the agent when its turn ends" if kept else "not in a git work tree: not kept"
        return HookAnswer(0, "", f"{text.rstrip()}\n({where})\n")

    def turn_end(self, ev: HookEvent) -> HookAnswer:
        """``followup_message`` with the findings kept during the turn (``{}`` when there are none)."""
        items = pending.take(ev.cwd, self.name, str(ev.payload.get("conversation_id") or ""))
        if not items or int(ev.payload.get("loop_count") or 0) >= MAX_FOLLOWUPS:
            return HookAnswer(0, "{}")
        text = "\n\n".join(items)
        return HookAnswer(0, json.dumps({"followup_message": f"{text}\n\nFix these before you finish."}))

    def generate(self, assets, out) -> None:
        """Rules as .mdc and .cursor/hooks.json (merged: sync owns only the entries running ``.agent/hooks/``)."""
        from hp_agent.shared import generated as T  # pylint: disable=import-outside-toplevel

        for r in assets.rules:
            globs = T.rule_globs(r)
            head = ["---", f"description: {r.description}", f"globs: {','.join(globs)}".rstrip(),
                    f"alwaysApply: {'true' if not globs else 'false'}", "---"]
            out[f".cursor/rules/{r.name}.mdc"] = T.Generated("\n".join(head) + "\n" + T.marker(r.path) + "\n"
                                                             + r.body.lstrip(), r.path)
        hooks = {self.registered[e]: [{"command": hook_command(assets, e, self.name, None, self.project_dir_env)}]
                 for e in hook_events(assets) if e in self.registered}
        out[".cursor/hooks.json"] = T.Generated({"version": 1, "hooks": hooks}, ".agent/settings.json",
                                                owns=owned_hook_item, owned_keys="`version`, hook entries running "
                                                                                 "`.agent/hooks/`")

    def probe_payload(self, event, root, subject) -> dict:
        """Cursor's payloads."""
        base = {"conversation_id": "hp-agent-doctor", "generation_id": "g", "workspace_roots": [str(root)],
                "hook_event_name": self.registered.get(event, event)}
        if event == "before-shell":
            return {**base, "command": subject, "cwd": str(root)}
        if event == "after-turn":
            return {**base, "status": "completed", "loop_count": 0}
        return {**base, "file_path": subject, "edits": []}


ASSISTANT = Cursor()
