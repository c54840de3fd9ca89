# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Ways to change git's configuration for one command that the before-shell guard must see through.

git reads configuration from more places than ``-c``: the ``GIT_CONFIG_COUNT``/``GIT_CONFIG_KEY_<n>``/
``GIT_CONFIG_VALUE_<n>`` and ``GIT_CONFIG_PARAMETERS`` environment variables, ``GIT_CONFIG_GLOBAL``,
``GIT_CONFIG_SYSTEM`` and ``GIT_CONFIG`` (other config files), ``include.path``/``includeIf.<cond>.path``
(more files), and the repository's own config and hooks directory written directly. Any of these can set
``core.hooksPath`` and so switch the repository's git hooks off. This module names the risky keys, reads a
config file a variable points to, and says what an assignment or a file write would do.
"""
from __future__ import annotations

import os
import posixpath

CONFIG_VARS_KEYED = ("GIT_CONFIG_KEY_", "GIT_CONFIG_PARAMETERS")
CONFIG_FILE_VARS = ("GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "GIT_CONFIG")
# commands that change the files named in their arguments (a redirection target is checked for every command)
WRITERS = {"rm", "mv", "cp", "ln", "chmod", "chown", "sed", "tee", "truncate", "install", "dd", "perl", "unlink",
           "shred", "touch", "patch"}


def risky_key(key: str) -> bool:
    """True for configuration keys that can switch off or redirect the git hooks."""
    low = key.strip().strip("'\"").lower()
    return low.startswith(("core.hookspath", "include.", "includeif.")) or low == "core.hookspath"


def risky_text(text: str) -> bool:
    """True when a configuration text (a file, ``GIT_CONFIG_PARAMETERS``) mentions a risky key or section."""
    low = text.lower()
    return "hookspath" in low or "include" in low


def assignment_problem(name: str, value: str | None, cwd: str) -> tuple[str, str] | None:
    """``("block" | "ask", reason)`` for ``NAME=VALUE`` given to a command, or None when harmless."""
    if name.startswith(CONFIG_VARS_KEYED):
        if value is None:
            return "block", f"{name} is built at run time; git would read configuration the guard cannot check"
        if risky_key(value) or (name == "GIT_CONFIG_PARAMETERS" and risky_text(value)):
            return "block", (f"{name}={value[:60]} sets core.hooksPath/include through the environment, which "
                             "bypasses the repository's git hooks")
        return None
    if name in CONFIG_FILE_VARS:
        if value is None:
            return "ask", f"{name} points git at a config file chosen at run time; the guard cannot read it"
        if value in ("", "/dev/null"):
            return None
        path = os.path.expanduser(value)
        path = path if os.path.isabs(path) else os.path.join(cwd, path)
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                text = fh.read(1_000_000)
        except OSError:
            return None  # git treats a missing file as empty
        if risky_text(text):
            return "block", (f"{name}={value} points git at a config file that sets core.hooksPath or includes "
                             "another file; that bypasses the repository's git hooks")
    return None


def git_dir_target(path: str, cwd: str) -> str | None:
    """What a write to ``path`` would change in git's own files (``config``, ``hooks/...``), else None."""
    full = posixpath.normpath(posixpath.join(cwd, os.path.expanduser(path)))
    parts = full.split("/")
    if ".git" not in parts:
        return None
    rest = parts[len(parts) - parts[::-1].index(".git"):]
    if rest[:1] == ["hooks"]:
        return "the git hooks (.git/hooks)"
    if rest[-1:] in (["config"], ["config.worktree"]) and len(rest) <= 3:
        return "git's config file"
    if not rest:
        return None  # .git itself: rm -r .git is handled as a loss of history
    return None


def config_write_problem(values: list[str]) -> str | None:
    """The reason ``git config VALUES...`` is refused (it sets a risky key), else None."""
    reading = {"--get", "--get-all", "--get-regexp", "--list", "-l", "--unset", "--unset-all", "--get-urlmatch",
               "get", "list", "unset", "--name-only", "--show-origin", "--show-scope"}
    if any(v in reading for v in values):
        return None
    for value in values:
        if not value.startswith("-") and risky_key(value.split("=", 1)[0]):
            return (f"`git config {value}` sets core.hooksPath or includes another config file; that switches "
                    "off or redirects the repository's git hooks")
    return None
