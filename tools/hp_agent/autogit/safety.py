# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Safety rails for history rewrites: backup branches, leased pushes, stash/restore, roll-back.

A rewrite push (squash/rebase ``--push``, ``pr --squash``, ``update --force``) is prepared *before* the
history is rewritten (:func:`prepare_rewrite_push`):

1. it refuses a protected branch and a fork remote that is the upstream repository (by remote name, URL or
   ``owner/name``);
2. the lease is the remote-tracking ref ``<remote>/<branch>`` you last fetched, never a fresh ``ls-remote``;
3. the remote branch is fetched into a private ref and compared: if it moved since your last fetch, or holds
   commits your branch never contained (neither its tip nor its reflog), the push is refused, naming those
   commits - nobody's work is overwritten unseen;
4. the remote tip is kept as branch ``backup/<remote>/<branch>/<UTC ts>`` before anything is pushed.

The push itself is ``--force-with-lease=refs/heads/<branch>:<tracking sha>``, so a push that lands on the
remote between the comparison and the push is refused by the server as well.
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import re
from typing import Callable, Iterator
from urllib.parse import urlparse

from hp_agent.autogit.backups import DEFAULT_KEEP, DEFAULT_MAX_AGE_DAYS, existing_backup, prune
from hp_agent.autogit.gitcmd import AutogitRefused, Git, GitError
from hp_agent.config import Config

UtcNow = Callable[[], _dt.datetime]


def utc_now() -> _dt.datetime:
    """Current time in UTC (the default clock)."""
    return _dt.datetime.now(_dt.timezone.utc)


def backup_branch(git: Git, branch: str, now: UtcNow = utc_now, target: str | None = None,
                  prefix: str | None = None) -> str:
    """Create ``<prefix>/<UTC timestamp>`` (default prefix ``backup/<branch>``) at ``target`` (default: the
    branch tip); return its name."""
    stamp = now().strftime("%Y%m%dT%H%M%SZ")
    base = prefix or f"backup/{branch}"
    sha = git.head_sha(target or f"refs/heads/{branch}")
    reused = existing_backup(git, base, sha)
    if reused:
        return reused  # this commit is already backed up: no new branch per attempt
    name = f"{base}/{stamp}"
    suffix = 1
    while git.ok("rev-parse", "--verify", "--quiet", f"refs/heads/{name}"):
        suffix += 1
        name = f"{base}/{stamp}-{suffix}"
    git.run("branch", name, sha)
    prune(git, now(), keep=DEFAULT_KEEP, max_age_days=DEFAULT_MAX_AGE_DAYS)
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


def refuse_upstream(git: Git, cfg: Config) -> None:
    """Refuse when the fork remote is the upstream repository (same remote, same URL or same owner/name)."""
    remote = cfg.fork_remote
    if remote == cfg.upstream_remote:
        raise AutogitRefused(f"fork remote {remote!r} is the upstream remote; push only to your fork")
    url = git.remote_url(remote)
    upstream_url = git.run("remote", "get-url", cfg.upstream_remote, check=False).stdout.strip()
    slug = repo_slug(url)
    if (upstream_url and _same_url(url, upstream_url)) or slug.lower() == cfg.codehost_repo.lower():
        raise AutogitRefused(f"remote {remote!r} ({url}) points at the upstream repository {cfg.codehost_repo}; "
                             f"rewrites and pushes go to your fork only "
                             f"(set `git remote set-url {remote} <your fork>`)")


def _same_url(a: str, b: str) -> bool:
    def norm(u: str) -> str:
        return u.rstrip("/").removesuffix(".git").lower()
    return norm(a) == norm(b)


@dataclasses.dataclass
class LeasePlan:
    """A prepared rewrite push: remote, branch, the lease (tracking sha), the remote tip and its backup."""

    remote: str
    branch: str
    expected: str | None
    remote_tip: str | None
    backup: str | None


def fetch_remote_tip(git: Git, remote: str, branch: str) -> str | None:
    """The remote's ``refs/heads/<branch>`` now, fetched into a private ref (the tracking ref is untouched)."""
    probe = f"refs/hp-agent/probe/{remote}/{branch}"
    proc = git.run("fetch", "--quiet", "--no-tags", "--no-write-fetch-head", remote,
                   f"+refs/heads/{branch}:{probe}", check=False)
    if proc.returncode != 0:
        if "couldn't find remote ref" in (proc.stderr + proc.stdout).lower():
            return None
        raise GitError(f"cannot fetch {remote}/{branch} to check what a rewrite would replace: "
                       f"{(proc.stderr or proc.stdout).strip()}; nothing was changed")
    sha = git.head_sha(probe)
    git.run("update-ref", "-d", probe)
    return sha


def _contained(git: Git, sha: str, branch: str) -> bool:
    """True when ``sha`` is in the history of the branch's tip or of any of its reflog entries."""
    reflog = git.run("reflog", "show", "--format=%H", f"refs/heads/{branch}", check=False).stdout.split()
    for tip in dict.fromkeys([git.head_sha(f"refs/heads/{branch}"), *reflog[:200]]):
        if git.ok("merge-base", "--is-ancestor", sha, tip):
            return True
    return False


def _unseen(git: Git, tip: str, branch: str) -> str:
    lines = git.out("log", "--format=%h %an: %s", "-n", "10", tip, "--not", f"refs/heads/{branch}").splitlines()
    return "; ".join(lines) or tip[:12]


def prepare_rewrite_push(git: Git, cfg: Config, branch: str, now: UtcNow = utc_now) -> LeasePlan:
    """Check and back up what a rewrite push of ``branch`` would replace (see the module docstring)."""
    refuse_protected(cfg, branch, "push to")
    refuse_upstream(git, cfg)
    remote = cfg.fork_remote
    expected = git.tracking_sha(remote, branch)
    tip = fetch_remote_tip(git, remote, branch)
    backup = backup_branch(git, branch, now, target=tip, prefix=f"backup/{remote}/{branch}") if tip else None
    if tip is None:
        return LeasePlan(remote, branch, None, None, None)  # gone from the remote: nothing to overwrite
    if tip != expected:
        seen = f"{remote}/{branch} was {expected[:12]} when you last fetched" if expected else \
            f"you never fetched {remote}/{branch}"
        raise AutogitRefused(f"{remote}/{branch} is at {tip[:12]} but {seen}; commits you "
                             f"have not seen: {_unseen(git, tip, branch)}. Kept in branch {backup}. "
                             f"Integrate them first (`git fetch {remote} && git rebase {remote}/{branch}`), "
                             "then retry; "
                             "nothing was rewritten or pushed")
    if not _contained(git, tip, branch):
        raise AutogitRefused(f"{remote}/{branch} ({tip[:12]}) holds commits your branch never contained: "
                             f"{_unseen(git, tip, branch)}. Kept in branch {backup}. Integrate them first "
                             f"(`git rebase {remote}/{branch}`), then retry; nothing was rewritten or pushed")
    return LeasePlan(remote, branch, expected, tip, backup)


def push(git: Git, cfg: Config, branch: str, lease: LeasePlan | None = None, rewrite: bool = False) -> str:
    """Push HEAD to ``<fork_remote>/<branch>``; a rewrite needs a :class:`LeasePlan` and uses
    ``--force-with-lease=<ref>:<tracking sha>``.

    Never pushes to a protected branch and never to the upstream repository.  Returns the command run.
    """
    refuse_protected(cfg, branch, "push to")
    refuse_upstream(git, cfg)
    if rewrite and lease is None:
        raise AutogitRefused("a rewrite push needs a prepared lease (prepare_rewrite_push); refusing to force")
    remote = cfg.fork_remote
    lease_sha = lease.expected if lease else None
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


__all__ = ["AutogitRefused", "GitError", "LeasePlan", "Stash", "backup_branch", "prepare_rewrite_push", "push",
           "refuse_protected", "refuse_upstream", "repo_slug", "rollback_on_error", "utc_now"]
