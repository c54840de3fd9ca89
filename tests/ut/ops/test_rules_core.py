# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT: element-wise, matmul-family, attention and foreach rules on hand-built calls (no processes)."""
import pytest

from hyper_parallel import Partial, Replicate, Shard
from hyper_parallel.core.ops.rules.attention import SdpaRule
from hyper_parallel.core.ops.rules.elementwise import ElementwiseRule
from hyper_parallel.core.ops.rules.foreach import ForeachRule
from hyper_parallel.core.ops.rules.matmul import (AddmmRule, EinsumEquationRule, LinearRule, MatmulRule,
                                                       MmRule)
from hyper_parallel.core.ops.rule import OpCall, RuleError, TensorArg

R, P, S0, S1, S2 = Replicate(), Partial(), Shard(0), Shard(1), Shard(2)


def call(op, *tensors, args=None, kwargs=None, mesh=(2,)):
    targs = [TensorArg(i, shape, pl) for i, (shape, pl) in enumerate(tensors)]
    if args is None:
        args = tuple(("__tensor__", i) for i in range(len(tensors)))
    return OpCall(op, targs, args, kwargs or {}, mesh)


def test_elementwise_broadcast_and_shards():
    rule = ElementwiseRule("torch.add", partial="additive")
    dec = rule.infer(call("torch.add", ((4, 6), (S0,)), ((6,), (R,))))
    assert dec.outputs == ((S0,), (4, 6)) and dec.inputs == [(S0,), (R,)]
    dec = rule.infer(call("torch.add", ((4, 6), (R,)), ((6,), (S0,))))
    assert dec.outputs == ((S1,), (4, 6)) and dec.inputs == [(S1,), (S0,)]  # R -> S locally, no comm
    dec = rule.infer(call("torch.add", ((4, 1), (S1,)), ((1, 6), (R,))))  # size-1 dim cannot stay sharded
    assert dec.outputs == ((R,), (4, 6)) and dec.inputs == [(R,), (R,)]
    with pytest.raises(RuleError, match="cannot be broadcast"):
        rule.infer(call("torch.add", ((4, 6), (R,)), ((5,), (R,))))


def test_elementwise_partial_modes():
    add = ElementwiseRule("torch.add", partial="additive")
    assert add.infer(call("torch.add", ((3,), (P,)), ((3,), (P,)))).outputs[0] == (P,)
    dec = add.infer(call("torch.add", ((3,), (P,)), ((3,), (R,))))
    assert dec.outputs[0] == (P,) and dec.inputs == [(P,), (P,)]  # R -> P locally
    scalar = add.infer(call("torch.add", ((3,), (P,)), args=(("__tensor__", 0), 2.0)))
    assert scalar.outputs[0] == (R,) and scalar.inputs == [(R,)]  # a scalar addend would be added n times
    mul = ElementwiseRule("torch.mul", partial="multiplicative")
    assert mul.infer(call("torch.mul", ((3,), (P,)), ((3,), (R,)))).outputs[0] == (P,)
    two = mul.infer(call("torch.mul", ((3,), (P,)), ((3,), (P,))))
    assert two.outputs[0] == (R,) and two.inputs == [(R,), (R,)]
    div = ElementwiseRule("torch.div", partial="numerator")
    assert div.infer(call("torch.div", ((3,), (P,)), ((3,), (R,)))).outputs[0] == (P,)
    assert div.infer(call("torch.div", ((3,), (R,)), ((3,), (P,)))).outputs[0] == (R,)
    exp = ElementwiseRule("torch.exp")
    assert exp.infer(call("torch.exp", ((3,), (P,)))).inputs == [(R,)]


def test_elementwise_inplace_keeps_self_and_refuses_nonlinear_partial():
    add_ = ElementwiseRule("Tensor.add_", partial="additive", inplace=True)
    dec = add_.infer(call("Tensor.add_", ((4, 6), (R,)), ((4, 6), (S0,))))
    assert dec.inputs == [(R,), (R,)] and dec.outputs[0] == (R,)
    lerp_ = ElementwiseRule("Tensor.lerp_", inplace=True)
    with pytest.raises(RuleError, match=r"Tensor.lerp_: in-place update of a P\(sum\) tensor is not linear"):
        lerp_.infer(call("Tensor.lerp_", ((3,), (P,)), ((3,), (R,))))
    with pytest.raises(RuleError, match="in-place op on a plain tensor"):
        add_.infer(call("Tensor.add_", ((3,), None), ((3,), (S0,))))


def test_matmul_strategies():
    mm = MmRule("torch.mm")
    assert mm.infer(call("torch.mm", ((4, 6), (S0,)), ((6, 8), (R,)))).outputs == ((S0,), (4, 8))
    assert mm.infer(call("torch.mm", ((4, 6), (R,)), ((6, 8), (S1,)))).outputs == ((S1,), (4, 8))
    row = mm.infer(call("torch.mm", ((4, 6), (S1,)), ((6, 8), (S0,))))
    assert row.outputs == ((P,), (4, 8)) and row.inputs == [(S1,), (S0,)]
    assert mm.infer(call("torch.mm", ((4, 6), (P,)), ((6, 8), (R,)))).outputs[0] == (P,)
    with pytest.raises(RuleError, match="expected 2-D operands"):
        mm.infer(call("torch.mm", ((4,), (R,)), ((4, 2), (R,))))
    lin = LinearRule("torch.nn.functional.linear")
    col = lin.infer(call("F.linear", ((3, 6), (R,)), ((8, 6), (S0,)), ((8,), (R,))))
    assert col.outputs == ((S1,), (3, 8)) and col.inputs[2] == (S0,) and col.expand is None
    rowb = lin.infer(call("F.linear", ((3, 6), (S1,)), ((8, 6), (S1,)), ((8,), (R,))))
    assert rowb.outputs[0] == (P,) and rowb.expand == "add_bias_once"  # bias added once, not per rank
    bcast = MatmulRule("torch.matmul").infer(call("m", ((2, 1, 4, 5), (S1,)), ((3, 5, 2), (R,))))
    assert bcast.inputs[0] == (R,)  # a broadcast (size-1) batch dim is never sharded
    addmm = AddmmRule("torch.addmm").infer(call("a", ((4, 8), (R,)), ((4, 6), (S0,)), ((6, 8), (R,))))
    assert addmm.outputs == ((S0,), (4, 8)) and addmm.inputs == [(S0,), (S0,), (R,)]
    eq = EinsumEquationRule("torch.einsum")
    dec = eq.infer(call("e", ((2, 3, 4), (S2,)), ((2, 4, 5), (S1,)), args=("bij,bjk->bik", ("__tensor__", 0),
                                                                           ("__tensor__", 1))))
    assert dec.outputs == ((P,), (2, 3, 5))
    with pytest.raises(RuleError, match="ellipsis is not supported"):
        eq.infer(call("e", ((2, 3), (R,)), args=("...i->...", ("__tensor__", 0))))


def test_matmul_on_2d_mesh_combines_strategies():
    lin = LinearRule("torch.nn.functional.linear")
    dec = lin.infer(call("F.linear", ((4, 6), (S0, R)), ((8, 6), (R, S0)), mesh=(2, 2)))
    assert dec.outputs == ((S0, S1), (4, 8))


def test_sdpa_rule():
    rule = SdpaRule("sdpa")
    q = ((2, 4, 6, 8), (S1,))
    dec = rule.infer(call("sdpa", q, q, q, args=(("__tensor__", 0), ("__tensor__", 1), ("__tensor__", 2))))
    assert dec.outputs == ((S1,), (2, 4, 6, 8))
    seq = ((2, 4, 6, 8), (S2,))
    causal = rule.infer(call("sdpa", seq, seq, seq, args=(("__tensor__", 0), ("__tensor__", 1), ("__tensor__", 2),
                                                          None, 0.0, True)))
    assert causal.outputs[0] == (R,)  # a causal mask needs global positions
    free = rule.infer(call("sdpa", seq, seq, seq, args=(("__tensor__", 0), ("__tensor__", 1), ("__tensor__", 2))))
    assert free.outputs[0] == (S2,) and free.inputs == [(S2,), (R,), (R,)]


def test_foreach_rule_checks_layouts():
    rule = ForeachRule("torch._foreach_add_", inplace=True)
    lists = ([("__tensor__", 0), ("__tensor__", 1)], [("__tensor__", 2), ("__tensor__", 3)])
    ok = rule.infer(call("f", ((4,), (S0,)), ((3, 3), (R,)), ((4,), (S0,)), ((3, 3), (R,)), args=lists))
    assert ok.outputs is None and ok.inputs == [None] * 4
    with pytest.raises(RuleError, match=r"position 1: tensors differ in layout"):
        rule.infer(call("f", ((4,), (S0,)), ((3, 3), (R,)), ((4,), (S0,)), ((3, 3), (S0,)), args=lists))
    with pytest.raises(RuleError, match="different lengths"):
        rule.infer(call("f", ((4,), (S0,)), ((4,), (S0,)), ((4,), (S0,)),
                        args=([("__tensor__", 0), ("__tensor__", 1)], [("__tensor__", 2)])))
