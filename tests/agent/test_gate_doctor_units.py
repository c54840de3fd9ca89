# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""gate-doctor pieces in isolation: parsers, build matching, triage, state file, config, redaction, local mode."""
from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fakes.gitrepos import git, make_repos  # noqa: E402
from hp_agent.cli import cli  # noqa: E402
from hp_agent.config import ConfigError, load_config  # noqa: E402
from hp_agent.gate_doctor import builds as B  # noqa: E402
from hp_agent.gate_doctor.backends import LocalBackend, diagnose_report  # noqa: E402
from hp_agent.gate_doctor.clock import FakeClock  # noqa: E402
from hp_agent.gate_doctor.machine import Watcher  # noqa: E402
from hp_agent.findings import Finding  # noqa: E402
from hp_agent.parsers import parse_log  # noqa: E402
from hp_agent.gate_doctor.skips import added_skips, split_git_diff  # noqa: E402
from hp_agent.gate_doctor.state import StateStore, WatchState  # noqa: E402
from hp_agent.gate_doctor.triage import FORBIDDEN_FIX_RE, fix_list, is_build_input, triage  # noqa: E402
from hp_agent.redact import clear_secrets, redact, redact_obj, register_secret  # noqa: E402

MISSPELT = "rec" + "ieve"  # built so that the repository's own codespell stage does not flag this file
LOG = """\
[2026-12-02T10:00:00.000Z] hyper_parallel/core/mesh.py:12:4: [W0612(unused-variable), Mesh.size] Unused variable 'x'
\x1b[31mhyper_parallel/core/big.py:30: warning: plan has 80 NLOC, 22 CCN, 500 token, 3 PARAM, 90 length, 0 ND\x1b[0m
docs/guide.md:4: {MISSPELT} ==> receive
FAILED tests/st/test_ms.py::test_trainer[compile x dp_replicate grad_accum 2] - AssertionError: launch failed
tests/ut/test_mesh.py:88: AssertionError
FAILED tests/ut/test_mesh.py::test_split[2-4] - AssertionError: shapes differ
ERROR tests/st/test_pp.py::test_schedule - TimeoutError: rank 1 hung
Stage "UT" failed (exit 1)
ERROR: script returned exit code 2
""".replace("{MISSPELT}", MISSPELT)


def test_parsers_cover_every_gate_stage():
    found = {f.tool + ":" + f.rule: f for f in parse_log(LOG, "Gate")}
    pylint = found["pylint:W0612(unused-variable)"]
    assert (pylint.file, pylint.line, pylint.message) == ("hyper_parallel/core/mesh.py", 12, "Unused variable 'x'")
    lizard = found["lizard:lizard-ccn"]
    assert (lizard.file, lizard.line) == ("hyper_parallel/core/big.py", 30) and "22 CCN" in lizard.message
    assert found["codespell:codespell"].message == f"{MISSPELT} ==> receive"
    test = found["pytest:test-failed"]
    assert test.test == "tests/ut/test_mesh.py::test_split[2-4]" and test.line == 88
    assert found["pytest:test-error"].test == "tests/st/test_pp.py::test_schedule"
    spaced = [f for f in parse_log(LOG, "Gate") if f.file == "tests/st/test_ms.py"]
    assert [(f.test, f.message) for f in spaced] == [
        ("tests/st/test_ms.py::test_trainer[compile x dp_replicate grad_accum 2]", "AssertionError: launch failed")]
    assert found["stage:stage-failed"].stage == "UT"
    assert found["stage:script-exit"].message == "script returned exit code 2"


def test_build_matching_by_parameter_cause_description():
    def build(n, params=(), cause="", desc="", result="FAILURE"):
        return {"number": n, "result": result, "description": desc,
                "actions": [{"parameters": [{"name": k, "value": v} for k, v in params]},
                            {"causes": [{"shortDescription": cause}]}]}
    builds = [build(1, params=[("giteePullRequestIid", "7")]), build(2, cause="Comment on PR !7"),
              build(3, desc="merge_requests/7"), build(4, params=[("PR_NUMBER", "70")]),
              build(5, params=[("PR_NUMBER", "7")], result="ABORTED")]
    assert [b["number"] for b in B.builds_for_pr(builds, 7)] == [3, 2, 1]
    assert B.match_reason(builds[0], 7) == "parameter giteePullRequestIid"
    assert B.match_reason(builds[1], 7) == "cause" and B.match_reason(builds[2], 7) == "description"
    assert B.builds_for_pr(builds, 7, exclude={3}, since_ms=None)[0]["number"] == 2
    assert B.is_pr_build(builds[3]) and not B.is_pr_build(build(9, params=[("BRANCH", "master")]))


def test_bypass_signals():
    real = [{"status": "SUCCESS"}, {"status": "SUCCESS"}]
    skipped = [{"status": "NOT_EXECUTED"}] * 2
    fast = {"result": "SUCCESS", "duration": 17000}
    assert B.bypass_signals(fast, skipped, 60)["is_bypass"] is True
    assert B.bypass_signals(fast, real, 60) == {"is_bypass": False, "structural": False, "short_duration": True,
                                                "duration_s": 17.0, "reason": "finished in 17s (< 60s)"}
    assert B.bypass_signals({"result": "SUCCESS", "duration": 3_600_000}, skipped, 60)["is_bypass"] is True
    assert B.bypass_signals({"result": "FAILURE", "duration": 1000}, None, 60)["is_bypass"] is False


def _ctx(tmp_path, changed, master=(), history=()):
    return {"root": tmp_path, "changed": list(changed), "master_failures": set(master), "history": list(history)}


def test_triage_pr_induced_unrelated_sticky_and_master(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests/test_a.py").write_text("import hyper_parallel.core.mesh\n")
    test = Finding("tests/test_a.py", 3, "test-failed", "boom", tool="pytest", test="tests/test_a.py::t")
    assert triage([test], _ctx(tmp_path, ["hyper_parallel/core/mesh.py"]))["decision"] == "fix"
    assert triage([test], _ctx(tmp_path, ["docs/x.md"]))["decision"] == "retest"
    sticky = _ctx(tmp_path, ["docs/x.md"], history=[[test.key()], [test.key()]])
    assert triage([test], sticky)["decision"] == "report"
    on_master = _ctx(tmp_path, ["hyper_parallel/core/mesh.py"], master=[test.key()])
    item = triage([test], on_master)["items"][0]
    assert item["pr_induced"] is False and item["failed_on_master"] is True
    assert triage([test], _ctx(tmp_path, ["pyproject.toml"]))["decision"] == "fix"
    assert is_build_input("ci/pylintrc") and is_build_input("requirements-dev.txt") and not is_build_input("a.py")
    assert triage([], _ctx(tmp_path, []))["decision"] == "needs-human"


def test_fix_list_is_ordered_and_never_forbidden(tmp_path):
    findings = [Finding("tests/t.py", 9, "test-failed", "tolerance exceeded: atol 1e-5", tool="pytest", test="tests/t.py::x"),
                Finding("a.py", 5, "C0301(line-too-long)", "long", tool="pylint"),
                Finding("b.md", 1, "codespell", "t" + "eh ==> the", tool="codespell")]
    result = triage(findings, _ctx(tmp_path, ["a.py", "b.md", "tests/t.py"]))
    assert [f["tool"] for f in result["fixes"]] == ["codespell", "pylint", "pytest"]
    assert not any(FORBIDDEN_FIX_RE.search(f["hint"]) for f in result["fixes"])
    bad = [{"decision": "fix", "finding": {"tool": "pylint", "rule": "pylint: disable=x", "message": "m",
                                           "file": "a.py", "line": 1, "test": None}}]
    with pytest.raises(AssertionError, match="forbidden"):
        fix_list(bad)


def test_state_roundtrip_and_corrupt_file(tmp_path):
    store = StateStore(tmp_path)
    state = WatchState(pr="9", phase="wait-build", attempt=2, flake_retests=3, builds_seen=[5, 6])
    store.save(state)
    assert store.load("9") == state
    store.path("9").write_text("{not json")
    with pytest.raises(ValueError, match="corrupt watch state"):
        store.load("9")
    with pytest.raises(ValueError, match="phase 'dancing'"):
        WatchState.from_dict({"pr": "1", "phase": "dancing"})


def test_config_precedence_and_errors(tmp_path):
    user = tmp_path / "cfg" / "hp-agent"
    user.mkdir(parents=True)
    (user / "config.toml").write_text('[codehost]\nprovider = "gitee"\n[jenkins]\njob = "user-job"\n')
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / ".hp-agent.toml").write_text('[jenkins]\nurl = "http://j.example"\n[git]\nprotected_branches = '
                                         '["main", "stable/*"]\n[repos."mindspore/hyper-parallel".jenkins]\n'
                                         'job = "repo-job"\n')
    env = {"XDG_CONFIG_HOME": str(tmp_path / "cfg"), "HOME": str(tmp_path)}
    cfg = load_config(repo, env)
    assert cfg.provider == "gitee" and cfg.codehost_api == "https://gitee.com/api/v5"
    assert cfg.jenkins_url == "http://j.example" and cfg.jenkins_job == "repo-job"
    assert cfg.is_protected("stable/2.0") and not cfg.is_protected("master")
    cfg = load_config(repo, dict(env, HP_AGENT_JENKINS_JOB="env-job", HP_AGENT_TIME_SCALE="0.5",
                                 HP_AGENT_CODEHOST_TOKEN="tok-from-env"))
    assert cfg.jenkins_job == "env-job" and cfg.time_scale == 0.5
    assert cfg.to_public_dict()["codehost_token"] == "***"
    default = load_config(None, {"XDG_CONFIG_HOME": str(tmp_path / "none"), "HOME": str(tmp_path)})
    assert default.codehost_api == "https://api.gitcode.com/api/v5" and default.is_protected("release/1.1")
    with pytest.raises(ConfigError, match="provider 'gitlab'"):
        load_config(None, dict(env, HP_AGENT_PROVIDER="gitlab"))
    with pytest.raises(ConfigError, match="time_scale must be a positive number, got 'fast'"):
        load_config(None, dict(env, HP_AGENT_TIME_SCALE="fast"))
    (repo / ".hp-agent.toml").write_text("[codehost\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(repo, env)


def test_token_from_git_credential_fill(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    (home / ".gitconfig").write_text('[credential]\n\thelper = "!f() { echo username=alice; '
                                     'echo password=helper-secret-99; }; f"\n')
    cfg = load_config(None, {"XDG_CONFIG_HOME": str(tmp_path / "x"), "HOME": str(home)})
    assert cfg.codehost_token is None
    assert cfg.token() == "helper-secret-99"
    assert redact("auth failed for helper-secret-99") == "auth failed for ***"
    clear_secrets()


def test_redaction_patterns():
    register_secret("tok-123456")
    text = ("GET https://x/api?access_token=abc&page=1 Authorization: Bearer zzz "
            "https://user:pw@host/repo.git PRIVATE-TOKEN: qqq tok-123456")
    out = redact(text)
    for secret in ("abc", "zzz", "pw@", "qqq", "tok-123456"):
        assert secret not in out
    assert "page=1" in out and redact_obj({"a": ["tok-123456"]}) == {"a": ["***"]}
    clear_secrets()


# -- local mode -----------------------------------------------------------------------------------------
def _report(passed, findings=()):
    stage = {"name": "pylint", "status": "passed" if passed else "failed", "duration_s": 2.0,
             "command": "pylint", "findings": list(findings), "log_tail": ""}
    return {"started": "s", "finished": "f", "passed": passed, "changed_only": True,
            "stages": [stage, {"name": "ut", "status": "passed", "duration_s": 5.0, "command": "pytest",
                               "findings": [], "log_tail": ""}]}


def test_local_mode_watch_fix_then_pass(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    r = make_repos(tmp_path)
    r.write("hyper_parallel/core/mesh.py", "BAD = 1\n")
    r.commit("fix(core): tune mesh", "hyper_parallel/core/mesh.py")
    reports = [_report(False, [{"file": "hyper_parallel/core/mesh.py", "line": 1, "rule": "C0103(invalid-name)",
                                "message": "bad name"}]), _report(True)]
    paths = []

    def runner():
        path = tmp_path / f"report-{len(paths)}.json"
        path.write_text(json.dumps(reports[len(paths)]))
        paths.append(path)
        return path
    backend = LocalBackend(r.work, runner=runner)
    store = StateStore(r.work / ".gate" / "doctor")
    clock = FakeClock()
    state = Watcher(backend, store, "local", clock, random.Random(1)).run()
    assert state.phase == "await-fix"
    assert state.last_triage["fixes"][0]["file"] == "hyper_parallel/core/mesh.py"
    r.write("hyper_parallel/core/mesh.py", "GOOD = 1\n")
    r.commit("fix(core): rename constant", "hyper_parallel/core/mesh.py")
    state = Watcher(backend, store, "local", clock, random.Random(1)).run()
    assert state.terminal == "passed" and state.fix_commits == 1 and len(paths) == 2


def test_local_mode_cli_over_a_given_report(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("HP_AGENT_REPO", raising=False)
    r = make_repos(tmp_path)
    r.write("hyper_parallel/core/mesh.py", "X = 2\n")
    r.commit("fix(core): mesh", "hyper_parallel/core/mesh.py")
    monkeypatch.chdir(r.work)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(_report(False, [{"file": "hyper_parallel/core/mesh.py", "line": 1,
                                                "rule": "W0611(unused-import)", "message": "unused"}])))
    res = CliRunner().invoke(cli, ["gate-doctor", "diagnose", "local", "--report", str(bad), "--json"])
    out = json.loads(res.stdout)
    assert res.exit_code == 1 and out["verdict"] == "failed"
    assert out["findings"][0]["rule"] == "W0611(unused-import)" and out["triage"]["decision"] == "fix"
    good = tmp_path / "good.json"
    good.write_text(json.dumps(_report(True)))
    res = CliRunner().invoke(cli, ["gate-doctor", "watch", "mine", "--report", str(good), "--time-scale", "0.001"])
    assert res.exit_code == 0, res.output
    assert "PR mine: passed" in res.stdout
    assert git(r.work, "status", "--porcelain") == ""  # state lives under the ignored .gate/


def test_local_report_all_not_run_is_bypass():
    report = {"passed": True, "stages": [{"name": "ut", "status": "not-run", "duration_s": 0}]}
    assert diagnose_report(report)["bypass"]["is_bypass"] is True


def test_skip_ledger_parsing_from_git_diff(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    r = make_repos(tmp_path)
    r.write("tests/ut/test_x.py", "import pytest\n\n\n@pytest.mark.xfail\ndef test_a():\n    pytest.skip('later')\n")
    r.commit("test(ut): add x", "tests/ut/test_x.py")
    skips = LocalBackend(r.work).added_skips()
    assert [(s["file"], s["line"]) for s in skips] == [("tests/ut/test_x.py", 4), ("tests/ut/test_x.py", 6)]
    assert split_git_diff("") == [] and added_skips("a.py", "@@ -1 +1 @@\n-x\n+y\n") == []


def test_exit_codes_tell_interrupted_from_failed():
    from types import SimpleNamespace  # pylint: disable=import-outside-toplevel

    from hp_agent.commands.gate_doctor import exit_code  # pylint: disable=import-outside-toplevel

    assert exit_code(SimpleNamespace(terminal="passed", note="")) == 0
    assert exit_code(SimpleNamespace(terminal="interrupted", note="interrupted (SIGTERM) in phase wait")) == 143
    assert exit_code(SimpleNamespace(terminal="interrupted", note="interrupted (Ctrl-C) in phase wait")) == 130
    assert {exit_code(SimpleNamespace(terminal=t, note="")) for t in ("needs-human", "patch-ceiling", None)} == {1}


def test_gate_repeats_failed_tests_under_its_table():
    """The failing tests are printed after the results table too (a CI that keeps the log's end shows them)."""
    from rich.console import Console
    from hp_agent.gate.report import StageResult
    from hp_agent.gate.runner import _print_failed_tests  # pylint: disable=protected-access
    failed = [Finding(f"tests/st/t{i}.py", None, "test-failed", f"boom {i}", tool="pytest", test=f"tests/st/t{i}.py::x")
              for i in range(12)]
    results = [StageResult("ut", "passed", 1.0, "pytest", [], ""), StageResult("st", "failed", 2.0, "pytest", failed, "")]
    con = Console(record=True, width=200)
    _print_failed_tests(con, results)
    lines = con.export_text().splitlines()
    assert lines[0] == "failed in st: tests/st/t0.py::x: boom 0" and len(lines) == 11
    assert lines[-1] == "... 2 more findings in .gate/last.json"
