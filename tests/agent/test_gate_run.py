# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""`hp-agent gate run` on a tiny sample repository with planted pylint, lizard and codespell violations."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from hp_agent.parsers import parse_pylint, pytest_summary
from hp_agent.gate.report import load_report
from hp_agent.gate.stages import StageConfigError, load_stages
from hp_agent.license import license_header

from .conftest import REPO

HEADER = license_header()
CLEAN = HEADER + '"""Clean module."""\n\n\ndef twice(x: int) -> int:\n    """Return 2x."""\n    return 2 * x\n'
PYLINT_BAD = HEADER + '"""Module with an unused import."""\nimport os\n\n\ndef one() -> int:\n    """One."""\n    return 1\n'
BRANCHES = "\n".join(f"    if x == {i}:\n        return {i}" for i in range(16))
LIZARD_BAD = HEADER + f'"""Complex."""\n\n\ndef pick(x: int) -> int:\n    """Pick."""\n{BRANCHES}\n    return -1\n'
MISSPELT = "rec" + "ieve"  # built at run time so this file itself passes codespell
SPELL_BAD = HEADER + f'"""Spelling."""\n\n# we {MISSPELT} the tensor here\nVALUE = 1\n'
UT = HEADER + '"""Sample tests."""\n\n\ndef test_ok():\n    assert True\n\n\ndef test_bad():\n    assert 1 == 2\n'


@pytest.fixture
def sample(tmp_repo):
    """A sample repository carrying this repository's ci/ and planted violations."""
    root = Path(tmp_repo.working_tree_dir)
    shutil.copytree(REPO / "ci", root / "ci")
    pkg = root / "hyper_parallel"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(HEADER + '"""Sample package."""\n')
    (pkg / "clean.py").write_text(CLEAN)
    (pkg / "unused.py").write_text(PYLINT_BAD)
    (pkg / "complex.py").write_text(LIZARD_BAD)
    (pkg / "spell.py").write_text(SPELL_BAD)
    (root / "tests" / "ut").mkdir(parents=True)
    (root / "tests" / "ut" / "test_sample.py").write_text(UT)
    tmp_repo.git.add(".")
    tmp_repo.git.commit("-q", "-m", "chore(sample): planted violations")
    return root


LINT = ["--stage", "pylint", "--stage", "lizard", "--stage", "codespell", "--stage", "ut"]


def test_planted_violations_are_found_with_file_and_line(sample, cli):
    proc = cli(["gate", "run", *LINT], cwd=sample / "hyper_parallel")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = load_report(sample / ".gate" / "last.json")
    assert report["passed"] is False and report["changed_only"] is False
    stages = {s["name"]: s for s in report["stages"]}
    assert {s["status"] for s in stages.values()} == {"failed"}
    pylint = [(f["file"], f["line"], f["rule"]) for f in stages["pylint"]["findings"]]
    assert pylint == [("hyper_parallel/unused.py", 4, "W0611(unused-import)")]
    lizard = stages["lizard"]["findings"]
    assert [(f["file"], f["line"]) for f in lizard] == [("hyper_parallel/complex.py", 6)]
    assert "17 CCN" in lizard[0]["message"]
    spell = stages["codespell"]["findings"]
    assert [(f["file"], f["line"], f["rule"]) for f in spell] == [("hyper_parallel/spell.py", 5, "codespell")]
    assert f"{MISSPELT} ==> receive" in spell[0]["message"]
    ut = stages["ut"]["findings"]
    assert ut[0]["file"] == "tests/ut/test_sample.py" and "test_bad" in ut[0]["test"]
    # the console shows each finding and pytest's own summary line
    assert "hyper_parallel/unused.py:4: [W0611(unused-import)]" in proc.stdout
    assert "pytest: 1 failed, 1 passed" in proc.stdout
    # the report set: timestamped JSON, last.json, last.md
    assert len(list((sample / ".gate" / "reports").glob("*.json"))) == 1
    md = (sample / ".gate" / "last.md").read_text()
    assert "# Gate report: FAILED" in md and "`hyper_parallel/spell.py:5` [codespell]" in md
    for stage in report["stages"]:
        assert set(stage) == {"name", "status", "duration_s", "command", "findings", "log_tail"}


def test_fixed_repository_passes(sample, cli):
    pkg = sample / "hyper_parallel"
    (pkg / "unused.py").write_text(PYLINT_BAD.replace("import os\n", ""))
    (pkg / "complex.py").write_text(CLEAN)
    (pkg / "spell.py").write_text(SPELL_BAD.replace(MISSPELT, "receive"))
    (sample / "tests/ut/test_sample.py").write_text(UT.replace("1 == 2", "2 == 2"))
    proc = cli(["gate", "run", *LINT, "--json"], cwd=sample)
    assert proc.returncode == 0, proc.stdout
    data = json.loads(proc.stdout)
    assert "pytest: 2 passed" in proc.stderr
    assert data["passed"] is True and [s["status"] for s in data["stages"]] == ["passed"] * 4


def test_changed_mode_limits_lint_to_changed_files(sample, cli):
    pkg = sample / "hyper_parallel"
    (pkg / "unused.py").write_text(PYLINT_BAD.replace("import os\n", ""))
    proc = cli(["gate", "run", "--changed", "--stage", "pylint", "--stage", "codespell"], cwd=sample)
    report = load_report(sample / ".gate" / "last.json")
    stages = {s["name"]: s for s in report["stages"]}
    assert report["changed_only"] is True
    assert stages["pylint"]["status"] == "passed" and "unused.py" in stages["pylint"]["command"]
    assert "complex.py" not in stages["pylint"]["command"]
    assert stages["codespell"]["status"] == "passed"  # spell.py did not change
    assert proc.returncode == 0


def test_nothing_changed_means_not_run(sample, cli):
    proc = cli(["gate", "run", "--changed", "--stage", "lizard"], cwd=sample)
    report = load_report(sample / ".gate" / "last.json")
    assert proc.returncode == 0 and report["stages"][0]["status"] == "not-run"


def test_unknown_stage_and_bad_config_are_usage_errors(sample, cli):
    proc = cli(["gate", "run", "--stage", "nope"], cwd=sample)
    assert proc.returncode == 2 and "unknown stage" in proc.stderr
    (sample / "ci" / "stages.yaml").write_text("stages:\n  - name: x\n    run: [true]\n    parser: magic\n")
    with pytest.raises(StageConfigError, match="parser must be one of"):
        load_stages(sample)
    assert cli(["gate", "list"], cwd=sample).returncode == 2


def test_repository_stage_list_and_jenkinsfile_agree():
    names = [s.name for s in load_stages(REPO)]
    assert names == ["pylint", "lizard", "codespell", "op-registry", "plans", "catalog", "assets", "sync", "commit-msgs",
                     "ut", "st", "package", "agent"]
    jenkins = (REPO / "ci" / "Jenkinsfile").read_text()
    assert "hp-agent gate list --names" in jenkins and "hp-agent gate run --stage ${name}" in jenkins
    makefile = (REPO / "Makefile").read_text()
    assert "$(VENV)/bin/hp-agent gate run" in makefile.split("\ntest:")[1].split("\n\n")[0]


SLOTS = HEADER + '''"""Immutable value type."""


class Point:
    """A point."""

    __slots__ = ("x", "y")

    def __init__(self, x: int, y: int) -> None:
        object.__setattr__(self, "x", x)
        object.__setattr__(self, "y", y)

    def norm1(self) -> int:
        """|x| + |y|."""
        return abs(self.x) + abs(self.y)

    def bad(self) -> int:
        """Reads a member that does not exist."""
        return self.z
'''


def test_pylint_knows_slots_members_and_still_reports_real_no_member(sample, cli):
    (sample / "hyper_parallel" / "unused.py").write_text(SLOTS)
    cli(["gate", "run", "--stage", "pylint"], cwd=sample)
    report = load_report(sample / ".gate" / "last.json")
    got = [(f["file"], f["line"], f["rule"]) for f in report["stages"][0]["findings"]]
    assert got == [("hyper_parallel/unused.py", 21, "E1101(no-member)")]
    assert report["stages"][0]["findings"][0]["message"].startswith("Instance of 'Point' has no 'z' member")


def test_lizard_whitelist_entry_exempts_a_function(sample, cli):
    whitelist = sample / "ci" / "lizard_whitelist.txt"
    whitelist.write_text(whitelist.read_text() + "hyper_parallel/complex.py:pick\n")
    proc = cli(["gate", "run", "--stage", "lizard"], cwd=sample)
    assert proc.returncode == 0 and load_report(sample / ".gate" / "last.json")["passed"] is True


def test_parsers():
    assert parse_pylint("a/b.py:3: [E0602(undefined-variable), f] Undefined variable 'x'")[0].line == 3
    assert pytest_summary("...\n==== 3 passed, 1 failed in 2.0s ====\n") == "3 passed, 1 failed in 2.0s"
    assert pytest_summary("12 passed in 0.5s\n") == "12 passed in 0.5s"
    assert pytest_summary("no tests ran in 0.01s\n") == "no tests ran in 0.01s"


def test_gate_report_command(sample, cli):
    assert cli(["gate", "report"], cwd=sample).returncode == 2
    cli(["gate", "run", "--stage", "lizard"], cwd=sample)
    proc = cli(["gate", "report"], cwd=sample)
    assert proc.returncode == 1 and "complex.py" in proc.stdout
