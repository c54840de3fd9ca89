# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Validation of ``.agent/`` assets: rules, skills (Agent Skills format), agents, commands, hooks, settings."""
from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

from hp_agent.assets import AGENT_DIR, AssetError, Assets, load_assets
from hp_agent.findings import Finding
from hp_agent.shared.protocol import CANONICAL_EVENTS
from hp_agent.rules import check_rules

SKILL_NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
TIERS = ("fast", "standard", "deep")
MAX_SKILL_DESCRIPTION = 1024


def _required(findings: list[Finding], asset, keys: tuple[str, ...], rule: str) -> None:
    for key in keys:
        if not str(asset.meta.get(key) or "").strip():
            findings.append(Finding(asset.path, 1, rule, f"missing '{key}' in front matter"))


def check_skills(assets: Assets) -> list[Finding]:
    """Agent Skills format: name = folder, lowercase/hyphens, <= 64 chars; description present, <= 1024 chars."""
    out: list[Finding] = []
    for skill in assets.skills:
        _required(out, skill, ("name", "description"), "skill-front-matter")
        folder = Path(skill.path).parent.name
        name = str(skill.meta.get("name") or "")
        if name and name != folder:
            out.append(Finding(skill.path, 1, "skill-name", f"name {name!r} must equal the folder name {folder!r}"))
        if name and (not SKILL_NAME.match(name) or len(name) > 64):
            out.append(Finding(skill.path, 1, "skill-name",
                               f"name {name!r}: lowercase letters, digits, hyphens, <= 64"))
        if len(skill.description) > MAX_SKILL_DESCRIPTION:
            out.append(Finding(skill.path, 1, "skill-description",
                               f"description is {len(skill.description)} chars, limit {MAX_SKILL_DESCRIPTION}"))
        if "hp-agent" not in skill.body:
            out.append(Finding(skill.path, 1, "skill-body",
                               "the skill body must point at the hp-agent commands it uses"))
    return out


def check_agents(assets: Assets) -> list[Finding]:
    """Agents: name (= file stem), description, tools, tier (fast | standard | deep)."""
    out: list[Finding] = []
    for agent in assets.agents:
        _required(out, agent, ("name", "description", "tools", "tier"), "agent-front-matter")
        if agent.meta.get("name") and agent.meta["name"] != Path(agent.path).stem:
            out.append(Finding(agent.path, 1, "agent-name", "name must equal the file name"))
        if agent.meta.get("tier") and agent.meta["tier"] not in TIERS:
            out.append(Finding(agent.path, 1, "agent-tier", f"tier {agent.meta['tier']!r} is not one of {TIERS}"))
    return out


def _option_takes_value(command: object, word: str) -> bool | None:
    """None when ``command`` has no option ``word``; else whether the next word is the option's value."""
    import click

    params = {o: p for p in command.params for o in (*p.opts, *p.secondary_opts)}
    param = params.get(word.split("=", 1)[0])
    if param is None:
        return None
    return "=" not in word and isinstance(param, click.Option) and not param.is_flag and not param.count


def resolve_cli(run: str, cli: object, allow_group: bool = False) -> str | None:
    """Check that ``run`` (``hp-agent group sub --opt``) names an existing subcommand and options of ``cli``.

    ``cli`` is the root click group the caller runs under (``hp-agent check`` passes its own root, so this
    family never imports the CLI above it). Words after the deepest command that are not options are taken as
    arguments. Returns None when it resolves, else the reason. ``allow_group`` accepts a bare group (a
    reference such as ``hp-agent git``).
    """
    import click

    words = shlex.split(run)
    if not words or words[0] != "hp-agent":
        return f"run {run!r} must start with 'hp-agent'"
    command: click.Command = cli
    path = ["hp-agent"]
    skip_value = False
    for word in words[1:]:
        if skip_value:
            skip_value = False
            continue
        if word.startswith("-"):
            takes = _option_takes_value(command, word)
            if takes is None:
                return f"'{' '.join(path)}' has no option {word!r}"
            skip_value = takes
        elif isinstance(command, click.Group):
            sub = command.get_command(click.Context(command), word)
            if sub is None:
                return f"'{' '.join(path)}' has no subcommand {word!r}"
            command, path = sub, [*path, word]
    if isinstance(command, click.Group) and not command.invoke_without_command and not allow_group:
        return f"'{' '.join(path)}' is a group; name one of its subcommands"
    return None


_CLI_REF = re.compile(r"`(hp-agent(?: [^`]*)?)`")


def check_cli_references(assets: Assets, cli: object) -> list[Finding]:
    """Every `hp-agent ...` quoted in an asset's text must name a real subcommand and real options of ``cli``."""
    out: list[Finding] = []
    for asset in [*assets.rules, *assets.skills, *assets.agents, *assets.commands]:
        text = (assets.root / asset.path).read_text(encoding="utf-8")
        for number, line in enumerate(text.splitlines(), start=1):
            for ref in _CLI_REF.findall(line):
                try:
                    problem = resolve_cli(ref, cli, allow_group=True)
                except ValueError as exc:  # unbalanced quotes in the reference
                    problem = f"cannot parse {ref!r}: {exc}"
                if problem:
                    out.append(Finding(asset.path, number, "asset-cli-ref", f"`{ref}`: {problem}"))
    return out


def check_commands(assets: Assets, cli: object) -> list[Finding]:
    """Commands: description, and ``run``: an existing hp-agent subcommand (resolved in ``cli``)."""
    out: list[Finding] = []
    for cmd in assets.commands:
        _required(out, cmd, ("description", "run"), "command-front-matter")
        run = str(cmd.meta.get("run") or "")
        problem = resolve_cli(run, cli) if run else None
        if problem:
            out.append(Finding(cmd.path, 1, "command-run", problem))
    return out


def check_hooks(assets: Assets) -> list[Finding]:
    """Hooks: executable, call ``hp-agent hook <event>``; settings.json names existing hooks for known events."""
    out: list[Finding] = []
    for hook in assets.hooks:
        if not os.access(assets.root / hook.path, os.X_OK):
            out.append(Finding(hook.path, None, "hook-executable", "hook file is not executable (chmod +x)"))
        if f"hook {hook.name}" not in hook.body:
            out.append(Finding(hook.path, None, "hook-body", f"hook must call `hp-agent hook {hook.name}`"))
    names = {h.name for h in assets.hooks}
    for event, spec in (assets.settings.get("hooks") or {}).items():
        where = f"{AGENT_DIR}/settings.json"
        if event not in CANONICAL_EVENTS:
            out.append(Finding(where, None, "settings-event", f"unknown event {event!r}; expected {CANONICAL_EVENTS}"))
        hook = str((spec or {}).get("hook") or "")
        if Path(hook).name not in names:
            out.append(Finding(where, None, "settings-hook", f"event {event!r}: hook {hook!r} is not in .agent/hooks/"))
    return out


def check_all_assets(root: Path, cli: object) -> list[Finding]:
    """Every asset check (rules, skills, agents, commands, hooks); a malformed file is itself a finding.

    ``cli``: the ``hp-agent`` root click group that commands and `hp-agent ...` references must resolve in."""
    try:
        assets = load_assets(root)
    except AssetError as exc:
        return [Finding(AGENT_DIR, None, "asset-parse", str(exc))]
    return [*check_rules(root), *check_skills(assets), *check_agents(assets), *check_commands(assets, cli),
            *check_hooks(assets), *check_cli_references(assets, cli)]
