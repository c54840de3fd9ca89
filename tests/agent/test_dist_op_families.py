# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""dist-op for every op family: probe inputs of the dtype the op takes (integer, bool), 1-D and 0-d shapes
when 2-D ones fail, required scalars kept in every scenario and case, case files carrying the dtype, and
``differentiable`` decided by the probe (never defaulted)."""
import pytest
import torch

from hp_agent.dist_op.analysis import LOW_RANK_SHAPES, derive, input_choice, sample_tensor
from hp_agent.dist_op.analyze import _differentiable  # pylint: disable=protected-access
from hp_agent.dist_op.design import build_plan
from hp_agent.dist_op.interface import resolve_torch, torch_interface
from hp_agent.dist_op.plan import find_tbd
from hp_agent.dist_op.synth import dtype_field, named_scalars, opinfo_dtype, _opinfos  # pylint: disable=protected-access
from hyper_parallel.testing import op_cases


def test_integer_only_op_is_probed_with_int64_and_has_no_derivative():
    deriv = derive(resolve_torch("torch.gcd"), torch_interface("torch.gcd"))
    assert deriv.dtype == "int64" and deriv.ok_cases, [c.error for c in deriv.cases]
    assert all(c.dtype == "int64" for c in deriv.cases)
    assert deriv.kind == "elementwise" and deriv.partial == "none" and not deriv.linear
    assert _differentiable("torch.gcd", deriv) is False
    assert _differentiable("torch.hypot", derive(torch.hypot, torch_interface("torch.hypot"))) is True


def test_bool_only_op_is_probed_with_bool_inputs():
    def bool_only(x):
        if x.dtype != torch.bool:
            raise TypeError("bool tensors only")
        return ~x
    dtype, shapes = input_choice(bool_only, 1, [{}])
    assert dtype == "bool" and tuple(shapes[0]) == (4, 6)
    assert sample_tensor((3, 5), torch.Generator().manual_seed(0), "bool").dtype == torch.bool


def test_an_op_of_1d_inputs_is_probed_with_low_rank_shapes():
    def one_d(x):
        if x.dim() > 1:
            raise ValueError("x must be 1-D or 0-d")
        return x * 2
    dtype, shapes = input_choice(one_d, 1, [{}])
    assert (dtype, tuple(shapes)) == ("float32", LOW_RANK_SHAPES)
    assert () in shapes  # a 0-d input is probed too


def test_no_probe_case_leaves_differentiable_open_not_true():
    deriv = derive(lambda x: (_ for _ in ()).throw(RuntimeError("never runs")), torch_interface("torch.relu"))
    assert not deriv.ok_cases
    assert _differentiable("torch.relu", deriv) is None
    iface = torch_interface("torch.relu")
    plan = build_plan(["torch.relu"], {"torch.relu": iface}, deriv, {"installed": False}, [], None,
                      differentiable=None)
    assert str(plan.meta["derivation"]["differentiable"]).startswith("[TBD]")
    assert any("derivative" in t for t in find_tbd(plan))


def test_required_scalars_after_the_tensors_are_kept_by_name():
    iface = torch_interface("torch.nn.functional.lp_pool1d")
    fn = resolve_torch("torch.nn.functional.lp_pool1d")
    args, kwargs = named_scalars(([torch.rand(2, 3, 8), 2.0, 3], {}), iface, fn)
    assert len(args) == 1 and kwargs == {"norm_type": 2.0, "kernel_size": 3}
    # a call refused by keyword stays positional
    args, kwargs = named_scalars(([torch.rand(2, 3, 8), 2.0, 3], {}), iface, lambda *a, **k: (_ for _ in ()).throw(
        TypeError("positional only")))
    assert len(args) == 3 and kwargs == {}


def test_opinfo_samples_of_an_integer_only_op_are_int64():
    info = _opinfos("torch.gcd")[0]
    assert opinfo_dtype(info) == torch.int64
    assert opinfo_dtype(_opinfos("torch.add")[0]) == torch.float32
    assert dtype_field(["torch.float32"]) == {}
    assert dtype_field(["torch.int64", "torch.int64"]) == {"dtype": "torch.int64"}
    assert dtype_field(["torch.bool", "torch.float32"]) == {"dtype": ["torch.bool", "torch.float32"]}


def test_case_inputs_carry_their_dtype():
    ints = op_cases._inputs({"shapes": [[4, 6], [4, 6]], "dtype": "torch.int64"})  # pylint: disable=protected-access
    assert [t.dtype for t in ints] == [torch.int64, torch.int64]
    assert all(int(t.min()) >= 1 and int(t.max()) < 20 for t in ints)
    mixed = op_cases._inputs({"shapes": [[4], [4]], "dtype": ["torch.bool", "torch.float32"]})  # pylint: disable=protected-access
    assert [t.dtype for t in mixed] == [torch.bool, torch.float32]
    assert op_cases._inputs({"shape": [3]})[0].dtype == torch.float32  # pylint: disable=protected-access
    with pytest.raises(op_cases.CaseFileError, match="expected a torch dtype"):
        op_cases._inputs({"shape": [3], "dtype": "int64"})  # pylint: disable=protected-access
    with pytest.raises(op_cases.CaseFileError, match="2 dtypes for 1 tensors"):
        op_cases._inputs({"shape": [3], "dtype": ["torch.bool", "torch.bool"]})  # pylint: disable=protected-access
