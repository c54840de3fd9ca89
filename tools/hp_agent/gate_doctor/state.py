# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Persisted per-PR watch state: a restart resumes exactly where the watcher stopped."""
from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

from hp_agent.redact import redact_obj

TERMINAL = ("passed", "patch-ceiling", "flake-ceiling", "needs-human", "sticky-flake", "interrupted")
PHASES = ("diagnose", "check-pr", "wait-check", "retest", "wait-build", "classify", "wait-labels", "await-fix")
WAITING = ("wait-check", "wait-build", "wait-labels")
MAX_FIX_COMMITS = 2
MAX_FLAKE_RETESTS = 5


@dataclasses.dataclass
class WatchState:
    """Everything the watcher needs to resume: phase, head, builds, counters, ledger, timeline."""

    pr: str
    phase: str = "diagnose"
    terminal: str | None = None
    head_sha: str | None = None
    attempt: int = 0
    phase_started: float | None = None
    next_wake: float | None = None
    retest_at: float | None = None
    current_build: int | None = None
    builds_seen: list[int] = dataclasses.field(default_factory=list)
    bypass_builds: list[int] = dataclasses.field(default_factory=list)
    fix_commits: int = 0
    flake_retests: int = 0
    comments_posted: int = 0
    skip_ledger: list[dict] = dataclasses.field(default_factory=list)
    failure_history: list[list[str]] = dataclasses.field(default_factory=list)
    last_diagnosis: dict | None = None
    last_triage: dict | None = None
    timeline: list[dict] = dataclasses.field(default_factory=list)
    note: str | None = None
    pending_post: dict | None = None
    posted_keys: list[str] = dataclasses.field(default_factory=list)

    def counters(self) -> dict:
        """The bounded counters and their ceilings."""
        return {"fix_commits": self.fix_commits, "max_fix_commits": MAX_FIX_COMMITS,
                "flake_retests": self.flake_retests, "max_flake_retests": MAX_FLAKE_RETESTS,
                "comments_posted": self.comments_posted, "temporary_skips": len(self.skip_ledger)}

    def to_dict(self) -> dict:
        """JSON-ready form."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "WatchState":
        """Rebuild from :meth:`to_dict` output; ValueError naming unknown fields or a bad phase."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise ValueError(f"watch state has unknown fields {sorted(unknown)}")
        state = cls(**data)
        if state.phase not in PHASES:
            raise ValueError(f"watch state phase {state.phase!r} is not one of {', '.join(PHASES)}")
        if state.terminal is not None and state.terminal not in TERMINAL:
            raise ValueError(f"watch state terminal {state.terminal!r} is not one of {', '.join(TERMINAL)}")
        return state


class StateStore:
    """JSON files ``<dir>/<pr>.json`` written atomically."""

    def __init__(self, directory: Path) -> None:
        self.dir = Path(directory)

    def path(self, pr: str) -> Path:
        """File of PR ``pr``."""
        return self.dir / f"{pr}.json"

    def load(self, pr: str) -> WatchState | None:
        """The saved state of ``pr`` or None; ValueError naming the file when it is corrupt."""
        path = self.path(pr)
        if not path.is_file():
            return None
        try:
            return WatchState.from_dict(json.loads(path.read_text(encoding="utf-8")))
        except (json.JSONDecodeError, TypeError, ValueError) as exc:
            raise ValueError(f"{path}: corrupt watch state ({exc}); move it away to start over") from exc

    def save(self, state: WatchState) -> None:
        """Write atomically (temp file + rename)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.path(state.pr)
        tmp = path.with_suffix(".json.tmp")
        text = json.dumps(redact_obj(state.to_dict()), indent=2, ensure_ascii=False, default=str)
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
