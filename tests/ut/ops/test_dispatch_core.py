# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT: the backend-free dispatch pipeline (``core/ops/dispatch.py``) with stand-in tensors, a stand-in
mesh and a recording platform — no framework, no processes."""
import pytest

from hyper_parallel import Partial, Replicate, Shard
from hyper_parallel.core.mesh_topology import MeshTopology
from hyper_parallel.core.ops import dispatch as D
from hyper_parallel.core.ops.rule import Decision, OpRule, OutputSpec, RuleError, as_output_specs
from hyper_parallel.core.ops.rules.elementwise import ElementwiseRule
from hyper_parallel.core.ops.strict import StrictRedistributionError, strict_dispatch
from hyper_parallel.core.spec import DTensorSpec

R, S0, S1 = Replicate(), Shard(0), Shard(1)


class Mesh(MeshTopology):
    """A mesh topology seen from rank 0, whose groups are labels."""

    def get_group(self, d):
        return f"group{d}"

    def get_coordinate(self):
        return (0,) * self.ndim


class Plain:
    """A stand-in framework tensor."""

    def __init__(self, shape, requires_grad=True, name="t"):
        self.shape, self.requires_grad, self.name = tuple(shape), requires_grad, name

    def __repr__(self):
        return self.name


class DT(Plain):
    """A stand-in DTensor (its ``_spec`` is read by ``collect``)."""

    def __init__(self, spec, requires_grad=True, name="d"):
        super().__init__(spec.shape, requires_grad, name)
        self._spec = spec


class Recorder:
    """A platform whose primitives return ``(name, input, args...)`` so the run can be read back."""

    name = "recorder"

    def __getattr__(self, name):
        def prim(x, *args):
            return (name, x, *args)
        return prim


MESH = Mesh((2,))
PLAT = Recorder()


def spec(placements, shape=(4, 6), grad_partial=frozenset(), mesh=MESH):
    return DTensorSpec(mesh, placements, shape, grad_partial=grad_partial)


def plan_for(rule, args, kwargs=None, unwrap=False):
    kwargs = kwargs or {}
    _, tensors, locs = D.collect(args, kwargs, Plain, DT)
    specs = [t._spec if type(t) is DT else None for t in tensors]  # pylint: disable=protected-access,unidiomatic-typecheck
    return D.build_plan(PLAT, rule.op, rule, args, kwargs, tensors, locs, specs,
                        grads=[t.requires_grad for t in tensors], itemsize=lambda t: 4, unwrap=unwrap), tensors, locs


class Fixed(OpRule):
    """Returns the decision it was built with (and records the call it saw)."""

    def __init__(self, op, decision=None):
        super().__init__(op)
        self.decision, self.seen = decision, None

    def infer(self, call):
        self.seen = call
        return self.decision


def test_freeze_makes_every_argument_hashable():
    frozen = D.freeze([1, slice(0, 4, 2), {"b": [2], "a": (3,)}, {1, 2}.__class__])
    hash(frozen)
    assert frozen[:3] == ("__list__", 1, ("__slice__", 0, 4, 2))
    assert frozen[3] == ("__dict__", ("a", (3,)), ("b", ("__list__", 2)))
    unhashable = bytearray(b"x")
    assert D.freeze(unhashable) == ("__id__", id(unhashable))
    assert D.freeze([1]) != D.freeze((1,))


def test_collect_placeholders_and_rebuild_round_trip():
    a, b, c = DT(spec((S0,)), name="a"), Plain((6,), name="b"), Plain((2,), name="c")
    args = (a, [b, 3], (c,), "s")
    key, tensors, locs = D.collect(args, {"w": c, "alpha": 2.0}, Plain, DT)
    assert tensors == [a, b, c, c] and locs == [(0, None), (1, 0), (2, 0), ("w", None)]
    assert key[0] is a._spec and key[1] == ("__seq__", "list", ("__plain__", (6,)), 3)  # pylint: disable=protected-access
    assert key[-1] == ("alpha", 2.0) and key[-2] == ("w", ("__plain__", (2,)))
    pargs, pkwargs = D.placeholders(args, {"w": c, "alpha": 2.0}, locs)
    assert pargs == (("__tensor__", 0), [("__tensor__", 1), 3], (("__tensor__", 2),), "s")
    assert pkwargs == {"w": ("__tensor__", 3), "alpha": 2.0}
    new_args, new_kwargs = D.rebuild(args, {"w": c}, ["A", "B", "C", "W"], locs)
    assert new_args == ["A", ["B", 3], ("C",), "s"] and new_kwargs == {"w": "W"}
    assert args[1] == [b, 3]  # the caller's list is not modified


def test_inputs_on_different_meshes_are_a_clear_error():
    other = Mesh((2,), ranks=(2, 3))
    rule = ElementwiseRule("torch.add")
    with pytest.raises(RuleError, match="torch.add: DTensor inputs live on different meshes"):
        plan_for(rule, (DT(spec((S0,))), DT(spec((S0,), mesh=other))))


def test_out_argument_is_refused():
    with pytest.raises(RuleError, match="torch.add: out= is not supported on DTensors"):
        plan_for(ElementwiseRule("torch.add"), (DT(spec((S0,))), DT(spec((S0,)))), {"out": Plain((4, 6))})


def test_replicated_input_feeding_a_sharded_output_gets_the_gradient_all_reduce():
    plan, _, _ = plan_for(ElementwiseRule("torch.add"), (DT(spec((S0,))), DT(spec((R,), shape=(6,)))))
    assert plan.grad_sync == [(1, ("group0",))] and not plan.redist and not plan.grad_scale
    assert plan.sync_only and not plan.fast
    assert plan.outs is spec((S0,))
    assert plan.call.tensors[1].placements == (R,) and plan.call.tensors[1].requires_grad


def test_a_plain_tensor_counts_as_replicated_and_without_grad_needs_nothing():
    plan, _, _ = plan_for(ElementwiseRule("torch.add"), (DT(spec((S0,))), Plain((6,), requires_grad=False)))
    assert plan.call.tensors[1].placements is None and not plan.call.tensors[1].requires_grad
    assert plan.grad_sync == [(1, ("group0",))]  # planned; prepare_inputs skips it for a no-grad input


def test_grad_partial_promise_replaces_the_all_reduce_or_scales_the_gradient():
    promised = spec((R,), shape=(6,), grad_partial={0})
    plan, _, _ = plan_for(ElementwiseRule("torch.add"), (DT(spec((S0,))), DT(promised)))
    assert not plan.grad_sync and not plan.grad_scale and plan.fast  # the producer reduce-scatters
    rule = Fixed("torch.exp", Decision([None], ((R,), (4, 6))))
    plan, _, _ = plan_for(rule, (DT(spec((R,), grad_partial={0})),))
    assert plan.grad_scale == [(0, 0.5)] and not plan.grad_sync  # replicated output: 1/n keeps the promise


def test_redistribution_is_planned_described_and_refused_in_strict_mode():
    rule = Fixed("torch.cumsum", Decision([(R,)], ((R,), (4, 6))))
    plan, tensors, locs = plan_for(rule, (DT(spec((S0,))), 0))
    (i, steps, dst), = plan.redist
    fn, fargs = steps[0]
    assert i == 0 and dst is spec((R,)) and fn("x", *fargs) == ("all_gather", "x", "group0", 0, (2, 2), 0, False)
    assert plan.describe and "all_gather" in plan.describe[0]
    with strict_dispatch(), pytest.raises(StrictRedistributionError, match="strict mode: torch.cumsum would"):
        D.run_plan(plan, lambda *a: a, (tensors[0], 0), {}, tensors, locs, PLAT, local=lambda t: t,
                   grad_enabled=True, requires_grad=lambda t: True)


def _local(t):
    return t if isinstance(t, tuple) else ("local", t)  # idempotent, like a DTensor's local alias


def test_run_plan_applies_scale_redistribution_and_all_reduce_then_calls_the_op():
    plan = D.DispatchPlan()
    plan.grad_scale = [(0, 0.5)]
    plan.redist = [(1, ((lambda x, tag: ("moved", x, tag), ("g",)),), None)]
    plan.grad_sync = [(0, ("g0", "g1"))]
    a, b = Plain((2,), name="a"), Plain((2,), requires_grad=False, name="b")
    args, locs = (a, [b, 7]), [(0, None), (1, 0)]

    def run(grad_enabled):
        return D.run_plan(plan, lambda *xs: xs, args, {}, [a, b], locs, PLAT, local=_local,
                          grad_enabled=grad_enabled, requires_grad=lambda t: getattr(t, "requires_grad", True))
    first, second = run(True)
    assert first == ("grad_all_reduce", ("grad_all_reduce", ("scale_grad", ("local", a), 0.5), "g0"), "g1")
    assert second == [("moved", ("local", b), "g"), 7]
    assert run(False)[0] is a  # no gradient recorded: no wrappers


def test_wrap_outputs_follows_the_declared_structure():
    s = spec((S0,))
    wrap = lambda local, sp: ("dt", local, sp)  # noqa: E731
    assert D.wrap_outputs(Plain((2,), name="x"), s, Plain, wrap)[2] is s
    out = D.wrap_outputs((Plain((2,)), 3), [s, None], Plain, wrap)
    assert isinstance(out, tuple) and out[0][0] == "dt" and out[1] == 3
    with pytest.raises(RuleError, match="declared a tensor output but the op returned int"):
        D.wrap_outputs(5, s, Plain, wrap)
    with pytest.raises(RuleError, match="declared 2 outputs but the op returned int"):
        D.wrap_outputs(5, [s, s], Plain, wrap)


def test_outputs_are_typed_output_specs():
    dec = Decision([None], [((S0,), [4, 6]), None, (((R,), (1,)), ((S1,), (2, 2)))])
    assert dec.outputs == [OutputSpec((S0,), (4, 6)), None, (OutputSpec((R,), (1,)), OutputSpec((S1,), (2, 2)))]
    assert type(dec.outputs[0]) is OutputSpec and dec.outputs[0].shape == (4, 6)  # pylint: disable=unidiomatic-typecheck
    dec.outputs = ((Partial(),), (3,))  # rules may set outputs after construction
    assert type(dec.outputs) is OutputSpec and dec.outputs.placements == (Partial(),)  # pylint: disable=unidiomatic-typecheck
    assert D.output_placements(Decision([], [((S0,), (4,)), ((R,), (2,))]).outputs) == [(S0,), (R,)]
    with pytest.raises(RuleError, match="Decision.outputs: expected OutputSpec"):
        as_output_specs("S(0)")
    with pytest.raises(RuleError, match="Decision.outputs: expected OutputSpec"):
        Decision([None], ((), (4,)))
