# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Batch mode pieces that need no test run: the unsupported list from a coverage report, batch files,
the review summary and the batch confirmation (decisions applied, one record per plan)."""
import pytest

from hp_agent.dist_op.batch import confirm_batch, read_batch, review_rows, torch_name, unsupported_ops
from hp_agent.dist_op.plan import Plan, PlanError, load_plan, plan_state

COVERAGE = """# OpInfo coverage

| op | samples | R: passed / failed / unsupported | S(0): passed / failed / unsupported | status | torch DTensor status | first problem |
|---|---|---|---|---|---|---|
| `acos` | 3 | 0 / 0 / 3 | 0 / 0 / 2 | unsupported | pass | R: no distributed rule |
| `add` | 3 | 3 / 0 / 0 | 2 / 0 / 0 | pass | pass |  |
| `nn.functional.hardtanh` | 3 | 0 / 0 / 3 | 0 / 0 / 3 | unsupported | pass | R: no rule |
| `max.reduction_with_dim` | 3 | 0 / 0 / 3 | 0 / 0 / 3 | unsupported | pass | R: no rule |
| `_segment_reduce.lengths` | 3 | 0 / 0 / 3 | 0 / 0 / 3 | unsupported | pass | R: no rule |
| `erfc` | 3 | 0 / 0 / 3 | 0 / 0 / 3 | unsupported | pass | R: no rule |
| `bool` | 3 | 0 / 0 / 3 | 0 / 0 / 1 | unsupported | pass | R: RuntimeError: hyper_parallel DTensor: no distributed rule for TensorBase.bool. Register one with |
| `H` | 2 | 0 / 0 / 2 | 0 / 0 / 2 | unsupported | pass | R: RuntimeError: hyper_parallel DTensor: no distributed rule for getset_descriptor.__get__. Register one |
| `slice` | 3 | 0 / 0 / 3 | 0 / 0 / 3 | unsupported | pass | R: RuntimeError: hyper_parallel DTensor: no distributed rule for torch._ops.aten.aten::slice.Tensor. Register one |
| `torch.ops.aten._safe_softmax.default` | 3 | 0 / 0 / 3 | 0 / 0 / 3 | unsupported | pass | R: RuntimeError: hyper_parallel DTensor: no distributed rule for torch._ops.aten.aten::_safe_softmax. Register one |
| `_softmax_backward_data` | 3 | 0 / 0 / 3 | 0 / 0 / 3 | unsupported | pass | R: RuntimeError: hyper_parallel DTensor: no distributed rule for torch._ops.aten.pybind11_detail_function_record_v1_system_libstdcpp_gxx_abi_1xxx_use_cxx11_abi_1._ |
| `_unsafe_masked_index` | 3 | 0 / 0 / 3 | 0 / 0 / 3 | unsupported | pass | R: RuntimeError: hyper_parallel DTensor: no distributed rule for torch._unsafe_masked_index. Register one |
| `nn.functional.max_pool2d` | 3 | 0 / 0 / 3 | 0 / 0 / 3 | unsupported | pass | R: RuntimeError: hyper_parallel DTensor: no distributed rule for torch.nn.functional.max_pool2d_with_indices. Register one |
| `nn.functional.prelu` | 3 | 0 / 0 / 3 | 0 / 0 / 3 | unsupported | pass | R: RuntimeError: hyper_parallel DTensor: no distributed rule for torch.prelu. Register one |
| `nn.functional.fractional_max_pool2d` | 3 | 0 / 0 / 3 | 0 / 0 / 3 | unsupported | pass | R: RuntimeError: hyper_parallel DTensor: no distributed rule for torch.nn.functional.boolean_dispatch.<locals>.fn. Register one |
| `masked.std` | 3 | 0 / 0 / 3 | 0 / 0 / 3 | unsupported | pass | R: RuntimeError: hyper_parallel DTensor: no distributed rule for torch.subtract. Register one |
"""


def test_unsupported_ops_from_a_coverage_report(tmp_path):
    report = tmp_path / "op_coverage.md"
    report.write_text(COVERAGE, encoding="utf-8")
    # a variant stands for its base op; a Tensor method by the name the dispatcher reported; a property by its
    # getter, an aten overload (or packet, whose name the report cuts off) by its torch.ops name, a private op
    # OpInfo tests by its own name; the function the dispatcher reported as well when it is another object
    # (max_pool2d runs max_pool2d_with_indices; torch.prelu IS F.prelu); other private names are left out
    assert unsupported_ops(report) == [
        "torch.acos", "torch.nn.functional.hardtanh", "torch.max", "torch.erfc", "Tensor.bool", "Tensor.H",
        "torch.ops.aten.slice.Tensor", "torch.ops.aten._safe_softmax.default", "torch.ops.aten._softmax_backward_data",
        "torch._unsafe_masked_index", "torch.nn.functional.max_pool2d", "torch.nn.functional.max_pool2d_with_indices",
        "torch.nn.functional.prelu", "torch.nn.functional.fractional_max_pool2d", "torch.subtract"]
    assert unsupported_ops(report, family="torch")[:4] == ["torch.acos", "torch.max", "torch.erfc", "Tensor.bool"]
    assert unsupported_ops(report, family="nn.functional")[:2] == ["torch.nn.functional.hardtanh",
                                                                   "torch.nn.functional.max_pool2d"]
    assert unsupported_ops(report, limit=1) == ["torch.acos"]
    assert torch_name("max.reduction_with_dim") is None and torch_name("no_such_op") is None
    with pytest.raises(PlanError, match="no coverage report"):
        unsupported_ops(tmp_path / "missing.md")


def _plan(tmp_path, name, tbd=True):
    meta = {"op": name, "path": "A", "rule": {"class": "ElementwiseRule"},
            "frontends": {"mindspore": {"in_scope": "[TBD] in scope?" if tbd else False}},
            "accepted": [{"input": ["S(0)"], "output": ["S(0)"]}, {"input": ["R"], "output": ["R"]}],
            "derivation": {"differentiable": True}, "status": "draft"}
    path = tmp_path / f"{name}.md"
    Plan(meta, "\n## Synthesised strategies\n- generalised: S(d) -> S(d) when d != dim\n").save(path)
    return path


def test_review_and_batch_confirmation(tmp_path):
    paths = [_plan(tmp_path, "torch.acos"), _plan(tmp_path, "torch.erfc")]
    batch = tmp_path / "batch.txt"
    batch.write_text("# two ops\ntorch.acos.md\n\ntorch.erfc.md\n", encoding="utf-8")
    assert read_batch(batch) == paths
    rows = review_rows([load_plan(p) for p in paths])
    assert rows[0]["strategies"] == ["R->R", "S(0)->S(0)"] and rows[0]["status"] == "draft"
    assert rows[0]["conditions"] == ["S(d) -> S(d) when d != dim"] and len(rows[0]["tbd"]) == 1
    refused = confirm_batch(paths, "Person <p@example.org>", [])  # the [TBD] is still open: refused by name
    assert [r["confirmed"] for r in refused] == [False, False] and "[TBD]" in refused[0]["error"]
    records = confirm_batch(paths, "Person <p@example.org>", ["frontends.mindspore.in_scope=false"])
    assert all(r["confirmed"] and r["by"] == "Person <p@example.org>" and len(r["sha256"]) == 64 for r in records)
    assert [plan_state(load_plan(p)) for p in paths] == ["confirmed", "confirmed"]
    batch.write_text("torch.nope.md\n", encoding="utf-8")
    with pytest.raises(PlanError, match="does not exist"):
        read_batch(batch)
