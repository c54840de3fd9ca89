# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""OpenAI Codex CLI: reads ``AGENTS.md``; hooks in ``.codex/hooks.json``.

Hooks exist since Codex CLI 0.118 (``PreToolUse``/``PostToolUse`` for shell commands, behind
``[features] codex_hooks = true`` in ``~/.codex/config.toml`` until they became default-on, where the key
is ``hooks``); since 0.123 ``apply_patch`` edits fire them too (the patch in ``tool_input.command``,
``tool_name: "apply_patch"``). Project hooks (``<repo>/.codex/hooks.json``) run only in a trusted project
(``[projects."<path>"] trust_level = "trusted"``). Payloads and answers are Claude Code's: exit 2 with the
reason on stderr blocks or feeds back; Codex has no "ask" answer, so what needs approval is blocked with
that explanation.
"""
from __future__ import annotations

from hp_agent.assistants.base import Assistant, owned_hook_item
from hp_agent.assistants.claude import Claude
from hp_agent.shared.protocol import HookAnswer, HookEvent


class Codex(Claude):
    """Codex CLI."""

    name = "codex"
    title = "Codex CLI"
    detect_priority = 40
    payload_events = {"PostToolUse": "after-write", "PreToolUse": "before-shell"}
    registered = {"after-write": "PostToolUse", "before-shell": "PreToolUse"}
    matchers = {"after-write": "apply_patch|Edit|Write", "before-shell": "Bash"}
    write_tools = frozenset({"apply_patch", "edit", "write"})
    shell_tools = frozenset({"bash", "shell", "exec_command", "local_shell", "unified_exec"})
    supports_ask = False
    hooks_file = ".codex/hooks.json"
    project_dir_env = None
    command_var = None
    owned_dirs = ()

    def detects(self, payload: dict) -> bool:
        """Codex payloads carry a ``turn_id``."""
        return "turn_id" in payload

    def ask(self, ev: HookEvent, reason: str) -> HookAnswer:
        """No "ask" in Codex: block and explain."""
        return Assistant.ask(self, ev, reason)

    def allow(self, ev: HookEvent | None, note: str = "") -> HookAnswer:
        """No decision; a note after an edit goes to the model as ``additionalContext``."""
        if note and ev is not None and ev.raw_event == "PostToolUse":
            return super().allow(ev, note)
        return HookAnswer(0, stderr=note + "\n" if note else "")

    def generate(self, assets, out) -> None:
        """``.codex/hooks.json`` (merged: sync owns only the entries that run ``.agent/hooks/``)."""
        from hp_agent.shared import generated as T  # pylint: disable=import-outside-toplevel

        hooks = self.hook_groups(assets, lambda event, spec, command: {
            "type": "command", "command": command, "timeout": int(spec.get("timeout", 60))})
        out[".codex/hooks.json"] = T.Generated({"hooks": hooks}, ".agent/settings.json", owns=owned_hook_item,
                                               owned_keys="hook entries running `.agent/hooks/`")

    def probe_payload(self, event: str, root, subject: str) -> dict:
        """Codex's payload: Claude's keys plus ``turn_id``/``model``; edits come as an apply_patch."""
        payload = super().probe_payload(event, root, subject)
        payload.update(turn_id="hp-agent-doctor", model="doctor")
        if event == "after-write":
            payload.update(tool_name="apply_patch",
                           tool_input={"command": f"*** Begin Patch\n*** Update File: {subject}\n*** End Patch\n"})
        return payload

    def setup_problems(self, root, home) -> list[str]:
        """Project trust and the hooks feature flag in ``~/.codex/config.toml``."""
        import tomllib  # pylint: disable=import-outside-toplevel  # doctor only, not the hook path

        config = home / ".codex" / "config.toml"
        try:
            data = tomllib.loads(config.read_text(encoding="utf-8")) if config.is_file() else {}
        except (OSError, tomllib.TOMLDecodeError) as exc:
            return [f"{config} is not readable TOML ({exc})"]
        problems = []
        features = data.get("features") or {}
        if features.get("hooks") is False or features.get("codex_hooks") is False:
            problems.append(f"hooks are switched off in {config} ([features] hooks = false)")
        trust = ((data.get("projects") or {}).get(str(root)) or {}).get("trust_level")
        if trust != "trusted":
            problems.append(f"Codex runs project hooks only in a trusted project: add [projects.\"{root}\"] "
                            f"trust_level = \"trusted\" to {config} (or trust it when Codex asks); on Codex "
                            "before hooks were default-on also set [features] codex_hooks = true")
        return problems


ASSISTANT = Codex()
