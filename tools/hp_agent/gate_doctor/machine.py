# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The watch state machine: diagnose → check-pr → wait-check → retest → wait-build → classify → …

Every transition is saved before the next one starts, so a restarted watcher resumes in the same phase
with the same back-off attempt, builds seen and counters.  Waiting phases poll with the back-off of
:mod:`hp_agent.gate_doctor.backoff`; the attempt counter resets when a new phase starts. Timeline entries
are written before the state is saved (a kill during a wait keeps the ``wait`` entry).

Comments are posted exactly once whatever the watcher is killed by: before posting, an idempotency key,
the body, how many such comments the PR already has and the transition that follows are saved
(``pending_post``); after posting, the transition is made and saved. A watcher that finds a pending post
on start asks the backend whether the comment exists (more comments with that body than before) and
either completes the transition or forgets the post - it never posts twice. Ctrl-C and SIGTERM end in
``interrupted`` (resumable).
"""
from __future__ import annotations

import random
import signal
import threading
import uuid
from typing import Any, Protocol

from hp_agent.gate_doctor import backoff
from hp_agent.gate_doctor import protocol as P
from hp_agent.gate_doctor.clock import Clock
from hp_agent.gate_doctor.state import MAX_FIX_COMMITS, MAX_FLAKE_RETESTS, WAITING, StateStore, WatchState
from hp_agent.gate_doctor.triage import triage



class Backend(Protocol):
    """What the state machine needs from a backend (see :mod:`hp_agent.gate_doctor.backends`)."""

    root: Any

    def snapshot(self) -> dict:
        """Head sha, labels, comments of the PR now."""

    def post(self, command: str) -> None:
        """Post a comment."""

    def find_build(self, since_s: float | None, exclude: set[int]) -> dict | None:
        """Newest build of the PR after ``since_s`` not in ``exclude``."""

    def diagnose_build(self, number: int) -> dict:
        """Stages, bypass signals and findings of a build."""

    def changed_files(self) -> list[str]:
        """Paths the PR changes."""

    def master_failures(self) -> set[str]:
        """Failure keys seen on recent base-branch builds."""

    def added_skips(self) -> list[dict]:
        """Skip/xfail markers the PR adds."""

    def count_posts(self, body: str) -> int:
        """How many comments with exactly ``body`` the PR has (the idempotency check of a post)."""


MAX_POLLS = {"wait-check": 6, "wait-build": 12, "wait-labels": 6}
MAX_BYPASS = 3
KEY_MARK = "<!-- gate-doctor:{key} -->"


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived: handled like Ctrl-C (state saved as ``interrupted``)."""


class Watcher:
    """Drive one PR to a terminal state (or to ``await-fix``, which hands a fix list to the assistant)."""

    def __init__(self, backend: Backend, store: StateStore, pr: str, clock: Clock | None = None,
                 rng: random.Random | None = None) -> None:
        self.backend = backend
        self.store = store
        self.clock = clock or Clock()
        self.rng = rng or random.Random()
        self.state = store.load(pr) or WatchState(pr=pr)
        self._snap: dict | None = None

    # -- bookkeeping --------------------------------------------------------------------------------
    def event(self, kind: str, **data: Any) -> None:
        """Append a timeline entry."""
        self.state.timeline.append({"t": self.clock.now(), "phase": self.state.phase, "event": kind, **data})

    def goto(self, phase: str, why: str | None = None) -> None:
        """Enter ``phase`` (resetting the back-off attempt when the phase changes)."""
        if phase != self.state.phase:
            self.state.attempt = 0
            self.state.phase_started = self.clock.now()
            self.state.next_wake = None
        self.event("enter", to=phase, why=why)
        self.state.phase = phase

    def finish(self, terminal: str, note: str) -> None:
        """Stop in a terminal state."""
        self.state.terminal = terminal
        self.state.note = note
        self.event("terminal", state=terminal, note=note)

    def post(self, text: str, then: dict) -> None:
        """Post ``text`` exactly once, then make the transition ``then`` (``goto``/``why``, ``finish``,
        ``retest_at``); see the module docstring for the kill-safe protocol."""
        key = uuid.uuid4().hex[:12]
        body = text if text.startswith("/") else f"{text}\n\n{KEY_MARK.format(key=key)}"
        self.state.pending_post = {"key": key, "body": body, "before": self.backend.count_posts(body), "then": then}
        self.event("posting", key=key, body=text.splitlines()[0])
        self.store.save(self.state)
        self.backend.post(body)
        self._complete_post()

    def _complete_post(self) -> None:
        pending = self.state.pending_post or {}
        self.state.pending_post = None
        self.state.posted_keys.append(pending["key"])
        self.state.comments_posted += 1
        self.event("posted", key=pending["key"], body=pending["body"].splitlines()[0])
        then = pending.get("then") or {}
        if "retest_at" in then:
            self.state.retest_at = then["retest_at"]
        if "goto" in then:
            self.goto(then["goto"], then.get("why"))
        if "finish" in then:
            self.finish(*then["finish"])
        self.store.save(self.state)

    def settle_pending_post(self) -> None:
        """After a restart: a post saved as pending either happened (complete it) or did not (forget it)."""
        pending = self.state.pending_post
        if not pending:
            return
        if self.backend.count_posts(pending["body"]) > pending["before"]:
            self.event("post-confirmed", key=pending["key"])
            self._complete_post()
            return
        self.event("post-not-made", key=pending["key"])
        self.state.pending_post = None
        self.store.save(self.state)

    def snap(self) -> dict:
        """A fresh PR snapshot; a changed head sha sends the machine back to check-pr."""
        snap = self.backend.snapshot()
        self._snap = snap
        head = snap["head_sha"]
        if self.state.head_sha is None:
            self.state.head_sha = head
            self._refresh_skip_ledger()
        elif head != self.state.head_sha:
            self._new_push(head)
            self._refresh_skip_ledger()
        return snap

    def _refresh_skip_ledger(self) -> None:
        """Record the skip/xfail markers the PR's current head adds (they must go before merge)."""
        skips = [dict(s, head_sha=self.state.head_sha) for s in self.backend.added_skips()]
        if skips or self.state.skip_ledger:
            self.event("skip-ledger", count=len(skips))
        self.state.skip_ledger = skips

    def _new_push(self, head: str) -> None:
        old, self.state.head_sha = self.state.head_sha, head
        if self.state.phase == "await-fix":
            self.state.fix_commits += 1
        self.state.failure_history = []
        self.event("new-push", old=old, new=head, fix_commits=self.state.fix_commits)
        self.goto("check-pr", "new push (pr-check-pass may have been dropped)")

    # -- the loop -----------------------------------------------------------------------------------
    def run(self, max_steps: int | None = None) -> WatchState:
        """Step until terminal, ``await-fix`` or ``max_steps``; Ctrl-C or SIGTERM ends in ``interrupted``."""
        previous = _on_sigterm()
        try:
            self._run(max_steps)
        except KeyboardInterrupt as exc:
            how = "SIGTERM" if isinstance(exc, Terminated) else "Ctrl-C"
            self.finish("interrupted", f"interrupted ({how}) in phase {self.state.phase}; run watch again to resume")
            self.store.save(self.state)
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
        return self.state

    def _run(self, max_steps: int | None) -> None:
        if self.state.terminal == "interrupted":
            self.state.terminal = None
            self.event("resumed")
        self.settle_pending_post()
        steps = 0
        while self.state.terminal is None and (max_steps is None or steps < max_steps):
            phase_before = self.state.phase
            self.step()
            self.store.save(self.state)
            steps += 1
            if self.state.phase == "await-fix" and phase_before == "await-fix":
                break

    def step(self) -> None:
        """Run the handler of the current phase once."""
        handler = getattr(self, "phase_" + self.state.phase.replace("-", "_"))
        handler()

    def wait_or_give_up(self, why: str) -> None:
        """Sleep the phase's next back-off delay, or end in needs-human after too many polls."""
        phase = self.state.phase
        if self.state.attempt >= MAX_POLLS[phase]:
            self.finish("needs-human", f"{why}: still not there after {self.state.attempt} polls in {phase}")
            return
        delay = backoff.delay(self.state.attempt, self.rng)
        self.state.attempt += 1
        self.state.next_wake = self.clock.now() + delay
        self.event("wait", seconds=round(delay, 1), why=why)  # in the timeline before the state is saved
        self.store.save(self.state)
        self.clock.sleep(delay)

    # -- phases -------------------------------------------------------------------------------------
    def phase_diagnose(self) -> None:
        """Start (or resume from) a fresh look at the PR."""
        self.snap()
        if self.state.phase == "diagnose":
            self.goto("check-pr", "start")

    def phase_check_pr(self) -> None:
        """Post ``/check-pr`` unless ``pr-check-pass`` is already there."""
        snap = self.snap()
        if self.state.phase != "check-pr":
            return
        if P.LABEL_CHECK in snap["labels"]:
            self.goto("retest", f"{P.LABEL_CHECK} present")
            return
        self.post(P.CMD_CHECK, {"goto": "wait-check", "why": f"posted {P.CMD_CHECK}"})

    def phase_wait_check(self) -> None:
        """Wait for ``pr-check-pass``; a bot rejection of the description ends in needs-human."""
        snap = self.snap()
        if self.state.phase != "wait-check":
            return
        if P.LABEL_CHECK in snap["labels"]:
            self.goto("retest", f"{P.LABEL_CHECK} appeared")
            return
        since = self.state.phase_started or 0
        rejected = [c for c in snap["comments"] if P.CHECK_FAILED_RE.search(c["body"] or "")
                    and _ts(c.get("created_at")) >= since - 1]
        if rejected:
            self.finish("needs-human", f"the PR check bot rejected the description: {rejected[-1]['body'][:300]}")
            return
        self.wait_or_give_up(f"waiting for label {P.LABEL_CHECK}")

    def phase_retest(self) -> None:
        """Post ``/retest`` — only with ``pr-check-pass`` present (else it would be a bypass build)."""
        snap = self.snap()
        if self.state.phase != "retest":
            return
        if P.LABEL_CHECK not in snap["labels"]:
            self.goto("check-pr", f"{P.LABEL_CHECK} missing; a /retest now would only start a bypass build")
            return
        self.post(P.CMD_RETEST, {"goto": "wait-build", "why": f"posted {P.CMD_RETEST}", "retest_at": self.clock.now()})

    def phase_wait_build(self) -> None:
        """Wait for the PR's next build to finish."""
        self.snap()
        if self.state.phase != "wait-build":
            return
        build = self.backend.find_build(self.state.retest_at, set(self.state.builds_seen))
        if build is None or build.get("queued") or build.get("building"):
            self.wait_or_give_up(_build_wait_reason(build))
            return
        self.state.current_build = int(build["number"])
        self.state.builds_seen.append(self.state.current_build)
        self.event("build-finished", build=self.state.current_build, result=build.get("result"))
        self.goto("classify", f"build #{self.state.current_build} finished")

    def phase_classify(self) -> None:
        """Decide what the finished build means: bypass, success, or failures to triage."""
        diag = self.backend.diagnose_build(self.state.current_build)
        self.state.last_diagnosis = _public_diag(diag)
        if diag["bypass"]["is_bypass"]:
            self._on_bypass(diag)
        elif diag["build"]["result"] in P.SUCCESS_RESULTS:
            self.goto("wait-labels", f"build #{self.state.current_build} passed (real pipeline)")
        else:
            self._on_failure(diag)

    def _on_bypass(self, diag: dict) -> None:
        self.state.bypass_builds.append(self.state.current_build)
        self.event("bypass-build", build=self.state.current_build, reason=diag["bypass"]["reason"])
        if len(self.state.bypass_builds) >= MAX_BYPASS:
            self.finish("needs-human", f"{len(self.state.bypass_builds)} bypass builds; the gate does not start "
                                       f"the real pipeline")
            return
        self.goto("check-pr", f"build #{self.state.current_build} was a fake-green bypass build, not a pass")

    def _on_failure(self, diag: dict) -> None:
        keys = [f.key() for f in diag["findings"]]
        self.state.failure_history.append(keys)
        ctx = {"root": self.backend.root, "changed": self.backend.changed_files(),
               "master_failures": self.backend.master_failures(), "history": self.state.failure_history}
        result = triage(diag["findings"], ctx)
        self.state.last_triage = result
        self.event("triage", build=self.state.current_build, decision=result["decision"],
                   failures=len(result["items"]))
        getattr(self, "_decide_" + result["decision"].replace("-", "_"))(result)

    def _decide_fix(self, result: dict) -> None:
        if self.state.fix_commits >= MAX_FIX_COMMITS:
            self.finish("patch-ceiling", f"PR-induced failures remain after {self.state.fix_commits} fix commits")
            return
        self.goto("await-fix", f"{len(result['fixes'])} PR-induced failure(s) to fix")

    def _decide_retest(self, result: dict) -> None:
        if self.state.flake_retests >= MAX_FLAKE_RETESTS:
            self.finish("flake-ceiling", f"{self.state.flake_retests} flake retests used; failures persist")
            return
        self.state.flake_retests += 1
        self.goto("retest", f"unrelated random failure(s) {', '.join(i['key'] for i in result['items'])}")

    def _decide_report(self, result: dict) -> None:
        sticky = [i for i in result["items"] if i["decision"] == "report"]
        lines = [f"- `{i['key']}` failed in {i['failed_builds']} builds: {i['finding']['message'][:200]}"
                 for i in sticky]
        self.post("gate-doctor: failures unrelated to this PR keep recurring (sticky flake); a maintainer "
                  "please take a look:\n" + "\n".join(lines),
                  {"finish": ["sticky-flake", f"{len(sticky)} sticky unrelated failure(s) reported to maintainers"]})

    def _decide_needs_human(self, result: dict) -> None:
        self.finish("needs-human", f"build #{self.state.current_build} failed without a parseable cause "
                                   f"({len(result['items'])} marker(s)); read the log")

    def phase_wait_labels(self) -> None:
        """After a real success: wait until both gate labels are present (they can lag)."""
        snap = self.snap()
        if self.state.phase != "wait-labels":
            return
        if P.is_green(snap["labels"], real_success=True):
            note = f"real build #{self.state.current_build} passed and both labels are present"
            if self.state.skip_ledger:
                where = ", ".join(f"{s['file']}:{s['line']}" for s in self.state.skip_ledger)
                note += f"; the PR still adds {len(self.state.skip_ledger)} temporary skip(s) to remove: {where}"
            self.finish("passed", note)
            return
        self.wait_or_give_up(f"waiting for labels {P.LABEL_CHECK} + {P.LABEL_PIPELINE}")

    def phase_await_fix(self) -> None:
        """The assistant must push a fix; a new head sha moves on (counted as a fix commit)."""
        self.snap()


def _raise_terminated(signum: int, frame: Any) -> None:
    del signum, frame
    raise Terminated()


def _on_sigterm() -> Any:
    """Make SIGTERM raise :class:`Terminated` (main thread only); return the previous handler (None: unchanged)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, _raise_terminated)


def _build_wait_reason(build: dict | None) -> str:
    if build is None:
        return "waiting for the build to start"
    if build.get("queued"):
        return f"build queued: {build.get('why') or 'waiting for an executor'}"
    return f"build #{build['number']} running"


def _ts(value: Any) -> float:
    """ISO-8601 or epoch value → epoch seconds (0 when absent or unreadable)."""
    import datetime as _dt  # pylint: disable=import-outside-toplevel
    if value is None:
        return 0.0
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return _dt.datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def _public_diag(diag: dict) -> dict:
    out = dict(diag)
    out["findings"] = [f.to_dict() for f in diag["findings"]]
    return out


__all__ = ["Watcher", "WAITING"]
