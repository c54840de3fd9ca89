# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``dist-op analyze -> confirm -> dev`` end to end in a small fixture repository.

Every call is a command line the dist-op skills document (:func:`tests.agent.skill_lines.documented`), so this
test is also where those lines are run as written (tests/agent/test_skill_commands.py counts on it).

The fixture points the registry at its own YAML (``HYPER_PARALLEL_OP_YAML`` through ``[dist_op]``) and its
own test folders, so the generated registry entry, case files and shared tests run without touching this
repository. Path C writes no Python: the entry names ``DimLocalRule`` with the plan's parameters.
"""
import json
import shutil
import sys
from pathlib import Path

from tests.agent.conftest import REPO
from tests.agent.skill_lines import documented

OP = "Tensor.diff"
PLAN = "plans/Tensor.diff.md"
REGISTRY = "ops/generated.yaml"
UT_CASES = "fixture_tests/ut/cases/Tensor.diff.yaml"
HEADER = "# Copyright 2026 The hyper-parallel Authors. All rights reserved.\n# SPDX-License-Identifier: Apache-2.0\n"


def _fixture(repo_path):
    (repo_path / ".hp-agent.toml").write_text(
        "[dist_op]\n"
        'registry_yaml = "ops/generated.yaml"\n'
        'ut_dir = "fixture_tests/ut"\n'
        'st_dir = "fixture_tests/st"\n'
        f'python = "{sys.executable}"\n'
        'mindspore = "off"\n', encoding="utf-8")
    for package in ("fixture_tests",):
        (repo_path / package).mkdir()
        (repo_path / package / "__init__.py").write_text(HEADER + '"""Fixture package."""\n', encoding="utf-8")
    (repo_path / "ci").mkdir()
    for name in ("pylintrc", "codespell_ignore.txt"):
        shutil.copy2(REPO / "ci" / name, repo_path / "ci" / name)
    shutil.copytree(REPO / "ci" / "pylint_plugins", repo_path / "ci" / "pylint_plugins")


def test_analyze_confirm_dev_in_fixture_repo(tmp_repo, cli):
    root = Path(tmp_repo.working_tree_dir)
    _fixture(root)

    out = cli(documented("hp-agent dist-op analyze OP [OP...]", "dist-op", "analyze", OP, "--json"), cwd=root)
    assert out.returncode == 0, out.stderr
    written = json.loads(out.stdout)["plans"][0]
    assert written["plan"] == PLAN and any("in_scope" in t for t in written["tbd"])
    text = (root / PLAN).read_text(encoding="utf-8")
    assert "path: C" in text and "status: draft" in text and "cache_values: [dim]" in text

    status = cli(documented("hp-agent dist-op status", "dist-op", "status"), cwd=root)
    assert status.returncode == 0 and "Tensor.diff" in status.stdout and "draft" in status.stdout
    refused = cli(documented("hp-agent dist-op dev plans/<op>.md", "dist-op", "dev", PLAN), cwd=root)
    assert refused.returncode == 2 and "plan is draft" in refused.stderr
    refused = cli(documented("hp-agent dist-op confirm plans/<op>.md", "dist-op", "confirm", PLAN), cwd=root)
    assert refused.returncode == 2 and "[TBD]" in refused.stderr

    assert cli(documented("hp-agent dist-op set plans/<op>.md KEY=VALUE", "dist-op", "set", PLAN,
                          "frontends.mindspore.in_scope=false"), cwd=root).returncode == 0
    confirmed = cli(["dist-op", "confirm", PLAN, "--json"], cwd=root)
    assert confirmed.returncode == 0, confirmed.stderr
    assert json.loads(confirmed.stdout)["by"] == "Test Person <person@example.org>"

    green = cli(["dist-op", "dev", PLAN, "--json"], cwd=root)
    result = json.loads(green.stdout)
    assert green.returncode == 0, json.dumps(result, indent=1)[-3000:]
    assert [r["name"] for r in result["runs"]] == ["UT", "ST torch gloo", "codespell", "license header"]
    assert not [f for f in result["files"] if f.endswith(".py") and "fixture_tests" not in f]  # no rule module
    for shared in ("fixture_tests/ut/test_generated_rules.py", "fixture_tests/st/test_generated_parity.py"):
        assert (root / shared).read_text(encoding="utf-8").startswith(HEADER)
    registry = (root / REGISTRY).read_text(encoding="utf-8")
    assert "Tensor.diff:\n  rule: DimLocalRule\n  module: hyper_parallel.core.ops.rules.planned" in registry
    assert "shape: minus_n" in registry and "linear: true" in registry
    report = (root / "plans/Tensor.diff.report.md").read_text(encoding="utf-8")
    assert "result **GREEN**" in report and "fixture_tests/st/cases/Tensor.diff.yaml" in report
    # green is read from the tree (registry entry and case files as the plan renders them, sha included)
    truth = json.loads(cli(["dist-op", "status", "--json"], cwd=root).stdout)["plans"]
    assert [(t["plan"], t["state"], t["green"]) for t in truth] == [(PLAN, "confirmed", True)]
    assert cli(documented("hp-agent check plans", "check", "plans"), cwd=root).returncode == 0
    # verify reads the library's registry (where a merged op lives): torch.diff is registered there
    verified = cli(documented("hp-agent dist-op verify OP", "dist-op", "verify", "torch.diff"), cwd=root)
    assert verified.returncode == 0 and "0 false positive(s)" in verified.stdout, verified.stdout + verified.stderr

    # a bug in the registry entry (the layout argument read from the wrong position): --continue keeps the
    # files, the UT catch it
    rule = root / REGISTRY
    rule.write_text(rule.read_text(encoding="utf-8").replace("dim_position: 2", "dim_position: 1"), encoding="utf-8")
    failed = cli(documented("hp-agent dist-op dev plans/<op>.md --continue", "dist-op", "dev", PLAN, "--continue",
                            "--json"), cwd=root)
    assert failed.returncode == 1
    runs = {r["name"]: r for r in json.loads(failed.stdout)["runs"]}
    assert not runs["UT"]["ok"] and "{'dim': 0} input ['" in runs["UT"]["placements"]
    report = (root / "plans/Tensor.diff.report.md").read_text(encoding="utf-8")
    assert "result **FAILED**" in report and "Run 2" in report and "run 1 at" in report
    assert "dim_position: 1" in rule.read_text(encoding="utf-8")  # --continue did not regenerate
    assert (root / UT_CASES).is_file()
    status = cli(["dist-op", "status", "--not-green"], cwd=root)
    assert f"{PLAN}: confirmed, not green: Tensor.diff's registry entry differs" in status.stdout, status.stdout
    refused = cli(["check", "plans"], cwd=root)
    assert refused.returncode == 1 and "confirmed but not green" in refused.stdout + refused.stderr

    plan = root / PLAN
    plan.write_text(plan.read_text(encoding="utf-8").replace("Reason:", "Reason (edited):"), encoding="utf-8")
    stale = cli(["dist-op", "dev", PLAN], cwd=root)
    assert stale.returncode == 2 and "edited after confirmation" in stale.stderr
