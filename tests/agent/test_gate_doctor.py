# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""gate-doctor against a local GitCode v5 + Jenkins fake: diagnose, watch scenarios, CLI, local mode."""
from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fakes import FakeForge  # noqa: E402
from fakes.gate import STAGES, GateScenario, pytest_log, stages_for  # noqa: E402
from fakes.server import JOB  # noqa: E402
from hp_agent.autogit.codehost import CodeHost  # noqa: E402
from hp_agent.cli import cli  # noqa: E402
from hp_agent.gate_doctor import backoff  # noqa: E402
from hp_agent.gate_doctor.backends import RemoteBackend  # noqa: E402
from hp_agent.gate_doctor.clock import Clock, FakeClock  # noqa: E402
from hp_agent.gate_doctor.jenkins import JenkinsClient  # noqa: E402
from hp_agent.gate_doctor.machine import Watcher  # noqa: E402
from hp_agent.gate_doctor.report import diagnose, final_report, render_text  # noqa: E402
from hp_agent.gate_doctor.state import StateStore  # noqa: E402

TOKEN = "s3cr3t-t0ken-value"
PR = 42
SHA1, SHA2, SHA3 = "a" * 40, "b" * 40, "c" * 40


@pytest.fixture()
def clock():
    """The shared fake clock (nothing sleeps)."""
    return FakeClock()


@pytest.fixture()
def forge(clock):
    """Fake forge with PR 42 (no labels) changing hyper_parallel/core/mesh.py."""
    with FakeForge(clock, token=TOKEN) as f:
        f.add_pr(PR, SHA1)
        f.files[PR] = ["hyper_parallel/core/mesh.py"]
        yield f


@pytest.fixture()
def root(tmp_path):
    """A source tree for import-reach triage: one test reaches mesh.py, one does not."""
    (tmp_path / "hyper_parallel/core").mkdir(parents=True)
    (tmp_path / "hyper_parallel/core/mesh.py").write_text("X = 1\n")
    (tmp_path / "hyper_parallel/core/other.py").write_text("Y = 1\n")
    (tmp_path / "tests/ut").mkdir(parents=True)
    (tmp_path / "tests/ut/test_mesh.py").write_text("from hyper_parallel.core import mesh\n")
    (tmp_path / "tests/ut/test_other.py").write_text("from hyper_parallel.core.other import Y\n")
    return tmp_path


def backend(forge, root) -> RemoteBackend:
    """Remote backend against the fake."""
    host = CodeHost(forge.api, forge.repo, TOKEN)
    return RemoteBackend(PR, host, JenkinsClient(forge.jenkins, JOB), root)


def watcher(forge, root, clock, store=None) -> Watcher:
    """A watcher with deterministic jitter."""
    store = store or StateStore(root / ".gate" / "doctor")
    return Watcher(backend(forge, root), store, str(PR), clock, random.Random(7))


def comments(forge) -> list[str]:
    """Bodies of the PR's comments."""
    return [c["body"] for c in forge.comments[PR]]


# -- back-off -------------------------------------------------------------------------------------------
def test_backoff_schedule_jitter_and_cap():
    assert [backoff.delay(i, jitter=0) for i in range(6)] == [60, 270, 1200, 1800, 1800, 1800]
    rng = random.Random(1)
    for attempt in range(10):
        d = backoff.delay(attempt, rng)
        base = backoff.SCHEDULE_S[min(attempt, 3)]
        assert base * 0.9 <= d <= min(3600, base * 1.1)
    assert backoff.delay(3, jitter=5.0, rng=random.Random(3)) <= backoff.CAP_S
    with pytest.raises(ValueError, match="attempt"):
        backoff.delay(-1)


# -- diagnose -------------------------------------------------------------------------------------------
def test_diagnose_pylint_failure_to_file_line_rule(forge, root):
    result, stages = stages_for(("pylint",))
    forge.add_build(PR, result, 300, stages, console="huge console that must not be read")
    out = diagnose(backend(forge, root), str(PR))
    assert out["verdict"] == "failed" and out["green"] is False
    pylint = [f for f in out["findings"] if f["tool"] == "pylint"]
    assert pylint == [{"tool": "pylint", "rule": "C0301(line-too-long)", "message": "Line too long (131/120)",
                       "file": "hyper_parallel/core/mesh.py", "line": 7, "test": None, "stage": "Pylint"}]
    assert [s["status"] for s in out["stages"]][2] == "FAILED"
    assert out["log_source"] == "wfapi log of stage Pylint"
    assert not [r for r in forge.requests if r["path"].endswith("consoleText")]
    assert any("tree" in r["query"] and r["path"].endswith(f"/job/{JOB}/api/json") for r in forge.requests)
    fixes = out["triage"]["fixes"]
    assert fixes[0]["file"] == "hyper_parallel/core/mesh.py" and fixes[0]["line"] == 7
    assert out["triage"]["decision"] == "fix"


def test_diagnose_falls_back_to_console_and_matches_by_cause_and_description(forge, root):
    forge.add_build(PR, "FAILURE", 300, None, console=pytest_log("tests/ut/test_mesh.py::test_shape"),
                    param_name="UNRELATED")
    forge.add_build(PR, "ABORTED", 5, None)
    out = diagnose(backend(forge, root), str(PR))
    assert out["build"]["matched_by"] == "cause" and out["build"]["number"] == 101
    assert out["log_source"] == "consoleText"
    test = [f for f in out["findings"] if f["tool"] == "pytest"][0]
    assert test["test"] == "tests/ut/test_mesh.py::test_shape" and test["line"] == 14
    assert out["triage"]["items"][0]["pr_induced"] is True  # imports changed mesh.py


def test_bypass_build_after_premature_retest_is_never_green(forge, root):
    forge.scenario = GateScenario(["pass"])
    res = CliRunner().invoke(cli, ["gate-doctor", "retest", str(PR)], env=_env(forge), catch_exceptions=False)
    assert res.exit_code == 2 and "bypass" in res.stderr
    assert "/retest" not in comments(forge)
    forge.bot_comment(PR, "/retest", user="alice")
    forge.scenario.on_comment(forge, PR, "/retest")  # someone retested prematurely by hand
    forge.set_label(PR, "ci-pipeline-passed")  # even with a stale pipeline label
    out = diagnose(backend(forge, root), str(PR))
    assert out["verdict"] == "bypass" and out["green"] is False
    assert out["bypass"]["structural"] is True and out["bypass"]["short_duration"] is True


def test_bypass_detected_by_duration_when_no_pipeline_info(forge, root):
    forge.add_build(PR, "SUCCESS", 17, None)
    out = diagnose(backend(forge, root), str(PR))
    assert out["verdict"] == "bypass" and out["bypass"]["structural"] is None


# -- watch scenarios --------------------------------------------------------------------------------------
def test_watch_happy_path_with_label_lag(forge, root, clock):
    forge.scenario = GateScenario(["pass"], label_lag=2000)
    state = watcher(forge, root, clock).run()
    assert state.terminal == "passed"
    assert comments(forge) == ["/check-pr", "/retest"]
    assert state.comments_posted == 2
    lag_waits = [e["seconds"] for e in state.timeline if e["event"] == "wait" and "labels" in e["why"]]
    assert len(lag_waits) >= 2 and 54 <= lag_waits[0] <= 66 and 243 <= lag_waits[1] <= 297
    assert not any(s < 1 for s in clock.slept)


def test_watch_never_reports_bypass_green(forge, root, clock):
    forge.set_label(PR, "pr-check-pass")
    scenario = GateScenario(["pass"])
    forge.scenario = scenario
    original = scenario.on_comment

    def stale_label(f, pr, body):
        if body == "/retest" and not scenario.bypass_builds:
            f.set_label(pr, "pr-check-pass", False)  # the label was stale: the bot removes it, bypass runs
            f.set_label(pr, "ci-pipeline-passed")
        original(f, pr, body)
    scenario.on_comment = stale_label
    state = watcher(forge, root, clock).run()
    assert state.terminal == "passed"
    assert state.bypass_builds == scenario.bypass_builds and len(state.bypass_builds) == 1
    events = [e["event"] for e in state.timeline]
    assert events.index("bypass-build") < len(events) - 1
    assert comments(forge) == ["/retest", "/check-pr", "/retest"]
    assert state.builds_seen[-1] in scenario.real_builds


def test_watch_pylint_failure_then_fix_commit(forge, root, clock):
    forge.scenario = GateScenario([("pylint",), "pass"])
    store = StateStore(root / "state")
    state = watcher(forge, root, clock, store).run()
    assert state.phase == "await-fix" and state.terminal is None
    report = final_report(state)
    assert report["fixes"][0]["file"] == "hyper_parallel/core/mesh.py" and report["fixes"][0]["rule"].startswith("C0301")
    assert "hyper_parallel/core/mesh.py:7 C0301(line-too-long)" in render_text(report)
    forge.push(PR, SHA2)
    state = watcher(forge, root, clock, store).run()
    assert state.terminal == "passed" and state.fix_commits == 1
    assert comments(forge) == ["/check-pr", "/retest", "/check-pr", "/retest"]


def test_watch_patch_ceiling(forge, root, clock):
    forge.scenario = GateScenario([("pylint",)] * 3)
    store = StateStore(root / "state")
    for sha in (SHA2, SHA3):
        assert watcher(forge, root, clock, store).run().phase == "await-fix"
        forge.push(PR, sha)
    state = watcher(forge, root, clock, store).run()
    assert state.terminal == "patch-ceiling" and state.fix_commits == 2


def test_watch_random_flake_then_pass(forge, root, clock):
    forge.scenario = GateScenario([("pytest", "tests/ut/test_other.py::test_y"), "pass"])
    state = watcher(forge, root, clock).run()
    assert state.terminal == "passed" and state.flake_retests == 1
    item = [e for e in state.timeline if e["event"] == "triage"][0]
    assert item["decision"] == "retest"
    assert comments(forge) == ["/check-pr", "/retest", "/retest"]


def test_watch_sticky_flake_comments_for_maintainers(forge, root, clock):
    node = "tests/ut/test_other.py::test_y"
    forge.scenario = GateScenario([("pytest", node)] * 2)
    state = watcher(forge, root, clock).run()
    assert state.terminal == "sticky-flake" and state.flake_retests == 1
    assert node in comments(forge)[-1] and "maintainer" in comments(forge)[-1]
    assert not any(w in comments(forge)[-1].lower() for w in ("skip", "xfail", "tolerance"))


def test_watch_flake_ceiling(forge, root, clock):
    forge.scenario = GateScenario([("pytest", f"tests/ut/test_other.py::test_{i}") for i in range(6)])
    state = watcher(forge, root, clock).run()
    assert state.terminal == "flake-ceiling" and state.flake_retests == 5
    assert len(state.builds_seen) == 6


def test_watch_new_push_drops_pr_check_pass(forge, root, clock):
    scenario = GateScenario([("pytest", "tests/ut/test_other.py::test_y"), "pass"], build_time=4000)
    forge.scenario = scenario
    w = watcher(forge, root, clock)
    while w.state.phase != "wait-build" or w.state.attempt < 1:
        w.step()
    forge.push(PR, SHA2)  # new push while the build runs: labels dropped
    assert "pr-check-pass" not in forge.labels(PR)
    state = w.run()
    assert state.terminal == "passed" and state.head_sha == SHA2
    assert any(e["event"] == "new-push" for e in state.timeline)
    assert comments(forge).count("/check-pr") == 2
    assert state.fix_commits == 0


def test_watch_restart_mid_wait_resumes_with_counters(forge, root, clock):
    forge.scenario = GateScenario([("pytest", "tests/ut/test_other.py::test_y"), "pass"], build_time=3000)
    store = StateStore(root / "state")
    first = watcher(forge, root, clock, store)
    while not (first.state.phase == "wait-build" and first.state.flake_retests == 1 and first.state.attempt == 2):
        first.step()
        store.save(first.state)
    saved = json.loads(store.path(str(PR)).read_text())
    second = watcher(forge, root, clock, store)
    assert second.state.to_dict() == saved
    assert (second.state.phase, second.state.attempt, second.state.flake_retests) == ("wait-build", 2, 1)
    posted = len(comments(forge))
    state = second.run()
    assert state.terminal == "passed" and state.flake_retests == 1 and state.comments_posted == 3
    assert len(comments(forge)) == posted  # no duplicate /retest after the restart
    waits = [e["seconds"] for e in state.timeline if e["event"] == "wait"]
    assert any(1080 <= w <= 1320 for w in waits)  # third poll of the phase continues the back-off


def test_watch_interrupted_then_resumed(forge, root, clock):
    forge.scenario = GateScenario(["pass"])
    store = StateStore(root / "state")
    calls = {"n": 0}
    real_sleep = clock.sleep

    def sleep_once_interrupted(seconds):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        real_sleep(seconds)
    clock.sleep = sleep_once_interrupted
    state = watcher(forge, root, clock, store).run()
    assert state.terminal == "interrupted"
    assert store.load(str(PR)).terminal == "interrupted"
    state = watcher(forge, root, clock, store).run()
    assert state.terminal == "passed"


def test_watch_needs_human_when_bot_rejects_description(forge, root, clock):
    forge.scenario = GateScenario(["pass"], reject_description=True)
    state = watcher(forge, root, clock).run()
    assert state.terminal == "needs-human" and "rejected the description" in state.note
    assert "/retest" not in comments(forge)


# -- CLI, real clock with a time scale; token never printed --------------------------------------------
def _env(forge) -> dict:
    return {"HP_AGENT_CODEHOST_API": forge.api, "HP_AGENT_CODEHOST_TOKEN": TOKEN,
            "HP_AGENT_JENKINS_URL": forge.jenkins, "HP_AGENT_JENKINS_JOB": JOB, "HP_AGENT_PROVIDER": "gitcode"}


def test_cli_watch_report_diagnose_json_without_token(tmp_path, monkeypatch):
    monkeypatch.delenv("HP_AGENT_REPO", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    with FakeForge(Clock(), token=TOKEN) as forge:
        forge.add_pr(PR, SHA1)
        forge.scenario = GateScenario(["pass"], check_delay=0, build_time=0)
        env = dict(_env(forge), HP_AGENT_TIME_SCALE="0.0001")
        runner = CliRunner()
        res = runner.invoke(cli, ["gate-doctor", "watch", str(PR), "--json", "--state-dir", "st"], env=env)
        assert res.exit_code == 0, res.output
        out = json.loads(res.stdout)
        assert out["status"] == "passed" and out["counters"]["comments_posted"] == 2
        res2 = runner.invoke(cli, ["gate-doctor", "report", str(PR), "--state-dir", "st"], env=env)
        assert res2.exit_code == 0 and "PR 42: passed" in res2.stdout
        res3 = runner.invoke(cli, ["gate-doctor", "diagnose", str(PR), "--json"], env=env)
        assert res3.exit_code == 0 and json.loads(res3.stdout)["green"] is True
        res4 = runner.invoke(cli, ["gate-doctor", "check-pr", str(PR)], env=env)
        assert res4.exit_code == 0 and "already present" in res4.stdout
        state_text = (tmp_path / "st" / f"{PR}.json").read_text()
        for r in (res, res2, res3, res4):
            assert TOKEN not in r.output + r.stderr
        assert TOKEN not in state_text
        assert any(r["headers"].get("Authorization") == f"Bearer {TOKEN}" for r in forge.requests)


def test_cli_usage_errors(tmp_path, monkeypatch):
    monkeypatch.delenv("HP_AGENT_REPO", raising=False)
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(cli, ["gate-doctor", "diagnose", "abc"])
    assert res.exit_code == 2 and "'abc'" in res.stderr
    res = CliRunner().invoke(cli, ["gate-doctor", "report", "77", "--state-dir", "none"])
    assert res.exit_code == 2 and "no watch state for PR 77" in res.stderr
    res = CliRunner().invoke(cli, ["gate-doctor", "watch", "1", "--time-scale", "0"],
                             env={"HP_AGENT_JENKINS_URL": "http://127.0.0.1:9"})
    assert res.exit_code == 2 and "time scale" in res.stderr


def test_stage_names_cover_gate():
    assert {"Codespell", "Pylint", "Lizard", "UT"} <= set(STAGES)


def test_failure_also_on_master_is_unrelated(forge, root, clock):
    node = "tests/ut/test_mesh.py::test_shape"  # reaches changed mesh.py, but master fails it too
    forge.add_build(None, "FAILURE", 900, None, console=pytest_log(node), start=clock.now() - 5000)
    forge.scenario = GateScenario([("pytest", node), "pass"])
    state = watcher(forge, root, clock).run()
    assert state.terminal == "passed" and state.flake_retests == 1
    item = [e for e in state.timeline if e["event"] == "triage"][0]
    assert item["decision"] == "retest"


def test_watch_waits_through_queue_and_reports_running_build(forge, root, clock):
    forge.scenario = GateScenario(["pass"], queue_time=400, build_time=2000)
    w = watcher(forge, root, clock)
    state = w.run()
    assert state.terminal == "passed"
    reasons = [e["why"] for e in state.timeline if e["event"] == "wait"]
    assert any(r.startswith("build queued: Waiting for next available executor") for r in reasons)
    assert any(r.endswith("running") for r in reasons)
    assert any(r["path"] == "/jenkins/queue/api/json" and "tree" in r["query"] for r in forge.requests)


def test_diagnose_running_build_reads_progressive_text(forge, root):
    forge.add_build(PR, "FAILURE", 0, [{"name": "UT", "status": "IN_PROGRESS"}], building=True,
                    console=pytest_log("tests/ut/test_other.py::test_y"))
    out = diagnose(backend(forge, root), str(PR))
    assert out["verdict"] == "running" and out["green"] is False
    assert out["log_source"] == "progressiveText (build running)"
    assert any(f["test"] == "tests/ut/test_other.py::test_y" for f in out["findings"])
    assert any(r["path"].endswith("/logText/progressiveText") and r["query"] == {"start": "0"}
               for r in forge.requests)


def test_skip_ledger_records_temporary_skips_added_by_pr(forge, root, clock):
    forge.files[PR] = ["tests/ut/test_mesh.py", "hyper_parallel/core/mesh.py"]
    forge.patches[PR] = {"tests/ut/test_mesh.py": "@@ -1,2 +1,4 @@\n import pytest\n+\n+@pytest.mark.skip(reason='wip')\n"
                                                  " def test_a():\n"}
    forge.scenario = GateScenario(["pass"])
    state = watcher(forge, root, clock).run()
    assert state.terminal == "passed"
    assert state.skip_ledger == [{"file": "tests/ut/test_mesh.py", "line": 3, "text": "@pytest.mark.skip(reason='wip')",
                                  "head_sha": SHA1}]
    assert "tests/ut/test_mesh.py:3" in state.note and state.counters()["temporary_skips"] == 1
    report = final_report(state)
    assert "remove the temporary skips" in report["next"] and "remove before merge" in render_text(report)


def test_cli_check_pr_and_retest_post_comments(forge, root, monkeypatch):
    monkeypatch.delenv("HP_AGENT_REPO", raising=False)
    monkeypatch.chdir(root)
    runner = CliRunner()
    res = runner.invoke(cli, ["gate-doctor", "check-pr", str(PR), "--json"], env=_env(forge))
    assert res.exit_code == 0 and json.loads(res.stdout)["posted"] == "/check-pr"
    forge.set_label(PR, "pr-check-pass")
    res = runner.invoke(cli, ["gate-doctor", "retest", str(PR)], env=_env(forge))
    assert res.exit_code == 0 and "posted /retest" in res.stdout
    assert comments(forge) == ["/check-pr", "/retest"]
    result, stages = stages_for(("pylint",))
    forge.add_build(PR, result, 300, stages)
    res = runner.invoke(cli, ["gate-doctor", "diagnose", str(PR)], env=_env(forge))
    assert res.exit_code == 1
    assert "pylint hyper_parallel/core/mesh.py:7 C0301(line-too-long): Line too long (131/120)" in res.stdout
    assert "fix: hyper_parallel/core/mesh.py:7" in res.stdout and TOKEN not in res.output
