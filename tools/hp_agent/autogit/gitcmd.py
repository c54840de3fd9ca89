# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""A thin, redacting wrapper around the ``git`` executable."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

from hp_agent.redact import redact


class GitError(RuntimeError):
    """A git command failed; the message names the command and carries git's (redacted) stderr."""


class AutogitRefused(RuntimeError):
    """A policy refused the requested action (protected branch, foreign PR head, no confirmation…)."""


class Git:
    """Run git commands in one working tree."""

    def __init__(self, cwd: Path | str) -> None:
        self.cwd = Path(cwd)

    def run(self, *args: str, check: bool = True, input_text: str | None = None,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """Run ``git *args``; raise :class:`GitError` (redacted) on a non-zero exit when ``check``."""
        full_env = dict(os.environ, GIT_TERMINAL_PROMPT="0", LC_ALL="C")
        if env:
            full_env.update(env)
        proc = subprocess.run(["git", *args], cwd=self.cwd, capture_output=True, text=True,
                              input=input_text, env=full_env, check=False)
        if check and proc.returncode != 0:
            detail = (proc.stderr or proc.stdout).strip()
            raise GitError(redact(f"git {' '.join(args)} failed (exit {proc.returncode}): {detail}"))
        return proc

    def run_bytes(self, *args: str) -> bytes | None:
        """stdout of ``git *args`` as bytes (None on a non-zero exit)."""
        proc = subprocess.run(["git", *args], cwd=self.cwd, capture_output=True, check=False,
                              env=dict(os.environ, GIT_TERMINAL_PROMPT="0", LC_ALL="C"))
        return proc.stdout if proc.returncode == 0 else None

    def out(self, *args: str) -> str:
        """Run ``git *args`` and return stdout without the trailing newline."""
        return self.run(*args).stdout.rstrip("\n")

    def ok(self, *args: str) -> bool:
        """True when ``git *args`` exits 0."""
        return self.run(*args, check=False).returncode == 0

    def root(self) -> Path:
        """Top level of the working tree."""
        return Path(self.out("rev-parse", "--show-toplevel"))

    def current_branch(self) -> str:
        """Name of the checked-out branch; :class:`AutogitRefused` on a detached HEAD."""
        proc = self.run("symbolic-ref", "--quiet", "--short", "HEAD", check=False)
        if proc.returncode != 0:
            raise AutogitRefused("HEAD is detached; check out a branch first")
        return proc.stdout.strip()

    def head_sha(self, ref: str = "HEAD") -> str:
        """Full sha of ``ref``."""
        return self.out("rev-parse", "--verify", f"{ref}^{{commit}}")

    def has_commits(self) -> bool:
        """True when HEAD points at a commit."""
        return self.ok("rev-parse", "--verify", "HEAD^{commit}")

    def is_dirty(self) -> bool:
        """True when tracked changes or untracked non-ignored files exist."""
        return bool(self.out("status", "--porcelain", "--untracked-files=all"))

    def remote_url(self, remote: str) -> str:
        """URL of ``remote``; :class:`AutogitRefused` naming the remote when it does not exist."""
        proc = self.run("remote", "get-url", remote, check=False)
        if proc.returncode != 0:
            raise AutogitRefused(f"git remote {remote!r} does not exist; add it with `git remote add {remote} URL`")
        return proc.stdout.strip()

    def tracking_sha(self, remote: str, branch: str) -> str | None:
        """Sha of the remote-tracking ref ``refs/remotes/<remote>/<branch>`` as last fetched (None if absent).

        The lease of every rewrite push: what *you* last saw of the remote, never what it holds now.
        """
        proc = self.run("rev-parse", "--verify", "--quiet", f"refs/remotes/{remote}/{branch}^{{commit}}", check=False)
        return proc.stdout.strip() or None if proc.returncode == 0 else None
