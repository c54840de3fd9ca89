# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Safety rails for history rewrites: backup branches, leased pushes, stash/restore, roll-back."""
from __future__ import annotations

import contextlib
import datetime as _dt
import re
from typing import Callable, Iterator
from urllib.parse import urlparse

from hp_agent.autogit.gitcmd import AutogitRefused, Git, GitError
from hp_agent.config import Config

UtcNow = Callable[[], _dt.datetime]


def utc_now() -> _dt.datetime:
    """Current time in UTC (the default clock)."""
    return _dt.datetime.now(_dt.timezone.utc)


def backup_branch(git: Git, branch: str, now: UtcNow = utc_now, target: str | None = None) -> str:
    """Create ``backup/<branch>/<UTC timestamp>`` at ``target`` (default: the branch tip); return its name."""
    stamp = now().strftime("%Y%m%dT%H%M%SZ")
    name = f"backup/{branch}/{stamp}"
    suffix = 1
    while git.ok("rev-parse", "--verify", "--quiet", f"refs/heads/{name}"):
        suffix += 1
        name = f"backup/{branch}/{stamp}-{suffix}"
    git.run("branch", name, target or f"refs/heads/{branch}")
    return name


def refuse_protected(cfg: Config, branch: str, action: str) -> None:
    """Raise :class:`AutogitRefused` when ``branch`` is protected."""
    if cfg.is_protected(branch):
        raise AutogitRefused(f"refusing to {action} protected branch {branch!r} "
                             f"(protected: {', '.join(cfg.protected_branches)})")


def repo_slug(url: str) -> str:
    """``owner/name`` from a git remote URL (https, ssh ``git@host:owner/name.git`` or a local path)."""
    if "://" in url:
        path = urlparse(url).path
    elif re.match(r"^[\w.-]+@[\w.-]+:", url):
        path = url.split(":", 1)[1]
    else:
        path = url
    parts = [p for p in path.rstrip("/").split("/") if p]
    if len(parts) < 2:
        raise AutogitRefused(f"cannot read owner/name from remote URL {url!r}")
    return f"{parts[-2]}/{parts[-1].removesuffix('.git')}"


def push(git: Git, cfg: Config, branch: str, lease_sha: str | None = None, rewrite: bool = False) -> str:
    """Push HEAD to ``<fork_remote>/<branch>``; a rewrite uses ``--force-with-lease=<ref>:<sha>``.

    Never pushes to a protected branch and never to the upstream remote.  Returns the command run.
    """
    refuse_protected(cfg, branch, "push to")
    remote = cfg.fork_remote
    if remote == cfg.upstream_remote:
        raise AutogitRefused(f"fork remote {remote!r} is the upstream remote; push only to your fork")
    ref = f"refs/heads/{branch}"
    args = ["push"]
    if rewrite:
        args.append(f"--force-with-lease={ref}:{lease_sha or ''}")
    args += [remote, f"HEAD:{ref}"]
    git.run(*args)
    return "git " + " ".join(args)


class Stash:
    """Stash every change (untracked included) on enter and restore it on exit; nothing is dropped."""

    def __init__(self, git: Git, label: str) -> None:
        self.git = git
        self.label = label
        self.sha: str | None = None
        self.note = ""

    def __enter__(self) -> "Stash":
        if self.git.is_dirty():
            self.git.run("stash", "push", "--include-untracked", "--message", self.label)
            self.sha = self.git.head_sha("refs/stash")
        return self

    def __exit__(self, *exc: object) -> None:
        if self.sha is None:
            return
        proc = self.git.run("stash", "apply", "--index", self.sha, check=False)
        if proc.returncode != 0:
            self.note = (f"your stashed changes could not be re-applied cleanly; they are kept in stash "
                         f"{self.sha} ({self.label}); run `git stash apply {self.sha}` to restore them")
            return
        ref = self._stash_ref()
        if ref:
            self.git.run("stash", "drop", ref)

    def _stash_ref(self) -> str | None:
        listing = self.git.out("stash", "list", "--format=%gd %H")
        for line in listing.splitlines():
            ref, _, sha = line.partition(" ")
            if sha == self.sha:
                return ref
        return None


@contextlib.contextmanager
def rollback_on_error(git: Git, branch: str) -> Iterator[str]:
    """Yield the original tip; on any error abort a rebase in progress and put the branch back there."""
    original = git.head_sha()
    try:
        yield original
    except BaseException:
        git_dir = git.out("rev-parse", "--git-dir")
        if git.ok("rev-parse", "--verify", "--quiet", "REBASE_HEAD") or _rebasing(git, git_dir):
            git.run("rebase", "--abort", check=False)
        if git.run("symbolic-ref", "--quiet", "--short", "HEAD", check=False).stdout.strip() != branch:
            git.run("checkout", "--quiet", branch, check=False)
        if git.head_sha() != original:
            git.run("reset", "--quiet", "--hard", original)
        raise


def _rebasing(git: Git, git_dir: str) -> bool:
    base = git.cwd / git_dir
    return (base / "rebase-merge").exists() or (base / "rebase-apply").exists()


__all__ = ["AutogitRefused", "GitError", "Stash", "backup_branch", "push", "refuse_protected", "repo_slug",
           "rollback_on_error", "utc_now"]
