# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Checks on a shell command an assistant is about to run (the ``before-shell`` hook).

Blocked: bypassing git hooks (``--no-verify``, ``-n`` on commit, ``core.hooksPath`` overrides), a force push
without a lease (``--force``, ``-f``, ``+refspec``), deleting or force-pushing a protected branch, and
``git commit -m`` messages that break the commit message policy (checked before the commit runs).
"""
from __future__ import annotations

import re
import shlex

from hp_agent.checks.commit_msg import check_commit_message
from hp_agent.checks.pre_push import is_protected

_SEPARATORS = {";", "&&", "||", "|", "&", "\n"}
_DYNAMIC = re.compile(r"\$\(|`|\$\{?[A-Za-z_]")


def _segments(command: str) -> list[list[str]]:
    """Split a shell command line into simple commands (tokens), at ; && || | &."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=";&|\n")
    lexer.whitespace = " \t\r"
    lexer.whitespace_split = True
    segments, current = [], []
    for tok in lexer:
        if tok in _SEPARATORS or set(tok) <= set(";&|\n"):
            if current:
                segments.append(current)
            current = []
        else:
            current.append(tok)
    if current:
        segments.append(current)
    return segments


def _git_args(tokens: list[str]) -> list[str] | None:
    """The arguments after ``git`` (global options skipped), or None when the command is not git."""
    i = 0
    while i < len(tokens) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", tokens[i]):
        i += 1  # VAR=value prefixes
    if i >= len(tokens) or tokens[i].rsplit("/", 1)[-1] != "git":
        return None
    args = tokens[i + 1:]
    out, j = [], 0
    while j < len(args):
        if args[j] in ("-C", "-c", "--git-dir", "--work-tree") and j + 1 < len(args):
            if args[j] == "-c" and args[j + 1].lower().startswith("core.hookspath"):
                return ["__hookspath_override__"]
            j += 2
            continue
        if args[j].startswith("-") and not out:
            j += 1
            continue
        out = args[j:]
        break
    return out


def _commit_messages(args: list[str]) -> list[str]:
    messages = []
    for k, a in enumerate(args):
        if a in ("-m", "--message") and k + 1 < len(args):
            messages.append(args[k + 1])
        elif a.startswith("--message="):
            messages.append(a.split("=", 1)[1])
        elif a.startswith("-m") and len(a) > 2 and not a.startswith("--"):
            messages.append(a[2:])
    return messages


def _skips_hooks(args: list[str]) -> bool:
    short = [a for a in args[1:] if a.startswith("-") and not a.startswith("--")]
    return "--no-verify" in args or any(re.fullmatch(r"-[a-zA-Z]*n[a-zA-Z]*", a) for a in short)


def _commit_problems(args: list[str]) -> list[str]:
    problems = []
    if _skips_hooks(args):
        problems.append("`git commit --no-verify`/`-n` skips the repository's commit checks; commit without it")
    messages = _commit_messages(args)
    # A message built by the shell ($(...), `...`, $VAR: e.g. a heredoc) cannot be known here; the
    # commit-msg git hook checks it when the commit runs.
    if messages and not any(_DYNAMIC.search(m) for m in messages):
        problems.extend(f"commit message: {p}" for p in check_commit_message("\n\n".join(messages)))
    return problems


def _is_forced(args: list[str]) -> bool:
    return any(a in ("--force", "-f") or re.fullmatch(r"-[a-zA-Z]*f[a-zA-Z]*", a) for a in args)


def _refspec_problem(spec: str, deleting: bool, forced: bool) -> str | None:
    dst = (spec.split(":", 1)[1] if ":" in spec else spec).lstrip("+").removeprefix("refs/heads/")
    if not is_protected(dst):
        return None
    if deleting or spec.startswith(":"):
        return f"deleting protected branch '{dst}' is not allowed"
    if spec.startswith("+") or forced:
        return f"force-pushing protected branch '{dst}' is not allowed; open a PR instead"
    return None


def _push_problems(args: list[str]) -> list[str]:
    problems = []
    if "--no-verify" in args:
        problems.append("`git push --no-verify` skips the pre-push policy; push without it")
    forced = _is_forced(args)
    refspecs = [a for a in args[1:] if not a.startswith("-")][1:]
    deleting = "--delete" in args or "-d" in args
    problems.extend(p for p in (_refspec_problem(s, deleting, forced) for s in refspecs) if p)
    unleased = not any(a.startswith("--force-with-lease") for a in args)
    if (forced or any(s.startswith("+") for s in refspecs)) and unleased and not problems:
        problems.append("force push without a lease can destroy others' work; "
                        "use `git push --force-with-lease=<branch>:<expected sha>`")
    return problems


def check_shell_command(command: str) -> list[str]:
    """Return the reasons to block ``command`` (empty: allowed). Unparsable input is blocked."""
    try:
        segments = _segments(command)
    except ValueError as exc:
        return [f"cannot parse the shell command ({exc}); refusing to guess what it does"]
    problems = []
    for tokens in segments:
        args = _git_args(tokens)
        if not args:
            continue
        if args[0] == "__hookspath_override__":
            problems.append("overriding core.hooksPath on the command line bypasses the repository's git hooks")
        elif args[0] == "commit":
            problems.extend(_commit_problems(args))
        elif args[0] == "push":
            problems.extend(_push_problems(args))
    return problems
