# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""`gate run --changed` test selection (tools/hp_agent/gate/select.py) on a real git repository: changed tests,
importers through the import graph, tests naming a new op or a changed rule module, whole-stage triggers."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from hp_agent.gate.select import ImportGraph, module_of, select_tests
from hp_agent.gate.stages import load_stages

FILES = {
    "hyper_parallel/__init__.py": "",
    "hyper_parallel/core/__init__.py": "",
    "hyper_parallel/core/mesh.py": "SIZE = 2\n",
    "hyper_parallel/core/spec.py": "from .mesh import SIZE\n",
    "hyper_parallel/core/ops/__init__.py": "",
    "hyper_parallel/core/ops/registry.py": "import yaml\n",
    "hyper_parallel/core/ops/rules/__init__.py": "",
    "hyper_parallel/core/ops/rules/elementwise.py": "class ElementwiseRule:\n    pass\n",
    "hyper_parallel/core/ops/yaml/elementwise.yaml": "torch.add: {rule: ElementwiseRule}\n",
    "tests/__init__.py": "",
    "tests/ut/__init__.py": "",
    "tests/ut/test_spec.py": "from hyper_parallel.core import spec\n",
    "tests/ut/test_registry.py": "from hyper_parallel.core.ops import registry\n",
    "tests/ut/test_other.py": "import json\n",
    "tests/ut/test_rule_direct.py": "from hyper_parallel.core.ops.rules.elementwise import ElementwiseRule\n",
    "tests/st/test_add.py": "import torch\nOP = torch.add\n",
    "tests/st/test_gcd_named.py": "CASES = ['gcd']\n",
    "tests/agent/test_probe_example.py": "EXAMPLE = 'torch.gcd'\n",
}


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("select") / "repo"
    for rel, text in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    _git(root, "init", "-q", "-b", "main")
    _git(root, "add", "-A")
    _git(root, "-c", "user.name=T", "-c", "user.email=t@example.org", "commit", "-q", "-m", "chore(repo): seed")
    return root


def _sel(repo: Path, changed: list[str], scope: str = "tests") -> list[str] | None:
    return select_tests(repo, changed, [scope], "HEAD", ImportGraph(repo)).tests


def test_module_names():
    assert module_of("hyper_parallel/core/__init__.py") == "hyper_parallel.core"
    assert module_of("tools/hp_agent/gate/select.py") == "hp_agent.gate.select"
    assert module_of("tests/ut/test_spec.py") == "tests.ut.test_spec" and module_of("docs/x.md") is None


def test_a_changed_module_selects_its_importers_through_the_graph(repo):
    assert _sel(repo, ["hyper_parallel/core/mesh.py"]) == ["tests/ut/test_spec.py"]  # mesh <- spec <- test
    assert _sel(repo, ["hyper_parallel/core/__init__.py"]) == ["tests/ut/test_registry.py",
                                                                "tests/ut/test_rule_direct.py",
                                                                "tests/ut/test_spec.py"]  # a parent package runs


def test_a_new_op_selects_its_own_tests_the_registry_tests_and_the_tests_naming_it(repo):
    yaml_file = repo / "hyper_parallel/core/ops/yaml/elementwise.yaml"
    before = yaml_file.read_text()
    yaml_file.write_text(before + "torch.gcd: {rule: ElementwiseRule}\n")
    (repo / "tests/ut/test_gcd.py").write_text("def test_gcd():\n    assert True\n")
    try:
        changed = ["hyper_parallel/core/ops/yaml/elementwise.yaml", "tests/ut/test_gcd.py"]
        assert _sel(repo, changed) == ["tests/st/test_gcd_named.py", "tests/ut/test_gcd.py"]  # not test_add
        assert _sel(repo, changed, "tests/st") == ["tests/st/test_gcd_named.py"]
        assert _sel(repo, changed, "tests/agent") == []  # the tool's tests name ops as example inputs only
    finally:
        yaml_file.write_text(before)
        (repo / "tests/ut/test_gcd.py").unlink()


def test_a_test_data_file_selects_the_tests_above_it(repo):
    assert _sel(repo, ["tests/ut/cases/torch.gcd.yaml"]) == ["tests/ut/test_other.py", "tests/ut/test_registry.py",
                                                             "tests/ut/test_rule_direct.py", "tests/ut/test_spec.py"]
    assert _sel(repo, ["tests/ut/cases/torch.gcd.yaml"], "tests/st") == []
    assert _sel(repo, ["tests/st/cases/deep/torch.gcd.yaml"]) == ["tests/st/test_add.py",
                                                                  "tests/st/test_gcd_named.py"]  # nearest only


def test_a_generated_case_file_selects_its_one_case(repo):
    case_dir = repo / "tests/st/ops/generated"
    (case_dir / "cases").mkdir(parents=True)
    (case_dir / "test_generated_parity.py").write_text(
        "import pytest\n\n\n@pytest.mark.parametrize('op', ['torch.add', 'torch.gcd'])\ndef test_plan_parity(op):\n"
        "    assert op\n")
    try:
        assert _sel(repo, ["tests/st/ops/generated/cases/torch.gcd.yaml"]) == [
            "tests/st/ops/generated/test_generated_parity.py::test_plan_parity[torch.gcd]"]
    finally:
        (case_dir / "test_generated_parity.py").unlink()


def test_a_rule_module_selects_direct_importers_only(repo):
    assert _sel(repo, ["hyper_parallel/core/ops/rules/elementwise.py"]) == ["tests/ut/test_rule_direct.py"]


def test_whole_stage_and_nothing(repo):
    assert _sel(repo, ["pyproject.toml"]) is None and _sel(repo, ["tests/ut/conftest.py"]) is None
    assert _sel(repo, ["hyper_parallel/core/ops/data/table.json"]) is None
    assert _sel(repo, ["docs/guide.md", "plans/torch.gcd.yaml"]) == []
    assert _sel(repo, ["MANIFEST.in"]) is None and _sel(repo, ["csrc/ops/kernel.cpp"]) is None


def test_the_package_stage_runs_on_packaging_inputs_only(repo):
    """A new op (registry YAML, case file, plan) does not run the wheel build; a packaging input does."""
    new_op = ["hyper_parallel/core/ops/yaml/elementwise.yaml", "tests/ut/ops/generated/cases/torch.gcd.yaml",
              "plans/torch.gcd.md"]
    assert _sel(repo, new_op, "tests/package") == []
    assert _sel(repo, ["setup.py"], "tests/package") is None


def test_the_gate_declares_selection_for_its_test_stages():
    stages = {s.name: s for s in load_stages(Path(__file__).resolve().parents[2])}
    for name in ("ut", "st", "agent", "package"):
        assert stages[name].select == "tests" and stages[name].paths == [f"tests/{name}"]
        assert stages[name].argv(["tests/ut/test_x.py"])[-1] == "tests/ut/test_x.py"
