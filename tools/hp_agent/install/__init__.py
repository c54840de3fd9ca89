# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``hp-agent install``: git hooks (commit-msg, pre-push, pre-commit), ``.pre-commit-config.yaml`` and,
with ``--launcher``, an ``hp-agent`` launcher on the user's PATH (``make install`` does all three).

Idempotent. A foreign hook already in place is never lost: it is moved to ``<hook>.local`` (or, when that
name is taken by different content, to ``<hook>.backup-<UTC timestamp>``) and our hook chains to
``<hook>.local`` after its own check passed.

The hooks directory is shared by every work tree of a clone (``git worktree``), so a hook resolves
hp-agent from the work tree git runs it in: ``<top>/.agent/bin/hp-agent`` (which finds that tree's or the
clone's environment), else ``<top>/.venv/bin/hp-agent``, the clone's ``.venv``, ``hp-agent`` on PATH.
The hook text is the same for every work tree (installing from another one changes nothing). The hooks
fail closed: without hp-agent they refuse, naming what to run.
"""
from __future__ import annotations

import datetime as _dt
import os
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
# Worktrees share this directory: use the hp-agent of the work tree git runs this hook in (a work tree
# without the shim yet runs the main work tree's, so every work tree gets the same, current checks).
# Fail closed: when hp-agent cannot be found the hook refuses instead of letting the action through.
top="$(git rev-parse --show-toplevel 2>/dev/null)"
common="$(git rev-parse --path-format=absolute --git-common-dir 2>/dev/null)"
HP_AGENT=""
for cand in "$top/.agent/bin/hp-agent" "${{common%/.git}}/.agent/bin/hp-agent" "$top/.venv/bin/hp-agent" \\
            "${{common%/.git}}/.venv/bin/hp-agent" {fallback}"$(command -v hp-agent 2>/dev/null)"; do
    if [ -n "$cand" ] && [ -x "$cand" ]; then HP_AGENT="$cand"; break; fi
done
if [ -z "$HP_AGENT" ]; then
    echo "hp-agent {name}: hp-agent not found in $top (.agent/bin, .venv) nor on PATH; run 'make install'." \\
         "Refusing (fail closed)." >&2
    exit 1
fi
LOCAL_HOOK="$(dirname "$0")/{name}.local"
{body}
"""
LAUNCHER_MARK = "# hp-agent launcher"
_LAUNCHER = """#!/bin/sh
{mark} (installed by `make install` / `hp-agent install --launcher`; identical for every clone).
# Runs the hp-agent of the git work tree you are in, through its .agent/bin/hp-agent shim.
top="$(git rev-parse --show-toplevel 2>/dev/null)"
if [ -z "$top" ] || [ ! -x "$top/.agent/bin/hp-agent" ]; then
    echo "hp-agent: not inside a hyper-parallel work tree (no .agent/bin/hp-agent under '${{top:-$PWD}}')" >&2
    exit 2
fi
exec "$top/.agent/bin/hp-agent" "$@"
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
    launcher: str = ""
    launcher_path: str = ""
    launcher_on_path: bool = False


def hooks_dir(root: Path) -> Path:
    """The repository's hooks directory (honours ``core.hooksPath``)."""
    out = subprocess.run(["git", "rev-parse", "--git-path", "hooks"], cwd=root, check=True, capture_output=True,
                         text=True).stdout.strip()
    path = Path(out)
    return path if path.is_absolute() else (root / path).resolve()


SHIM = Path(".agent") / "bin" / "hp-agent"


def find_hp_agent() -> str | None:
    """The hp-agent executable running now (next to the interpreter, else on PATH)."""
    for candidate in (Path(sys.executable).with_name("hp-agent"), shutil.which("hp-agent")):
        if candidate and Path(candidate).is_file():
            return str(Path(candidate).absolute())
    return None


def hook_script(name: str, fallback: str | None = None) -> str:
    """The text of our ``name`` hook; ``fallback`` (an absolute hp-agent path) is tried before PATH.

    In a hyper-parallel clone (which has ``.agent/bin/hp-agent``) no fallback is written, so the hook
    text is the same whichever work tree installs it.
    """
    body = (_BODY_STDIN if name == "pre-push" else _BODY_PLAIN).format(name=name)
    extra = f'"{fallback}" ' if fallback else ""
    return _SCRIPT.format(managed=MANAGED, name=name, body=body, fallback=extra)


def launcher_script() -> str:
    """The text of the ``hp-agent`` launcher."""
    return _LAUNCHER.format(mark=LAUNCHER_MARK)


def install_launcher(bin_dir: Path) -> str:
    """Write the launcher to ``bin_dir/hp-agent``: ``written``, ``unchanged`` or ``kept`` (a foreign file there)."""
    path = Path(bin_dir) / "hp-agent"
    text = launcher_script()
    if path.exists() or path.is_symlink():
        current = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
        if LAUNCHER_MARK not in current:
            return "kept"
        if current == text:
            return "unchanged"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(".hp-agent.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.chmod(0o755)
    tmp.replace(path)
    return "written"


def _keep_foreign(path: Path, res: InstallResult) -> None:
    local = path.with_name(path.name + ".local")
    if local.exists() and local.read_bytes() != path.read_bytes():
        stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        target = path.with_name(f"{path.name}.backup-{stamp}")
    else:
        target = local
    path.replace(target)
    res.kept[str(path)] = str(target)


def _install_hook(directory: Path, name: str, res: InstallResult, fallback: str | None) -> None:
    path = directory / name
    text = hook_script(name, fallback)
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


def default_bin_dir(path_env: str | None = None, home: Path | None = None) -> Path:
    """Where the launcher goes: a directory on PATH, so that every shell (an assistant's too) finds it.

    In order: ``$XDG_BIN_HOME``, ``~/.local/bin``, ``~/bin`` when on PATH; else ``/usr/local/bin`` when on PATH
    and writable (root, or a user-owned prefix); else another writable directory on PATH under the home directory
    (not a version manager's ``shims``); else ``$XDG_BIN_HOME`` or ``~/.local/bin`` (``install`` then notes that
    it is not on PATH and ``hp-agent doctor`` names the fix).
    """
    home = home or Path.home()
    entries = [Path(p) for p in (os.environ.get("PATH", "") if path_env is None else path_env).split(os.pathsep)
               if p and os.path.isabs(p)]
    on_path = {_resolved(p) for p in entries}
    preferred = Path(os.environ.get("XDG_BIN_HOME") or home / ".local" / "bin")
    for candidate in (preferred, home / ".local" / "bin", home / "bin"):
        if _resolved(candidate) in on_path:
            return candidate
    local = Path("/usr/local/bin")
    if _resolved(local) in on_path and os.access(local, os.W_OK):
        return local
    return next((e for e in entries if _writable_home_dir(e, home)), preferred)


def _writable_home_dir(entry: Path, home: Path) -> bool:
    """A writable directory under ``home`` that no version manager regenerates (``shims``)."""
    inside = str(_resolved(entry)).startswith(str(_resolved(home)) + os.sep)
    return inside and entry.name != "shims" and entry.is_dir() and os.access(entry, os.W_OK)


def _resolved(path: Path) -> Path:
    try:
        return path.resolve()
    except OSError:
        return path


def install(root: Path, with_config: bool = True, launcher_dir: Path | None = None) -> InstallResult:
    """Install the three git hooks (the pre-commit config, and the launcher into ``launcher_dir``)."""
    directory = hooks_dir(root)
    directory.mkdir(parents=True, exist_ok=True)
    res = InstallResult(hooks_dir=str(directory))
    fallback = None if (Path(root) / SHIM).is_file() else find_hp_agent()
    for name in HOOKS:
        _install_hook(directory, name, res, fallback)
    if with_config:
        res.config = write_pre_commit_config(root)
    if launcher_dir is not None:
        res.launcher = install_launcher(launcher_dir)
        res.launcher_path = str(Path(launcher_dir) / "hp-agent")
        on_path = [Path(p).resolve() for p in os.environ.get("PATH", "").split(os.pathsep) if p]
        res.launcher_on_path = Path(launcher_dir).resolve() in on_path
    return res
