# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Backup branches (``backup/<branch>/<UTC stamp>``, ``backup/<remote>/<branch>/<UTC stamp>``): list and prune.

autogit writes one before every history rewrite (and of a remote tip before a rewrite push); the
before-shell guard writes one before a destructive command on a clean tree. A backup of a commit that
already has a backup in the same group is not written again (the existing one is reused), so repeated
refused attempts do not pile up branches.

Pruning, in each group (the name without its stamp), drops every backup beyond the ``keep`` newest and every
backup older than ``max_age_days`` except the group's newest (one way back always stays); it runs after each
new backup. ``hp-agent git backups`` lists them (with ``--prune`` it deletes those the policy drops and prints
each name with its commit, so any can be recreated with ``git branch NAME SHA``).
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import re

from hp_agent.autogit.gitcmd import Git

PREFIX = "backup/"
DEFAULT_KEEP = 10
DEFAULT_MAX_AGE_DAYS = 30
_STAMP = re.compile(r"/(\d{8}T\d{6}Z)(?:-\d+)?$")


@dataclasses.dataclass
class Backup:
    """One backup branch: its name, group (name without the stamp), commit and creation time (UTC)."""

    name: str
    group: str
    sha: str
    when: _dt.datetime | None

    def age_days(self, now: _dt.datetime) -> float | None:
        """Age in days at ``now`` (None when the name carries no stamp)."""
        return None if self.when is None else (now - self.when).total_seconds() / 86400

    def to_dict(self, now: _dt.datetime) -> dict:
        """JSON form."""
        age = self.age_days(now)
        return {"name": self.name, "group": self.group, "sha": self.sha,
                "created": self.when.isoformat() if self.when else None,
                "age_days": None if age is None else round(age, 2)}


def list_backups(git: Git) -> list[Backup]:
    """Every ``backup/...`` branch, grouped names sorted oldest first within a group."""
    raw = git.out("for-each-ref", "--format=%(refname:short) %(objectname)", f"refs/heads/{PREFIX}")
    out = []
    for line in raw.splitlines():
        name, _, sha = line.partition(" ")
        match = _STAMP.search(name)
        when = _dt.datetime.strptime(match.group(1), "%Y%m%dT%H%M%SZ").replace(tzinfo=_dt.timezone.utc) \
            if match else None
        out.append(Backup(name, name[:match.start()] if match else name, sha, when))
    return sorted(out, key=lambda b: (b.group, b.name))


def existing_backup(git: Git, group: str, sha: str) -> str | None:
    """A backup branch of ``group`` already at ``sha`` (reused instead of writing another)."""
    raw = git.out("for-each-ref", "--format=%(refname:short)", "--points-at", sha, f"refs/heads/{group}/")
    names = [n for n in raw.splitlines() if _STAMP.search(n) and n[:_STAMP.search(n).start()] == group]
    return names[-1] if names else None


def to_prune(backups: list[Backup], now: _dt.datetime, keep: int = DEFAULT_KEEP,
             max_age_days: float = DEFAULT_MAX_AGE_DAYS) -> list[Backup]:
    """The backups the policy drops: beyond the ``keep`` newest of their group, or older than ``max_age_days``
    unless the newest of their group."""
    if keep < 0 or max_age_days < 0:
        raise ValueError(f"keep and max-age-days must be >= 0, got {keep} and {max_age_days}")
    groups: dict[str, list[Backup]] = {}
    for backup in backups:
        groups.setdefault(backup.group, []).append(backup)
    drop = []
    for members in groups.values():
        newest_first = sorted(members, key=lambda b: b.when or now, reverse=True)
        for rank, backup in enumerate(newest_first):
            age = backup.age_days(now)
            if rank >= keep or (rank > 0 and age is not None and age > max_age_days):
                drop.append(backup)
    return drop


def prune(git: Git, now: _dt.datetime, keep: int = DEFAULT_KEEP,
          max_age_days: float = DEFAULT_MAX_AGE_DAYS) -> list[Backup]:
    """Delete the backups :func:`to_prune` drops; return them (name and commit, to recreate one)."""
    dropped = to_prune(list_backups(git), now, keep, max_age_days)
    for backup in dropped:
        git.run("update-ref", "-d", f"refs/heads/{backup.name}", backup.sha)
    return dropped
