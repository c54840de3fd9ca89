# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ST: the OpInfo coverage machinery counts right (a few ops, not the full report)."""
import pytest

from hyper_parallel.testing import multi_rank
from hyper_parallel.devtools import op_coverage as cov


def test_errors_are_classified():
    from hyper_parallel.core.ops.rule import RuleError
    assert cov.classify_error(RuleError("torch.x: refuses S(0)")) == "unsupported"
    assert cov.classify_error(RuntimeError("hyper_parallel DTensor: no distributed rule for torch.foo.")) \
        == "unsupported"
    assert cov.classify_error(RuntimeError("shape mismatch")) == "failed"
    assert cov.classify_error(AssertionError("values differ")) == "failed"
    assert cov.classify_error(TypeError("no distributed rule")) == "failed"  # only the dispatcher's RuntimeError
    refusal = NotImplementedError("Operator aten.foo.default does not have a sharding strategy registered.")
    assert cov.classify_error(refusal, "torch") == "unsupported"  # torch DTensor's own refusal
    assert cov.classify_error(refusal) == "failed"  # not ours
    assert cov.classify_error(RuntimeError("no distributed rule"), "torch") == "failed"


def test_result_status_and_markdown_totals():
    ok, mixed, refused, broken = (cov.OpResult(n) for n in ("a", "b", "c", "d"))
    for r, outcomes in ((ok, ["passed", "passed"]), (mixed, ["passed", "unsupported"]),
                        (refused, ["unsupported", "unsupported"]), (broken, ["failed", "unsupported"])):
        r.samples = 1
        for config, outcome in zip(cov.CONFIGS, outcomes):
            r.add(config, outcome, "why")
    assert [r.status for r in (ok, mixed, refused, broken)] == ["pass", "partial", "unsupported", "fail"]
    report = cov.CoverageReport([ok, mixed, refused, broken], max_samples=1, world_size=2, seconds=1.0)
    totals = report.totals()
    assert (totals["passed"], totals["failed"], totals["unsupported"], totals["runs"]) == (3, 1, 4, 8)
    text = cov.render_markdown(report)
    assert "**4 OpInfo ops, 4 samples, 8 runs: 3 passed, 1 failed, 4 unsupported.**" in text
    assert "| `b` | 1 | 1 / 0 / 0 | 0 / 0 / 1 | partial | S(0): why |" in text

    # torch DTensor's results of the same run: a column, both headline counts and the two difference lists
    peer = [cov.OpResult(n) for n in ("a", "b", "c", "d")]
    for r, outcome in zip(peer, ["passed", "passed", "passed", "unsupported"]):
        r.samples = 1
        r.add("R", outcome, "why")
    report.peer = peer
    assert report.differences() == (["b", "c"], [])
    text = cov.render_markdown(report)
    assert "hyper-parallel 1 ops pass every run (1 failed runs, 0 of them wrong results), torch DTensor 3 " \
           "(0 failed runs, 0 of them wrong results, 1 ops" in text
    broken.add("S(0)", "failed", "PeerError: rank 1 raised RuntimeError: shard too small")  # a peer's error
    assert report.totals()["wrong"] == 0  # a failed run, not a wrong value
    broken.add("S(0)", "failed", "WrongResult: values differ", wrong=True)
    assert report.totals()["wrong"] == 1
    assert "does not (2): `b`, `c`." in text and "torch DTensor does not (0): none." in text
    assert "| `d` | 1 | 0 / 1 / 0 | 0 / 0 / 1 | fail | unsupported | R: why |" in text


def test_only_a_differing_output_is_a_wrong_result():
    import torch
    with pytest.raises(cov.WrongResult):
        cov._compare([torch.ones(2)], [torch.zeros(2)], values=True)  # pylint: disable=protected-access
    with pytest.raises(cov.WrongResult, match="shape/dtype"):
        cov._compare([torch.ones(3)], [torch.ones(2)], values=False)  # pylint: disable=protected-access
    cov._compare([torch.ones(2)], [torch.ones(2)], values=True)  # pylint: disable=protected-access
    assert not issubclass(cov.PeerError, AssertionError) and issubclass(cov.WrongResult, AssertionError)


@multi_rank(world_size=2, timeout=300)
def test_supported_op_passes_and_unregistered_op_is_unsupported_never_failed():
    results = {r.name: r for r in cov.run_op_samples(["add", "zeros_like", "rand_like", "std_mean.unbiased",
                                                      "to_sparse"], max_samples=3)}
    for name in ("add", "zeros_like", "rand_like", "std_mean.unbiased"):  # std_mean: an empty sample gives NaNs  # registered: every counted run passes, both placements
        r = results[name]
        assert r.status == "pass" and r.total("failed") == r.total("unsupported") == 0, (name, r)
        assert r.counts["R"]["passed"] == r.samples >= 2 and r.counts["S(0)"]["passed"] >= 1, (name, r.counts)
    fft = results["to_sparse"]  # no distributed rule (refused by design: a sparse result): a clear refusal
    assert fft.status == "unsupported" and fft.total("failed") == 0 and fft.total("passed") == 0, fft
    assert fft.total("unsupported") == fft.runs > 0
    assert "no distributed rule" in fft.details[0]
    with pytest.raises(KeyError, match="not an OpInfo name"):
        cov.run_op_samples(["no.such.op"])
    # the same samples through torch DTensor: counted the same way
    (theirs,) = cov.run_op_samples(["add"], max_samples=2, impl="torch")
    assert theirs.status == "pass" and theirs.counts["R"]["passed"] == theirs.samples == 2, theirs
    with pytest.raises(ValueError, match="impl="):
        cov.run_op_samples(["add"], impl="jax")
