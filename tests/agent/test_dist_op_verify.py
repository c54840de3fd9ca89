# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``dist-op verify`` finds a deliberately wrong rule planted in a fixture registry."""
import json
import time

import pytest

from hyper_parallel.core.placement import Replicate
from hyper_parallel.core.ops.registry import Registry
from hyper_parallel.core.ops.rule import Decision, OpCall, OpRule

from hp_agent.dist_op.verify import OpTimeout, render_markdown, time_limit, verify
from tests.agent.conftest import REPO

FIXTURE = """
__default__:
  module: hyper_parallel.core.ops.rules.elementwise
  rule: ElementwiseRule
torch.relu: {}                                   # right
torch.exp: {options: {partial: preserve}}        # wrong: exp is not linear, P(sum) must be reduced
torch.softmax: {}                                # wrong: softmax couples its dim, S(dim) must be gathered
torch.tanh: {module: tests.agent.test_dist_op_verify, rule: GatherEverything}   # right but wasteful
torch.cumsum: {module: hyper_parallel.core.ops.rules.normalization, rule: SoftmaxRule}  # gathers the scan
torch.sigmoid: {module: tests.agent.test_dist_op_verify, rule: DoubleShardBug}  # wrong on 2-D meshes only
"""


class GatherEverything(OpRule):
    """Always asks for replicated inputs (correct, never native): every shard is a missed optimisation."""

    def infer(self, call: OpCall) -> Decision:
        t = call.tensors[0]
        need = (Replicate(),) * call.mesh_ndim
        return Decision(inputs=[need], outputs=(need, tuple(t.shape)))


class DoubleShardBug(OpRule):
    """Element-wise, but a dim sharded by both mesh dims is declared sharded by the outer one only."""

    def infer(self, call: OpCall) -> Decision:
        t = call.tensors[0]
        need = tuple(Replicate() if p.is_partial() else p for p in t.placements)
        out = list(need)
        if len(out) == 2 and out[0] == out[1] and out[0].is_shard():
            out[1] = Replicate()
        return Decision(inputs=[need], outputs=(tuple(out), tuple(t.shape)))


def _registry(tmp_path) -> Registry:
    path = tmp_path / "fixture.yaml"
    path.write_text(FIXTURE, encoding="utf-8")
    reg = Registry()
    reg.load_paths([path])
    return reg


def test_verify_flags_planted_false_positives_and_negatives(tmp_path):
    report = verify(registry=_registry(tmp_path))
    by_op = {o.op: o for o in report.ops}
    assert by_op["torch.relu"].findings == []
    assert by_op["torch.relu"].checked > 0
    exp = [f for f in report.false_positives if f.op == "torch.exp"]
    assert exp and all("P(sum)" in f.placements for f in exp)
    soft = [f for f in report.false_positives if f.op == "torch.softmax"]
    assert soft and any("S(" in f.placements and "does not reproduce" in f.detail for f in soft)
    tanh = [f for f in report.false_negatives if f.op == "torch.tanh"]
    assert tanh and all("S(" in f.placements for f in tanh) and not by_op["torch.tanh"].count("false positive")
    scans = [f for f in report.false_negatives if f.op == "torch.cumsum"]
    assert any("scan expand" in f.detail and "torch.add" in f.detail for f in scans) and not by_op["torch.cumsum"].count("false positive")
    double = [f for f in report.false_positives if f.op == "torch.sigmoid"]
    assert double and all("mesh [2, 2]" in f.placements for f in double)
    text = render_markdown(report)
    assert "## False positives" in text and "`torch.exp" in text and "| `torch.relu` |" in text


def test_verify_real_rules_of_known_families_are_clean():
    # torch.batch_norm: a channel dim split by both mesh dims of a 2x2 mesh left a rank with no channel
    # (torch's batch_norm fails on C=0): found by verify, fixed in BatchNormRule
    report = verify(["torch.add", "torch.sum", "torch.mm", "torch.softmax", "Tensor.transpose", "Tensor.view",
                     "torch.batch_norm"])
    assert report.false_positives == []
    assert all(o.checked > 0 for o in report.ops)


def test_cli_verify_and_refusals(cli):
    ok = cli(["dist-op", "verify", "torch.relu", "torch.nn.functional.glu", "--json"], cwd=REPO)
    assert ok.returncode == 0, ok.stderr
    data = json.loads(ok.stdout)
    assert data["ok"] and [r["op"] for r in data["table"]] == ["torch.relu", "torch.nn.functional.glu"]
    assert all(r["checked"] > 0 and r["fp"] == 0 for r in data["table"])
    # random inputs are not positive definite: OpInfo's samples are (the fallback when no pipeline sample runs)
    spd = cli(["dist-op", "verify", "torch.linalg.cholesky", "--json"], cwd=REPO)
    assert spd.returncode == 0 and json.loads(spd.stdout)["table"][0]["checked"] > 0, spd.stdout[-500:]
    none = cli(["dist-op", "verify", "hyper_parallel.kernels.rms_norm", "--json"], cwd=REPO)  # no sample runs
    assert none.returncode == 1 and json.loads(none.stdout)["ok"] is False, none.stdout[-500:]
    assert json.loads(none.stdout)["unprobed"][0]["op"] == "hyper_parallel.kernels.rms_norm"
    both = cli(["dist-op", "verify", "torch.relu", "--all"], cwd=REPO)
    assert both.returncode == 2 and "not both" in both.stderr
    unknown = cli(["dist-op", "verify", "torch.nosuchop"], cwd=REPO)
    assert unknown.returncode == 2 and "not registered" in unknown.stderr
    registered = cli(["dist-op", "analyze", "torch.add"], cwd=REPO)
    assert registered.returncode == 2 and "already registered" in registered.stderr


def test_mesh_simulation_round_trips_nested_shards_and_partials():
    import torch
    from hyper_parallel.core.placement import Partial, Shard
    from hp_agent.dist_op.meshsim import assemble_nd, split_nd
    t = torch.randn(5, 6)
    for placements in [(Shard(0), Shard(0)), (Shard(0), Shard(1)), (Partial(), Shard(1)), (Shard(1), Partial()),
                       (Replicate(), Shard(0))]:
        parts = split_nd(t, placements, (2, 2), torch.Generator().manual_seed(0))
        assert torch.allclose(assemble_nd(parts, placements, (2, 2)), t, atol=1e-6), placements
    nested = split_nd(t, (Shard(0), Shard(0)), (2, 2), torch.Generator())
    assert [nested[c].shape[0] for c in sorted(nested)] == [2, 1, 1, 1]  # 5 -> 3 + 2 -> (2 + 1) + (1 + 1)
    assert assemble_nd(nested, (Shard(0), Replicate()), (2, 2)) is None


SHAPES = """
__default__:
  module: hyper_parallel.core.ops.rules.elementwise
  rule: ElementwiseRule
torch.gcd: {}                                    # integer-only: probed on int64 inputs
torch.logical_not: {}                            # takes any dtype; probed as given
torch.linalg.cholesky: {}                        # positive-definite inputs from OpInfo; element-wise is wrong
hyper_parallel.kernels.rms_norm: {}              # no pipeline or OpInfo sample runs: unprobed
"""


def test_integer_only_ops_are_probed_and_an_unprobed_op_is_reported(tmp_path):
    path = tmp_path / "shapes.yaml"
    path.write_text(SHAPES, encoding="utf-8")
    reg = Registry()
    reg.load_paths([path])
    report = verify(registry=reg)
    by_op = {o.op: o for o in report.ops}
    assert by_op["torch.gcd"].checked > 0 and by_op["torch.gcd"].findings == []  # gcd is element-wise
    assert by_op["torch.logical_not"].checked > 0
    # random matrices are not positive definite; OpInfo's samples are, and they expose the planted wrong rule
    assert by_op["torch.linalg.cholesky"].checked > 0
    assert any(f.op == "torch.linalg.cholesky" for f in report.false_positives)
    unprobed = "hyper_parallel.kernels.rms_norm"
    assert [o.op for o in report.unprobed] == [unprobed]
    assert "integer and bool inputs" in by_op[unprobed].status and "OpInfo" in by_op[unprobed].status
    text = "\n".join(report.lines())
    assert f"{unprobed}: probed nothing" in text and "dist-op synth" in text
    assert report.to_dict()["unprobed"][0]["op"] == unprobed


def test_a_time_limit_is_not_swallowed_by_the_probes_broad_excepts():
    start = time.monotonic()
    with pytest.raises(OpTimeout):
        with time_limit(0.2):
            while time.monotonic() - start < 60:
                try:  # what the probes do around every op call
                    time.sleep(0.01)
                except Exception:  # pylint: disable=broad-except
                    pass
    assert time.monotonic() - start < 60
    with time_limit(0):  # no limit
        time.sleep(0.01)


def test_verify_stops_an_op_at_its_time_limit_and_says_so(cli):
    """``verify`` is bounded per op: an op over ``--timeout`` is stopped, listed as timed out with its partial
    counts and a fix, progress names it on stderr, and a named op that did not finish fails the run."""
    slow = cli(["dist-op", "verify", "Tensor.__rmatmul__", "--timeout", "0.05", "--progress"], cwd=REPO)
    assert slow.returncode == 1, slow.stdout[-800:]
    assert "Tensor.__rmatmul__: timed out after 0.05 s" in slow.stdout
    assert "`hp-agent dist-op verify Tensor.__rmatmul__ --timeout 0`" in slow.stdout
    assert "1 timed out, 0 unprobed" in slow.stdout.splitlines()[-1]
    assert "[1/1] Tensor.__rmatmul__:" in slow.stderr and "(timed out, partial)" in slow.stderr
    assert "verify: 1/1 ops in" in slow.stderr
    data = json.loads(cli(["dist-op", "verify", "Tensor.__rmatmul__", "--timeout", "0.05", "--json"],
                          cwd=REPO).stdout)
    assert data["ok"] is False and [t["op"] for t in data["timed_out"]] == ["Tensor.__rmatmul__"]
    assert data["unprobed"] == [] and data["table"][0]["status"].startswith("timed out")
