# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""gate-doctor killed at every point of posting a comment never posts it twice; SIGTERM ends in interrupted;
a kill during a wait keeps the wait in the saved timeline. Fake GitCode + Jenkins over loopback."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fakes import FakeForge  # noqa: E402
from fakes.gate import GateScenario  # noqa: E402
from hp_agent.gate_doctor.clock import Clock  # noqa: E402
from hp_agent.gate_doctor.state import StateStore  # noqa: E402

from .test_gate_doctor import PR, SHA1, TOKEN, _env, comments, watcher  # noqa: E402  pylint: disable=unused-import
from .test_gate_doctor import clock, forge, root  # noqa: E402,F401  pylint: disable=unused-import

STICKY = "tests/ut/test_other.py::test_y"
KILL_POINTS = ["before-save", "after-save", "after-post", "after-complete"]


class Killed(BaseException):
    """Stands in for SIGKILL: nothing after it runs, no handler sees it."""


class KillingStore(StateStore):
    """A state store that dies around the save of a post, at the point a test names."""

    def __init__(self, directory: Path, point: str, marker: str) -> None:
        super().__init__(directory)
        self.point, self.marker, self.armed = point, marker, True

    def save(self, state) -> None:
        pending = state.pending_post or {}
        mine = self.marker in pending.get("body", "")
        completed = not pending and state.timeline and state.timeline[-1]["event"] != "posted" and any(
            e["event"] == "posted" and self.marker in e.get("body", "") for e in state.timeline[-4:])
        if self.armed and self.point == "before-save" and mine:
            self.armed = False
            raise Killed
        super().save(state)
        if self.armed and ((self.point == "after-save" and mine) or (self.point == "after-complete" and completed)):
            self.armed = False
            raise Killed


def _kill_after_post(w, marker: str) -> None:
    real = w.backend.post

    def post(body: str) -> None:
        real(body)
        if marker in body and not getattr(post, "fired", False):
            post.fired = True
            raise Killed
    w.backend.post = post


@pytest.mark.parametrize("point", KILL_POINTS)
@pytest.mark.parametrize("marker", ["/check-pr", "/retest", "sticky flake"])
def test_a_kill_at_any_point_of_a_post_never_posts_it_twice(forge, root, clock, point, marker):
    sticky = marker == "sticky flake"
    forge.scenario = GateScenario([("pytest", STICKY)] * 2 if sticky else ["pass"])
    store = KillingStore(root / "state", point, marker)
    first = watcher(forge, root, clock, store)
    if point == "after-post":
        _kill_after_post(first, marker)
    with pytest.raises(Killed):
        first.run()
    saved = json.loads(store.path(str(PR)).read_text())
    if point == "after-save":
        assert saved["pending_post"]["body"].startswith(marker if not sticky else "gate-doctor:")
    second = watcher(forge, root, clock, StateStore(root / "state"))
    state = second.run()
    assert state.terminal == ("sticky-flake" if sticky else "passed"), state.note
    assert sum(marker in body for body in comments(forge)) == 1, comments(forge)
    events = [e["event"] for e in state.timeline]
    expected = {"after-save": "post-not-made", "after-post": "post-confirmed"}.get(point)
    if expected:
        assert expected in events
    assert state.pending_post is None and state.comments_posted == len(comments(forge))


def test_sigterm_is_recorded_as_interrupted_and_the_wait_is_in_the_timeline(forge, root, clock):
    forge.scenario = GateScenario(["pass"])
    store = StateStore(root / "state")
    previous = signal.getsignal(signal.SIGTERM)
    calls = {"n": 0}
    real_sleep = clock.sleep

    def sleep(seconds: float) -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.5)  # the handler interrupts this
        real_sleep(seconds)
    clock.sleep = sleep
    state = watcher(forge, root, clock, store).run()
    assert state.terminal == "interrupted" and "SIGTERM" in state.note
    assert signal.getsignal(signal.SIGTERM) is previous
    saved = store.load(str(PR))
    assert saved.terminal == "interrupted" and saved.timeline[-2]["event"] == "wait"
    clock.sleep = real_sleep
    assert watcher(forge, root, clock, store).run().terminal == "passed"
    assert comments(forge).count("/check-pr") == 1


def test_the_cli_watcher_killed_with_sigterm_mid_wait(tmp_path):
    env = dict(os.environ, HP_AGENT_TIME_SCALE="0.02", XDG_CONFIG_HOME=str(tmp_path / "cfg"))
    env.pop("HP_AGENT_REPO", None)
    with FakeForge(Clock(), token=TOKEN) as f:
        f.add_pr(PR, SHA1)
        f.scenario = GateScenario(["pass"], check_delay=3600)  # the label never comes during the test
        env.update(_env(f))
        proc = subprocess.Popen([str(Path(sys.executable).with_name("hp-agent")), "gate-doctor", "watch", str(PR),
                                 "--state-dir", "st"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        state_file = tmp_path / "st" / f"{PR}.json"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if state_file.is_file() and '"event": "wait"' in state_file.read_text():
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=60)
        saved = json.loads(state_file.read_text())
        assert proc.returncode == 143, err  # killed, resumable: distinct from a red gate (1)
        assert saved["terminal"] == "interrupted" and "SIGTERM" in saved["note"]
        assert any(e["event"] == "wait" for e in saved["timeline"]) and saved["phase"] == "wait-check"
        assert [c["body"] for c in f.comments[PR]] == ["/check-pr"]
        report = subprocess.run([str(Path(sys.executable).with_name("hp-agent")), "gate-doctor", "report", str(PR),
                                 "--state-dir", "st"], cwd=tmp_path, env=env, capture_output=True, text=True,
                                timeout=60, check=False)
        assert report.returncode == 143 and "interrupted" in report.stdout, report.stderr
