# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``hp-agent install``: git hooks (commit-msg, pre-push, pre-commit) and ``.pre-commit-config.yaml``.

Idempotent. A foreign hook already in place is never lost: it is moved to ``<hook>.local`` (or, when that
name is taken by different content, to ``<hook>.backup-<UTC timestamp>``) and our hook chains to
``<hook>.local`` after its own check passed. The hooks fail closed: without hp-agent they refuse.
"""
from __future__ import annotations

import datetime as _dt
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

HOOKS = ("commit-msg", "pre-push", "pre-commit")
MANAGED = "# hp-agent managed hook"
PRE_COMMIT_CONFIG = ".pre-commit-config.yaml"

_SCRIPT = """#!/bin/sh
{managed}: {name} (installed by `hp-agent install`; run it again to update).
# Fail closed: when hp-agent cannot be found the hook refuses instead of letting the action through.
HP_AGENT="{hp_agent}"
[ -x "$HP_AGENT" ] || HP_AGENT="$(command -v hp-agent 2>/dev/null)"
if [ -z "$HP_AGENT" ] || [ ! -x "$HP_AGENT" ]; then
    echo "hp-agent {name}: hp-agent not found (expected {hp_agent}); run 'make install'. Refusing (fail closed)." >&2
    exit 1
fi
LOCAL_HOOK="$(dirname "$0")/{name}.local"
{body}
"""
_BODY_PLAIN = """"$HP_AGENT" hook {name} "$@" || exit $?
if [ -x "$LOCAL_HOOK" ]; then
    exec "$LOCAL_HOOK" "$@"
fi
exit 0"""
_BODY_STDIN = """INPUT="$(cat)"
printf '%s\\n' "$INPUT" | "$HP_AGENT" hook {name} "$@" || exit $?
if [ -x "$LOCAL_HOOK" ]; then
    printf '%s\\n' "$INPUT" | "$LOCAL_HOOK" "$@" || exit $?
fi
exit 0"""

_LOCAL_HOOKS = [
    {"id": "hp-agent-pre-commit", "name": "hp-agent pre-commit (license header, whitespace, op registry)",
     "entry": "hp-agent hook pre-commit", "language": "system", "stages": ["pre-commit"]},
    {"id": "hp-agent-commit-msg", "name": "hp-agent commit-msg (Conventional Commits, no AI attribution)",
     "entry": "hp-agent hook commit-msg", "language": "system", "stages": ["commit-msg"]},
    {"id": "hp-agent-pre-push", "name": "hp-agent pre-push (protected branches)",
     "entry": "hp-agent hook pre-push", "language": "system", "stages": ["pre-push"], "pass_filenames": False,
     "always_run": True},
]


@dataclass
class InstallResult:
    """What install did: hooks written or unchanged, foreign hooks kept (old path -> new path), config state."""

    hooks_dir: str = ""
    written: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    kept: dict[str, str] = field(default_factory=dict)
    config: str = ""


def hooks_dir(root: Path) -> Path:
    """The repository's hooks directory (honours ``core.hooksPath``)."""
    out = subprocess.run(["git", "rev-parse", "--git-path", "hooks"], cwd=root, check=True, capture_output=True,
                         text=True).stdout.strip()
    path = Path(out)
    return path if path.is_absolute() else (root / path).resolve()


def find_hp_agent(root: Path) -> str:
    """The hp-agent executable the hooks should call (the repo venv first, then PATH, then ours)."""
    for candidate in (root / ".venv" / "bin" / "hp-agent", shutil.which("hp-agent"),
                      Path(sys.executable).with_name("hp-agent")):
        if candidate and Path(candidate).is_file():
            return str(Path(candidate).resolve())
    raise FileNotFoundError("hp-agent executable not found (run 'make install')")


def hook_script(name: str, hp_agent: str) -> str:
    """The text of our ``name`` hook calling ``hp_agent``."""
    body = (_BODY_STDIN if name == "pre-push" else _BODY_PLAIN).format(name=name)
    return _SCRIPT.format(managed=MANAGED, name=name, hp_agent=hp_agent, body=body)


def _keep_foreign(path: Path, res: InstallResult) -> None:
    local = path.with_name(path.name + ".local")
    if local.exists() and local.read_bytes() != path.read_bytes():
        stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        target = path.with_name(f"{path.name}.backup-{stamp}")
    else:
        target = local
    path.replace(target)
    res.kept[str(path)] = str(target)


def _install_hook(directory: Path, name: str, hp_agent: str, res: InstallResult) -> None:
    path = directory / name
    text = hook_script(name, hp_agent)
    if path.exists():
        current = path.read_text(encoding="utf-8", errors="replace")
        if MANAGED not in current:
            _keep_foreign(path, res)
        elif current == text and path.stat().st_mode & stat.S_IXUSR:
            res.unchanged.append(name)
            return
    path.write_text(text, encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    res.written.append(name)


def write_pre_commit_config(root: Path) -> str:
    """Create ``.pre-commit-config.yaml`` or merge our ``repo: local`` hooks into it; returns what happened."""
    path = root / PRE_COMMIT_CONFIG
    data = yaml.safe_load(path.read_text(encoding="utf-8")) if path.exists() else None
    data = data if isinstance(data, dict) else {}
    repos = data.setdefault("repos", [])
    present = {h.get("id") for r in repos if isinstance(r, dict) for h in r.get("hooks", []) if isinstance(h, dict)}
    missing = [h for h in _LOCAL_HOOKS if h["id"] not in present]
    if not missing:
        return "unchanged"
    repos.append({"repo": "local", "hooks": missing})
    data.setdefault("default_install_hook_types", ["pre-commit", "commit-msg", "pre-push"])
    header = ("# pre-commit framework configuration. The hp-agent entries are written by `hp-agent install`;\n"
              "# they run the same checks as the git hooks it installs.\n")
    existed = path.exists()
    path.write_text(header + yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return "merged" if existed else "written"


def install(root: Path, with_config: bool = True) -> InstallResult:
    """Install the three git hooks (and the pre-commit config) into the repository at ``root``."""
    directory = hooks_dir(root)
    directory.mkdir(parents=True, exist_ok=True)
    hp_agent = find_hp_agent(root)
    res = InstallResult(hooks_dir=str(directory))
    for name in HOOKS:
        _install_hook(directory, name, hp_agent, res)
    if with_config:
        res.config = write_pre_commit_config(root)
    return res
