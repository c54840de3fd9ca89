# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Claude Code: hooks ``PreToolUse``/``PostToolUse`` in ``.claude/settings.json``, ``CLAUDE.md``, ``.claude/``.

Hook payload: ``hook_event_name``, ``tool_name``, ``tool_input`` (``file_path``, ``command``), ``cwd``.
Answers: exit 2 with the reason on stderr blocks (PreToolUse) or feeds the reason back (PostToolUse);
``hookSpecificOutput.permissionDecision: "ask"`` asks the user; an allowed command gets no decision, so
the user's own permission settings still apply; ``additionalContext`` carries notes to the model.

Settings sync owns in ``.claude/settings.json``: ``$schema``, the hook entries that run ``.agent/hooks/``,
``attribution`` (empty commit and PR attribution: Claude Code then adds no co-author trailer),
``env.BASH_DEFAULT_TIMEOUT_MS``/``env.BASH_MAX_TIMEOUT_MS`` (``make test`` runs ~10 minutes) and its
``permissions.allow`` entries for hp-agent. Everything else in the file is the team's.
"""
from __future__ import annotations

import json

from hp_agent.assistants.base import Assistant, owned_hook_item
from hp_agent.shared.protocol import HookAnswer, HookEvent

BASH_DEFAULT_TIMEOUT_MS = 900_000   # 15 min: the whole gate (`make test`) takes ~7-10 min on this machine
BASH_MAX_TIMEOUT_MS = 1_800_000     # 30 min: what the model may ask for (a loaded machine)
MODELS = {"fast": "haiku", "standard": "sonnet", "deep": "opus"}
ALLOW = ["Bash(hp-agent:*)", "Bash(.agent/bin/hp-agent:*)"]

CLAUDE_MD = """{{ marker }}
# CLAUDE.md

Instructions for Claude Code in hyper-parallel. The project overview, build/test commands and the asset
catalog are in AGENTS.md:

@AGENTS.md

Setup: `make install` creates `.venv`, installs the git hooks and the `hp-agent` launcher; until then the
hooks only let read-only and setup commands through and say so. `hp-agent doctor` checks the setup.

Rules are loaded from `.claude/rules/` (path-scoped ones apply when you touch matching files); print the
rules for any path with `hp-agent rules --for PATH`. Hooks in `.claude/settings.json` run
`hp-agent hook after-write` after every edit (style fixes and findings on the lines you changed, op-registry
pairing) and `hp-agent hook before-shell` before shell commands; when a hook reports a problem, fix it.
"""


class Claude(Assistant):
    """Claude Code."""

    name = "claude"
    title = "Claude Code"
    detect_priority = 90
    payload_events = {"PostToolUse": "after-write", "PreToolUse": "before-shell", "Stop": "after-turn"}
    registered = {"after-write": "PostToolUse", "before-shell": "PreToolUse"}
    matchers = {"after-write": "Write|Edit|MultiEdit|NotebookEdit", "before-shell": "Bash"}
    write_tools = frozenset({"write", "edit", "multiedit", "notebookedit"})
    shell_tools = frozenset({"bash"})
    supports_ask = True
    hooks_file = ".claude/settings.json"
    project_dir_env = "CLAUDE_PROJECT_DIR"
    command_var = "CLAUDE_PROJECT_DIR"
    owned_dirs = (".claude/rules", ".claude/skills", ".claude/agents", ".claude/commands")

    def ask(self, ev: HookEvent, reason: str) -> HookAnswer:
        """``permissionDecision: ask``: Claude Code shows the reason and lets the user decide."""
        return HookAnswer(0, json.dumps({"hookSpecificOutput": {
            "hookEventName": ev.raw_event or "PreToolUse", "permissionDecision": "ask",
            "permissionDecisionReason": reason}}))

    def allow(self, ev: HookEvent | None, note: str = "") -> HookAnswer:
        """No decision (the user's permission rules apply); a note goes to the model as context."""
        if not note or ev is None:
            return HookAnswer(0)
        if ev.raw_event == "PostToolUse":
            return HookAnswer(0, json.dumps({"hookSpecificOutput": {"hookEventName": "PostToolUse",
                                                                     "additionalContext": note}}))
        return HookAnswer(0, json.dumps({"systemMessage": note}))

    def generate(self, assets, out) -> None:
        """CLAUDE.md, .claude/settings.json (merged), rules, skills, agents, commands."""
        from hp_agent.shared import generated as T  # pylint: disable=import-outside-toplevel

        out["CLAUDE.md"] = T.Generated(T.render(CLAUDE_MD, marker=T.marker("AGENTS.md and .agent/")), "AGENTS.md")
        out[".claude/settings.json"] = T.Generated(
            self.settings(assets), ".agent/settings.json", owns=_owned,
            owned_keys="`$schema`, hook entries running `.agent/hooks/`, `attribution`, "
                       "`env.BASH_DEFAULT_TIMEOUT_MS`, `env.BASH_MAX_TIMEOUT_MS`, hp-agent `permissions.allow` entries")
        for r in assets.rules:
            meta = {"description": r.description}
            if r not in T.always_rules(assets):
                meta["paths"] = T.rule_globs(r)
            out[f".claude/rules/{r.name}.md"] = T.Generated(T.with_marker(meta, r.body, r.path), r.path)
        for s in assets.skills:
            out[f".claude/skills/{s.name}/SKILL.md"] = T.Generated(T.with_marker(dict(s.meta), s.body, s.path), s.path)
        for a in assets.agents:
            tools = a.meta.get("tools") or []
            meta = {"name": a.name, "description": a.description,
                    "tools": ", ".join(tools) if isinstance(tools, list) else str(tools),
                    "model": MODELS.get(str(a.meta.get("tier")), "inherit")}
            out[f".claude/agents/{a.name}.md"] = T.Generated(T.with_marker(meta, a.body, a.path), a.path)
        for c in assets.commands:
            run = c.meta.get("run")
            meta = {"description": c.description,
                    "allowed-tools": f"Bash({run}:*), Bash({str(run).replace('hp-agent', T.SHIM, 1)}:*)"}
            if c.meta.get("argument-hint"):
                meta["argument-hint"] = c.meta["argument-hint"]
            out[f".claude/commands/{c.name}.md"] = T.Generated(T.with_marker(meta, c.body, c.path), c.path)

    def settings(self, assets) -> dict:
        """The keys sync owns in .claude/settings.json."""
        hooks = self.hook_groups(assets, lambda event, spec, command: {
            "type": "command", "command": command, "timeout": spec.get("timeout", 60)})
        return {"$schema": "https://json.schemastore.org/claude-code-settings.json", "hooks": hooks,
                "attribution": {"commit": "", "pr": ""},
                "env": {"BASH_DEFAULT_TIMEOUT_MS": str(BASH_DEFAULT_TIMEOUT_MS),
                        "BASH_MAX_TIMEOUT_MS": str(BASH_MAX_TIMEOUT_MS)},
                "permissions": {"allow": list(ALLOW)}}


def _owned(item: object) -> bool:
    return owned_hook_item(item) or item in ALLOW


ASSISTANT = Claude()
