# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The one-process layout probe on ops whose distributed rules are known."""
import torch
import torch.nn.functional as F

from hp_agent.dist_op.analysis import derive, scan_combine
from hp_agent.dist_op.interface import resolve_torch, torch_interface
from hp_agent.dist_op.probe import parse_placement, probe_call, simulate


def _table(fn, args, kwargs=None, ranks=(2, 3)):
    return probe_call(fn, args, kwargs or {}, ranks=ranks).table


def test_elementwise_keeps_every_shard_and_reduces_partial():
    table = _table(torch.relu, [torch.randn(5, 6)])
    assert table[("S(0)",)] == [["S(0)"]]
    assert table[("S(1)",)] == [["S(1)"]]
    assert table[("R",)] == [["R"]]
    assert table[("P(sum)",)] == [[]]  # relu is not linear


def test_linear_unary_keeps_partial():
    assert _table(torch.deg2rad, [torch.randn(4, 6)])[("P(sum)",)] == [["P(sum)"]]


def test_reduction_with_keepdim():
    x = torch.randn(5, 6)
    table = _table(lambda t: torch.sum(t, 1, keepdim=True), [x])
    assert table[("S(1)",)] == [["P(sum)"]]
    assert table[("S(0)",)] == [["S(0)"]]
    assert _table(lambda t: torch.sum(t, 0), [x])[("S(1)",)] == [["S(0)"]]  # the dim shifts left
    assert _table(lambda t: torch.amax(t, 0), [x])[("S(0)",)] == [["P(max)"]]


def test_matmul_contraction_gives_partial():
    table = _table(torch.mm, [torch.randn(4, 6), torch.randn(6, 5)])
    assert table[("S(1)", "S(0)")] == [["P(sum)"]]
    assert table[("S(0)", "R")] == [["S(0)"]]
    assert table[("R", "S(1)")] == [["S(1)"]]
    assert table[("S(1)", "R")] == [[]]


def test_softmax_couples_its_dim():
    table = _table(lambda t: torch.softmax(t, 1), [torch.randn(4, 6)])
    assert table[("S(0)",)] == [["S(0)"]]
    assert table[("S(1)",)] == [[]]


def test_cumsum_is_an_additive_scan():
    x = torch.randn(5, 6)
    table = _table(lambda t: torch.cumsum(t, 0), [x])
    assert table[("S(0)",)] == [[]] and table[("S(1)",)] == [["S(1)"]]
    assert scan_combine(torch.cumsum, x, {"dim": 0}, 0) == "add"
    assert scan_combine(torch.cumprod, x.abs() + 0.5, {"dim": 0}, 0) == "mul"
    assert scan_combine(torch.softmax, x, {"dim": 0}, 0) is None


def test_transpose_and_view_move_the_shard():
    x = torch.randn(4, 6)
    table = _table(lambda t: t.transpose(0, 1), [x])
    assert table[("S(0)",)] == [["S(1)"]] and table[("S(1)",)] == [["S(0)"]]
    view = _table(lambda t: t.flatten(), [x], ranks=(2,))
    assert view[("S(0)",)] == [["S(0)"]]  # 2 rows of 6 per rank are the first / last 12 elements
    assert view[("S(1)",)] == [[]]
    uneven = _table(lambda t: t.flatten(), [torch.randn(5, 6)], ranks=(2,))
    assert uneven[("S(0)",)] == [[]]  # 3 + 2 rows are not the 15 + 15 chunks of the flat tensor
    fixed = _table(lambda t: t.reshape(24), [x], ranks=(2,))
    assert fixed[("S(0)",)] == [[]]  # a global target shape cannot run on a shard (the view rule's expand)


def test_uneven_and_size_one_dims():
    table = _table(torch.relu, [torch.randn(1, 7)])
    assert table[("S(0)",)] == [["S(0)"]]  # shards of 1 and 0 rows
    locals_ = simulate(torch.relu, [torch.randn(1, 7)], {}, [parse_placement("S(1)")], 3)
    assert [r[0].shape[1] for r in locals_] == [3, 3, 1]


def test_derive_matches_known_rule_shapes():
    cases = {"torch.sinh": ("elementwise", False), "torch.deg2rad": ("elementwise", True),
             "torch.softmax": ("except_dim", False), "torch.nn.functional.glu": ("except_dim", False)}
    for name, (kind, linear) in cases.items():
        deriv = derive(resolve_torch(name), torch_interface(name))
        assert (deriv.kind, deriv.linear) == (kind, linear), name
    glu = derive(F.glu, torch_interface("torch.nn.functional.glu"))
    assert glu.shape_rule == "halved" and glu.cache_values == ["dim"]
    cumsum = derive(torch.cumsum, torch_interface("torch.cumsum"))
    assert cumsum.kind == "except_dim" and cumsum.scan == "add" and cumsum.linear
    normalize = derive(F.normalize, torch_interface("torch.nn.functional.normalize"))
    assert normalize.expand == "pnorm"
    assert derive(torch.diff, torch_interface("torch.diff")).shape_rule == "minus_n"


def test_interface_reads_schema_and_signature():
    cumprod = torch_interface("torch.cumprod")
    assert cumprod.source.startswith("torch._C schema")
    assert [p.name for p in cumprod.params][:2] == ["self", "dim"] and not cumprod.param("dim").has_default
    glu = torch_interface("torch.nn.functional.glu")
    assert glu.source == "inspect.signature" and glu.param("dim").default == -1
    assert "float32" in glu.dtypes and "int64" not in glu.dtypes


def test_binary_elementwise_partial_modes_match_the_registry():
    modes = {"torch.add": "additive", "torch.mul": "multiplicative", "torch.div": "numerator", "torch.fmax": "none"}
    for name, mode in modes.items():
        deriv = derive(resolve_torch(name), torch_interface(name))
        assert (deriv.kind, deriv.n_tensors, deriv.partial) == ("elementwise", 2, mode), name


def test_mindspore_names_map_to_their_torch_counterpart():
    import pytest
    from hp_agent.dist_op.analyze import torch_counterpart
    from hp_agent.dist_op.interface import AnalyzeError
    assert torch_counterpart("mindspore.mint.cumprod") == "torch.cumprod"
    assert torch_counterpart("mindspore.mint.nn.functional.tanhshrink") == "torch.nn.functional.tanhshrink"
    with pytest.raises(AnalyzeError, match="no torch counterpart"):
        torch_counterpart("mindspore.ops.nosuch")
