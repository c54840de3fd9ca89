# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The op-registry pairing checker on fixture registries with planted errors (no torch import)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from hp_agent.checks.op_registry import check_registry, check_registry_changed, is_registry_path

RULES = "hyper_parallel/core/ops/rules"
YAML = "hyper_parallel/core/ops/yaml"


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


@pytest.fixture
def registry(tmp_path):
    """A consistent registry: two rule modules, a base module, two YAML files."""
    for pkg in ("hyper_parallel", "hyper_parallel/core", "hyper_parallel/core/ops", "hyper_parallel/core/ops/ops",
                RULES):
        _write(tmp_path, f"{pkg}/__init__.py", "")
    _write(tmp_path, f"{RULES}/_base.py", "class RuleBase:\n    pass\n")
    _write(tmp_path, f"{RULES}/base.py", "class Other:\n    pass\n")
    _write(tmp_path, f"{RULES}/elementwise.py",
           "import torch  # never executed by the checker\nfrom ._base import RuleBase\n"
           "class ElementwiseRule(RuleBase):\n    pass\nclass InplaceRule(RuleBase):\n    pass\n")
    _write(tmp_path, f"{RULES}/matmul.py", "class MatmulRule:\n    pass\n")
    _write(tmp_path, f"{YAML}/elementwise.yaml",
           "__default__:\n  module: hyper_parallel.core.ops.rules.elementwise\n"
           "torch.add:\n  rule: ElementwiseRule\n  doc: add\n"
           "Tensor.add_:\n  rule: InplaceRule\n  options: {inplace: true}\n")
    _write(tmp_path, f"{YAML}/matmul.yaml",
           "# matmul family\ntorch.matmul:\n  rule: MatmulRule\n  module: hyper_parallel.core.ops.rules.matmul\n")
    return tmp_path


def test_consistent_registry_passes_without_importing_torch(registry):
    before = set(sys.modules)
    findings, summary = check_registry(registry)
    assert findings == []
    assert "3 op(s) in 2 registry file(s)" in summary
    assert "torch" not in set(sys.modules) - before


def test_no_registry_passes_with_a_note(tmp_path):
    findings, summary = check_registry(tmp_path)
    assert findings == [] and "no registry found" in summary


PLANTED = [
    (lambda r: _write(r, f"{YAML}/bad.yaml", "torch.sub:\n  rule: SubRule\n"
                      "  module: hyper_parallel.core.ops.rules.missing\n"),
     "registry-module", (f"{YAML}/bad.yaml", 1, "torch.sub")),
    (lambda r: _write(r, f"{YAML}/bad.yaml", "\ntorch.mul:\n  rule: NoSuchRule\n"
                      "  module: hyper_parallel.core.ops.rules.matmul\n"),
     "registry-class", (f"{YAML}/bad.yaml", 2, "NoSuchRule")),
    (lambda r: _write(r, f"{YAML}/dup.yaml", "torch.add:\n  rule: MatmulRule\n"
                      "  module: hyper_parallel.core.ops.rules.matmul\n"),
     "registry-duplicate", (f"{YAML}/elementwise.yaml", 3, "torch.add: already registered in " + f"{YAML}/dup.yaml")),
    (lambda r: _write(r, f"{YAML}/extra.yaml", "torch.div:\n  rule: MatmulRule\n  layout: x\n"
                      "  module: hyper_parallel.core.ops.rules.matmul\n"),
     "registry-unknown-field", (f"{YAML}/extra.yaml", 1, "unknown field 'layout'")),
    (lambda r: _write(r, f"{RULES}/orphan.py", "class OrphanRule:\n    pass\n"),
     "registry-unreferenced", (f"{RULES}/orphan.py", 1, "not referenced")),
    (lambda r: _write(r, f"{YAML}/norule.yaml", "torch.neg:\n  module: hyper_parallel.core.ops.rules.matmul\n"),
     "registry-entry", (f"{YAML}/norule.yaml", 1, "no 'rule'")),
    (lambda r: _write(r, f"{YAML}/broken.yaml", "torch.neg: [unclosed\n"),
     "registry-yaml", (f"{YAML}/broken.yaml", None, "invalid YAML")),
]


@pytest.mark.parametrize("plant,rule,where", PLANTED)
def test_planted_errors_are_found_with_file_and_key(registry, plant, rule, where):
    plant(registry)
    findings, _ = check_registry(registry)
    hits = [f for f in findings if f.rule == rule]
    assert len(hits) == 1, findings
    file, line, fragment = where
    assert hits[0].file == file and hits[0].line == line and fragment in hits[0].message


def test_default_block_may_carry_the_rule(registry):
    _write(registry, f"{YAML}/defaults.yaml", "__default__:\n  module: hyper_parallel.core.ops.rules.matmul\n"
           "  rule: MatmulRule\n  options: {transpose: false}\ntorch.mm: {options: {transpose: true}}\n"
           "torch.bmm: {}\n")
    findings, summary = check_registry(registry)
    assert findings == [] and "5 op(s)" in summary


def test_external_package_module_resolves_via_find_spec(registry):
    _write(registry, f"{YAML}/ext.yaml", "torch.nn.functional.gelu:\n  rule: JSONDecoder\n  module: json.decoder\n")
    findings, _ = check_registry(registry)
    assert findings == []


def test_cli_full_repo_mode_and_json(registry, cli, tmp_repo):
    root = Path(tmp_repo.working_tree_dir)
    proc = cli(["check", "op-registry", "--json"], cwd=root)
    assert proc.returncode == 0 and "no registry found" in json.loads(proc.stdout)["summary"]
    import shutil
    shutil.copytree(registry / "hyper_parallel", root / "hyper_parallel")
    _write(root, f"{RULES}/orphan.py", "class OrphanRule:\n    pass\n")
    proc = cli(["check", "op-registry"], cwd=root / "hyper_parallel")
    assert proc.returncode == 1
    assert f"{RULES}/orphan.py:1: [registry-unreferenced]" in proc.stdout


def test_trigger_paths():
    assert is_registry_path(f"{YAML}/a.yaml") and is_registry_path(f"{RULES}/a.py")
    assert not is_registry_path("hyper_parallel/core/placement.py")


def _changed_file(plant_case) -> str:
    """The file a planted case writes (what the after-write hook would be told was edited)."""
    return plant_case[2][0] if plant_case[1] != "registry-duplicate" else f"{YAML}/dup.yaml"


@pytest.mark.parametrize("case", PLANTED, ids=[c[1] for c in PLANTED])
def test_incremental_check_finds_what_the_full_check_finds(registry, case):
    """The after-write hook's check of just the edited file reports the same problem as the full check."""
    plant, rule, _where = case
    plant(registry)
    changed = _changed_file(case)
    findings, summary = check_registry_changed(registry, [changed])
    assert [f.rule for f in findings] == [rule], (findings, summary)
    assert findings[0].file == changed


def test_incremental_check_of_a_rule_module_sees_a_removed_class(registry):
    rules = registry / RULES / "elementwise.py"
    assert check_registry_changed(registry, [f"{RULES}/elementwise.py"])[0] == []  # fills the cache
    rules.write_text(rules.read_text().replace("class InplaceRule", "class InPlaceRule"))
    findings, summary = check_registry_changed(registry, [f"{RULES}/elementwise.py"])
    assert [(f.rule, f.file, f.line) for f in findings] == [("registry-class", f"{YAML}/elementwise.yaml", 6)]
    assert "1 registry file(s) parsed" in summary  # matmul.yaml does not name the module: not parsed


def test_incremental_check_rereads_an_edited_registry_file(registry):
    assert check_registry_changed(registry, [f"{YAML}/matmul.yaml"])[0] == []
    path = registry / YAML / "matmul.yaml"
    path.write_text(path.read_text().replace("MatmulRule", "MatMulRule"))  # same size: mtime tells
    findings, _ = check_registry_changed(registry, [f"{YAML}/matmul.yaml"])
    assert [f.rule for f in findings] == ["registry-class"]
