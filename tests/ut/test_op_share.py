# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT: the share report (ops unsupported in a baseline coverage report: pass now, and through what)."""
import subprocess

import pytest

from hyper_parallel.devtools import op_coverage as cov
from hyper_parallel.devtools import op_share

_HEAD = ("| op | samples | R: passed / failed / unsupported | S(0): passed / failed / unsupported | status | "
         "first problem |\n|---|---|---|---|---|---|\n")


def _row(name: str, status: str) -> str:
    return f"| `{name}` | 1 | 0 / 0 / 1 | 0 / 0 / 1 | {status} | R: a \\| b |\n"


BASELINE = "# OpInfo coverage\n\n" + _HEAD + "".join(_row(n, s) for n, s in [
    ("acos", "unsupported"), ("H", "unsupported"), ("narrow", "unsupported"), ("prelu", "unsupported"),
    ("T", "unsupported"), ("to_sparse", "unsupported"), ("abs", "pass")])


def _report(entries):
    """A newer report built by op_coverage's own renderer: ``entries`` = {op: (status, {entry: file})}."""
    results = []
    for name, (status, used) in entries.items():
        r = cov.OpResult(name)
        r.samples = 1
        for config in cov.CONFIGS:
            r.add(config, "passed" if status == "pass" else "unsupported", "why")
        r.entries = used
        results.append(r)
    return cov.render_markdown(cov.CoverageReport(results, max_samples=1, world_size=2, seconds=1.0))


NOW = _report({
    "acos": ("pass", {"torch.acos": "generated.yaml"}),
    "H": ("pass", {"Tensor.H": "generated.yaml", "torch.mul": "elementwise.yaml"}),
    "narrow": ("pass", {"torch.narrow": "views.yaml"}),
    "prelu": ("pass", {"torch.prelu": "normalization.yaml"}),
    "T": ("pass", {}),
    "to_sparse": ("unsupported", {}),
    "abs": ("pass", {"torch.abs": "elementwise.yaml"}),
})


def test_entries_section_round_trips_through_the_renderer():
    entries = op_share.read_entries(NOW)
    assert entries["H"] == {"Tensor.H": "generated.yaml", "torch.mul": "elementwise.yaml"}
    assert "T" not in entries and "to_sparse" not in entries  # ops that dispatched through nothing
    assert op_share.read_status(NOW)["to_sparse"] == "unsupported"
    assert op_share.read_status(BASELINE)["prelu"] == "unsupported"  # an escaped '|' in the problem cell


def test_share_without_a_revision_classifies_by_file():
    rep = op_share.share(BASELINE, NOW)
    assert rep.baseline_unsupported == sorted(["acos", "H", "narrow", "prelu", "T", "to_sparse"])
    assert rep.passing == {"acos": "generated", "H": "generated", "narrow": "hand-written",
                           "prelu": "hand-written", "T": "no entry"}
    assert rep.not_passing == {"to_sparse": "unsupported"}
    text = op_share.render_share(rep)
    assert "**Of 6 ops unsupported in the baseline, 5 pass every run now (83.3 %); 2 of them through registry " \
           "entries written by the dist-op pipeline (33.3 % of the baseline's unsupported ops).**" in text
    assert "| hand-written | 2 | `narrow`, `prelu` |" in text
    assert "| not passing | 1 | `to_sparse` (unsupported) |" in text


def test_share_since_a_revision_separates_new_hand_rules_from_existing_ones():
    old_hand = {"torch.narrow", "torch.mul"}  # registered by hand at the baseline; torch.prelu is new
    rep = op_share.share(BASELINE, NOW, old_hand)
    assert rep.passing["narrow"] == "existing rules"
    assert rep.passing["prelu"] == "hand-written"
    assert rep.passing["H"] == "generated"  # its hand-written entry existed before


def test_hand_written_names_at_reads_the_registry_of_a_git_revision(tmp_path):
    yaml_dir = tmp_path / "hyper_parallel" / "core" / "ops" / "yaml"
    yaml_dir.mkdir(parents=True)
    (yaml_dir / "views.yaml").write_text("__default__: {module: m}\ntorch.narrow: {rule: R}\n")
    (yaml_dir / "generated.yaml").write_text("torch.acos: {rule: R, module: m}\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@e"]
    subprocess.run(git + ["init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(git + ["add", "-A"], cwd=tmp_path, check=True)
    subprocess.run(git + ["commit", "-qm", "x"], cwd=tmp_path, check=True)
    assert op_share.hand_written_names_at("HEAD", tmp_path) == {"torch.narrow"}
    with pytest.raises(ValueError, match="--since 'nope'"):
        op_share.hand_written_names_at("nope", tmp_path)


def test_cli_refuses_a_report_without_entries(tmp_path, capsys):
    base, old = tmp_path / "base.md", tmp_path / "old.md"
    base.write_text(BASELINE)
    old.write_text(BASELINE)
    assert op_share.main(["--baseline", str(base), "--report", str(old)]) == 2
    assert "no section '## Registry entries per op'" in capsys.readouterr().err
    new = tmp_path / "new.md"
    new.write_text(NOW)
    assert op_share.main(["--baseline", str(base), "--report", str(new), "--out", str(tmp_path / "s.md")]) == 0
    assert "| generated | 2 |" in (tmp_path / "s.md").read_text()
