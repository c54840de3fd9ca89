# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The backend-free half of op dispatch, shared by every backend's dispatcher.

A dispatcher (``platform/<backend>/dispatch.py``) resolves op names to its framework's functions,
keeps its fast path, and runs the local op and wraps outputs. Everything in between lives here once:

1. **preprocess** — :func:`collect` walks the arguments once: DTensor specs, plain-tensor shapes and the
   other argument values (:func:`freeze`) form the cache key; tensors and their locations come back.
2. **infer** — on a cache miss only, :func:`build_plan` checks that the DTensors share one mesh, builds
   the rule's :class:`OpCall` (tensors replaced by placeholders), runs the rule, and compiles its
   :class:`Decision` into a :class:`DispatchPlan`: per input the redistribution steps, the gradient
   scaling that keeps a ``grad_partial`` promise, and the gradient all-reduce groups; the output specs.
3. **run** — :func:`run_plan` refuses a communicating redistribution in strict mode, prepares the local
   inputs (:func:`prepare_inputs`), rebuilds the arguments and calls the op or the rule's expand method;
   :func:`wrap_outputs` re-wraps the results with the precomputed specs.

Gradient rule: a *replicated* input that feeds an output which is sharded or partial on some mesh dim
receives only a partial gradient on each rank, so its local value passes through ``grad_all_reduce``
(identity forward, all-reduce of the gradient) on those mesh dims — unless the input carries a
``grad_partial`` promise on that dim (its producer reduce-scatters the partial gradient itself). A
promise on a dim whose consumer output is replicated is kept by scaling the gradient by ``1/n``.
"""
from __future__ import annotations

import math
from typing import Any, Callable, List, Optional, Sequence, Tuple

from hyper_parallel.core.ops.expands import implementation
from hyper_parallel.core.ops.rule import Decision, OpCall, OutputSpec, RuleError, TensorArg
from hyper_parallel.core.ops.strict import StrictRedistributionError, strict_enabled
from hyper_parallel.core.placement import Replicate
from hyper_parallel.core.redistribute import compile_plan, run_redistribute
from hyper_parallel.core.redistribute_plan import LOCAL_COLLECTIVES
from hyper_parallel.core.spec import DTensorSpec

__all__ = ["DispatchPlan", "freeze", "collect", "placeholders", "rebuild", "one_mesh", "make_call", "build_plan",
           "output_placements", "output_specs", "prepare_inputs", "run_plan", "wrap_outputs",
           "dispatch_unregistered", "op_display_name", "make_handler"]


class DispatchPlan:
    """The compiled decision for one (op, input specs, cache values): what to do on every call.

    Rules' expand methods read ``call``, ``decision``, ``mesh`` and ``platform`` (the backend running it).
    ``fast``: nothing to do but run the op; ``sync_only``: only gradient all-reduces (skipped when no
    gradient is recorded)."""

    __slots__ = ("fast", "sync_only", "redist", "grad_sync", "grad_scale", "outs", "expand", "unwrap", "rule",
                 "decision", "call", "mesh", "describe", "locs", "platform")

    def __init__(self) -> None:
        self.fast = True
        self.sync_only = False
        self.redist: List[Tuple[int, tuple, Optional[DTensorSpec]]] = []
        self.grad_sync: List[Tuple[int, tuple]] = []
        self.grad_scale: List[Tuple[int, float]] = []
        self.outs: Any = None
        self.expand: Optional[Callable] = None
        self.unwrap = False
        self.rule = None
        self.decision: Optional[Decision] = None
        self.call: Optional[OpCall] = None
        self.mesh = None
        self.describe: List[str] = []
        self.locs: List[tuple] = []
        self.platform = None


# ---------------------------------------------------------------------- preprocess
def freeze(value: Any) -> Any:
    """A hashable stand-in for a non-tensor argument."""
    if isinstance(value, slice):
        return ("__slice__", value.start, value.stop, value.step)
    if isinstance(value, list):
        return ("__list__",) + tuple(freeze(v) for v in value)
    if isinstance(value, tuple):
        return tuple(freeze(v) for v in value)
    if isinstance(value, dict):
        return ("__dict__",) + tuple(sorted((k, freeze(v)) for k, v in value.items()))
    try:
        hash(value)
    except TypeError:
        return ("__id__", id(value))
    return value


def collect(args, kwargs, tensor_types, dtensor_type):
    """(cache key parts, tensors in order, their locations) over args, kwargs and lists/tuples of tensors.

    ``tensor_types``: what counts as a tensor (``isinstance``); ``dtensor_type``: the DTensor class, whose
    instances contribute their spec to the key (plain tensors their shape). A location is ``(i, None)``
    for positional argument ``i``, ``(i, j)`` for item ``j`` of a list/tuple argument, ``(name, None)``
    for a keyword."""
    key: List[Any] = []
    tensors: List[Any] = []
    locs: List[tuple] = []
    for i, a in enumerate(args):
        if isinstance(a, tensor_types):
            key.append(a._spec if type(a) is dtensor_type else ("__plain__", tuple(a.shape)))  # pylint: disable=protected-access,unidiomatic-typecheck
            tensors.append(a)
            locs.append((i, None))
        elif type(a) in (list, tuple) and any(isinstance(t, tensor_types) for t in a):  # pylint: disable=unidiomatic-typecheck
            sub = []
            for j, t in enumerate(a):
                if isinstance(t, tensor_types):
                    sub.append(t._spec if type(t) is dtensor_type else ("__plain__", tuple(t.shape)))  # pylint: disable=protected-access,unidiomatic-typecheck
                    tensors.append(t)
                    locs.append((i, j))
                else:
                    sub.append(freeze(t))
            key.append(("__seq__", type(a).__name__) + tuple(sub))
        else:
            key.append(freeze(a))
    for name, v in kwargs.items():
        if isinstance(v, tensor_types):
            key.append((name, v._spec if type(v) is dtensor_type else ("__plain__", tuple(v.shape))))  # pylint: disable=protected-access,unidiomatic-typecheck
            tensors.append(v)
            locs.append((name, None))
        else:
            key.append((name, freeze(v)))
    return key, tensors, locs


def rebuild(args, kwargs, values, locs):
    """Args (a list) and kwargs with the tensor at each location replaced by the matching value
    (tuple arguments stay tuples)."""
    seq_types = [type(a) for a in args]
    args = [list(a) if isinstance(a, (list, tuple)) else a for a in args]
    kwargs = dict(kwargs)
    for v, (where, j) in zip(values, locs):
        if isinstance(where, str):
            kwargs[where] = v
        elif j is None:
            args[where] = v
        else:
            args[where][j] = v
    return [tuple(a) if seq_types[k] is tuple else a for k, a in enumerate(args)], kwargs


def placeholders(args, kwargs, locs):
    """Args (a tuple) and kwargs with every tensor replaced by its marker ``("__tensor__", slot)``: what a
    rule sees in :attr:`OpCall.args` / :attr:`OpCall.kwargs`."""
    new_args, new_kwargs = rebuild(args, kwargs, [("__tensor__", slot) for slot in range(len(locs))], locs)
    return tuple(new_args), new_kwargs


# ---------------------------------------------------------------------- infer
def one_mesh(name: str, specs: Sequence[Optional[DTensorSpec]]) -> Any:
    """The mesh shared by every DTensor input (a clear error when they differ)."""
    meshes = [s.mesh for s in specs if s is not None]
    mesh = meshes[0]
    for m in meshes[1:]:
        if m is not mesh and m != mesh:
            raise RuleError(f"{name}: DTensor inputs live on different meshes ({mesh} and {m}); redistribute them "
                            "onto one mesh first")
    return mesh


def make_call(name: str, args, kwargs, tensors, locs, specs, mesh, grads: Sequence[bool]) -> OpCall:
    """The rule's view of one call: global shapes and placements per tensor, placeholders in the args."""
    targs = [TensorArg(i, tuple(s.shape) if s is not None else tuple(t.shape),
                       s.placements if s is not None else None, g)
             for i, (t, s, g) in enumerate(zip(tensors, specs, grads))]
    pargs, pkwargs = placeholders(args, kwargs, locs)
    return OpCall(name, targs, pargs, pkwargs, tuple(mesh.shape))


def output_placements(outputs: Any) -> List[tuple]:
    """The placements of every tensor output of a decision, flattened."""
    if outputs is None:
        return []
    if type(outputs) is OutputSpec:  # pylint: disable=unidiomatic-typecheck
        return [outputs.placements]
    out: List[tuple] = []
    for o in outputs:
        out.extend(output_placements(o))
    return out


def output_specs(mesh, outputs: Any) -> Any:
    """The decision's outputs as DTensor specs on ``mesh`` (same structure; ``None`` stays ``None``)."""
    if outputs is None:
        return None
    if type(outputs) is OutputSpec:  # pylint: disable=unidiomatic-typecheck
        return DTensorSpec(mesh, outputs.placements, outputs.shape)
    return [output_specs(mesh, o) for o in outputs]


def _plan_input(plan: DispatchPlan, platform, i: int, shape, itemsize: int, s, need, sharded_out) -> None:
    """Redistribution, gradient scaling and gradient all-reduce for tensor input ``i``."""
    mesh = plan.mesh
    if s is None:
        s = DTensorSpec(mesh, (Replicate(),) * mesh.ndim, tuple(shape))
    cur, flag = s.placements, s.grad_partial
    if need is not None and tuple(need) != cur:
        dst, steps, rplan = compile_plan(platform, s.without_grad_partial(), tuple(need), itemsize)
        plan.redist.append((i, steps, dst))
        if any(st.collective not in LOCAL_COLLECTIVES for st in rplan.steps):
            plan.describe.append(f"input {i}: {rplan}")
        cur = tuple(need)
        scale_dims, skip = flag, frozenset()
    else:  # consumers with sharded/partial outputs deliver partial gradients: the promise holds
        skip = flag & sharded_out
        scale_dims = flag - sharded_out
    if scale_dims:
        plan.grad_scale.append((i, 1.0 / math.prod(mesh.shape[d] for d in scale_dims)))
    dims = tuple(d for d, p in enumerate(cur) if isinstance(p, Replicate) and d in sharded_out and d not in skip)
    if dims:
        plan.grad_sync.append((i, tuple(mesh.get_group(d) for d in dims)))


def build_plan(platform, name: str, rule, args, kwargs, tensors, locs, specs, *,  # pylint: disable=too-many-locals
               grads: Sequence[bool], itemsize: Callable[[Any], int], unwrap: bool = False) -> DispatchPlan:
    """Run ``rule`` on one call and compile its decision (cache misses only).

    ``specs``: per tensor its DTensor spec or ``None`` (plain tensor); ``grads``: per tensor whether it
    requires grad (what the rule sees); ``itemsize(t)``: bytes per element; ``unwrap``: the op needs plain
    local tensors (not DTensors) as arguments."""
    if kwargs.get("out") is not None:
        raise RuleError(f"{name}: out= is not supported on DTensors (the output's layout is decided by the op); "
                        "assign the result, or copy_ it into the destination")
    mesh = one_mesh(name, specs)
    call = make_call(name, args, kwargs, tensors, locs, specs, mesh, grads)
    decision = rule.infer(call)
    plan = DispatchPlan()
    plan.rule, plan.decision, plan.call, plan.mesh, plan.locs = rule, decision, call, mesh, locs
    plan.platform = platform
    sharded_out = {d for d in range(mesh.ndim)
                   if any(not isinstance(op[d], Replicate) for op in output_placements(decision.outputs))}
    for i, (t, s) in enumerate(zip(tensors, specs)):
        need = decision.inputs[i] if i < len(decision.inputs) else None
        _plan_input(plan, platform, i, t.shape, itemsize(t) if need is not None else 0, s, need, sharded_out)
    plan.outs = output_specs(mesh, decision.outputs)
    plan.expand = implementation(platform.name, rule, decision.expand) if decision.expand else None
    plan.unwrap = unwrap
    extra = plan.redist or plan.grad_scale or plan.expand or plan.unwrap
    plan.fast = not (extra or plan.grad_sync)
    plan.sync_only = not plan.fast and not extra
    return plan


# ---------------------------------------------------------------------- run
def prepare_inputs(plan: DispatchPlan, tensors, platform, *, local: Callable[[Any], Any], grad_enabled: bool,
                   requires_grad: Callable[[Any], bool]) -> list:
    """Local inputs after gradient scaling, redistribution and gradient all-reduce wrappers.

    ``local(t)``: the plain local tensor of ``t`` (a DTensor or a plain tensor); ``grad_enabled``: autograd
    records this call; ``requires_grad(t)``: ``t`` takes part in the gradient."""
    new = list(tensors)
    if plan.grad_scale and grad_enabled:
        for i, factor in plan.grad_scale:
            if requires_grad(new[i]):
                new[i] = platform.scale_grad(local(new[i]), factor)
    for i, steps, _dst in plan.redist:
        new[i] = run_redistribute(local(new[i]), steps)
    if plan.grad_sync and grad_enabled:
        for i, groups in plan.grad_sync:
            if requires_grad(new[i]):
                x = local(new[i])
                for g in groups:
                    x = platform.grad_all_reduce(x, g)
                new[i] = x
    if plan.unwrap or plan.expand is not None:
        new = [local(t) for t in new]
    return new


def run_plan(plan: DispatchPlan, func, args, kwargs, tensors, locs, platform, *,  # pylint: disable=too-many-arguments
             local: Callable[[Any], Any], grad_enabled: bool, requires_grad: Callable[[Any], bool]):
    """Prepare the local inputs (:func:`prepare_inputs`) and call the op — or the rule's expand method —
    with them at their locations; returns the local output(s).

    Raises :class:`StrictRedistributionError` first when strict mode is on and the plan communicates."""
    if plan.describe and strict_enabled():
        raise StrictRedistributionError(f"strict mode: {plan.call.op} would redistribute " + "; ".join(plan.describe))
    new = prepare_inputs(plan, tensors, platform, local=local, grad_enabled=grad_enabled, requires_grad=requires_grad)
    args, kwargs = rebuild(args, kwargs, new, locs)
    if plan.expand is not None:
        return plan.expand(func, args, kwargs, plan)
    return func(*args, **kwargs)


def wrap_outputs(out, specs, tensor_type, wrap: Callable[[Any, DTensorSpec], Any]):
    """``out`` with every tensor output wrapped by ``wrap(local, spec)`` as the plan's specs say.

    ``tensor_type``: the framework's tensor class; a declared tensor output that is not one, or a count
    of outputs that differs, is a clear error naming the rule's declaration."""
    if specs is None:
        return out
    if type(specs) is DTensorSpec:  # pylint: disable=unidiomatic-typecheck
        if isinstance(out, tensor_type):
            return wrap(out, specs)
        if isinstance(out, (tuple, list)) and len(out) == 1 and isinstance(out[0], tensor_type):
            specs = [specs]  # one declared output of an op returning a sequence (``vsplit(x, 1)``)
        else:
            raise RuleError(f"rule declared a tensor output but the op returned {type(out).__name__}")
    if isinstance(out, (tuple, list)):
        wrapped = [wrap_outputs(o, s, tensor_type, wrap) for o, s in zip(out, specs)]
        if isinstance(out, list):
            return wrapped
        return type(out)(wrapped) if type(out) is not tuple else tuple(wrapped)  # pylint: disable=unidiomatic-typecheck
    raise RuleError(f"rule declared {len(specs)} outputs but the op returned {type(out).__name__}")


def make_handler(entry, dispatch: Callable) -> Callable:
    """``handler(func, args, kwargs)`` running ``dispatch(func, entry.name, rule, args, kwargs)`` with the
    entry's rule (built now, so a broken entry fails at install time); ``handler.entry`` is the entry."""
    rule = entry.rule_instance()
    name = entry.name

    def handler(func, args, kwargs):
        return dispatch(func, name, rule, args, kwargs)

    handler.entry = entry
    return handler


# ---------------------------------------------------------------------- unregistered ops
def op_display_name(func) -> str:
    """A readable dotted name of a framework function (``torch.add``, ``Tensor.add_``, ``mindspore.mint.add``)."""
    qual = getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or repr(func)
    if qual.startswith("_VariableFunctionsClass."):
        return "torch." + qual.split(".", 1)[1]
    module = getattr(func, "__module__", None)
    if module and not qual.startswith("Tensor."):
        return f"{module}.{qual}"
    return qual


def dispatch_unregistered(func, types, args, kwargs):  # pylint: disable=unused-argument
    """Raise the clear error for a function with no distributed rule."""
    raise RuntimeError(
        f"hyper_parallel DTensor: no distributed rule for {op_display_name(func)}. Register one with "
        "hyper_parallel.register_op(...), or run the code on local shards (dtensor.to_local(), or inside "
        "hyper_parallel.SkipDTensorDispatch()).")
