# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Three-stage dispatch of MindSpore functions on MindSpore DTensors, over the shared op registry.

The registry (``hyper_parallel/core/ops/yaml/*.yaml``) names MindSpore ops as
``mindspore.mint.add``, ``mindspore.ops.exp``, ``mindspore.mint.nn.functional.relu`` and points them
at the *same* rule classes as the torch names; the torch dispatcher ignores these names and this
one ignores ``torch.*``/``Tensor.*``. MindSpore has no function-interception protocol, so calls
come in explicitly::

    from hyper_parallel.platform.mindspore import dispatch as D
    z = D.mint.add(x, y)                  # x, y DTensors (or plain tensors: then mint.add itself runs)
    z = D.call(mindspore.mint.add, x, y)  # same, by function object

Stages, as in ``platform/torch/dispatch.py``: **preprocess** (collect DTensor specs, plain-tensor
shapes and the other argument values into the cache key) -> **infer** (on a miss only: run the
rule, compile the redistributions, gradient all-reduces and output specs) -> **run** (redistribute,
run the local op or the rule's expand method, wrap outputs). A replicated input feeding an output
that is sharded or partial on a mesh dim gets ``grad_all_reduce`` on that dim (Megatron's ``f``).
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple

import mindspore as ms

from hyper_parallel.core.placement import Replicate
from hyper_parallel.core.redistribute import compile_plan, run_redistribute
from hyper_parallel.core.redistribute_plan import LOCAL_COLLECTIVES
from hyper_parallel.core.ops.registry import OpEntry, get_registry, on_register
from hyper_parallel.core.ops.strict import (StrictRedistributionError, set_strict,  # noqa: F401  pylint: disable=unused-import
                                              strict_dispatch, strict_enabled)
from hyper_parallel.core.ops.rule import OpCall, RuleError, TensorArg
from hyper_parallel.core.spec import DTensorSpec
from hyper_parallel.platform.mindspore.dtensor import DTensor

__all__ = ["call", "call_name", "resolve_mindspore_name", "install_registry", "registered_names", "mint", "ops",
           "strict_dispatch", "StrictRedistributionError", "cache_info", "clear_cache"]

_TABLE: Dict[Any, Callable] = {}
_BY_NAME: Dict[str, Callable] = {}
_CACHE: Dict[tuple, "_Plan"] = {}
_INSTALLED = [False]


def cache_info() -> Dict[str, int]:
    """Number of cached dispatch plans."""
    return {"plans": len(_CACHE)}


def clear_cache() -> None:
    """Forget every cached plan."""
    _CACHE.clear()


# ---------------------------------------------------------------------- name resolution
def resolve_mindspore_name(name: str) -> Optional[Callable]:
    """``mindspore.mint.add`` -> the function object; None for other frontends (torch names)."""
    parts = name.split(".")
    if parts[0] != "mindspore":
        return None
    obj: Any = ms
    for p in parts[1:]:
        nxt = getattr(obj, p, None)
        if nxt is None:
            raise RuleError(f"op registry: {name!r} does not exist in mindspore {ms.__version__}")
        obj = nxt
    return obj


# ---------------------------------------------------------------------- plan
class _Plan:
    __slots__ = ("redist", "grad_sync", "outs", "expand", "call", "decision", "mesh", "describe", "rule")

    def __init__(self) -> None:
        self.redist: List[Tuple[int, tuple]] = []
        self.grad_sync: List[Tuple[int, tuple]] = []
        self.outs: Any = None
        self.expand: Optional[Callable] = None
        self.call: Optional[OpCall] = None
        self.decision = None
        self.mesh = None
        self.describe: List[str] = []
        self.rule = None


def _freeze(value: Any) -> Any:
    if isinstance(value, slice):
        return ("__slice__", value.start, value.stop, value.step)
    if isinstance(value, (list, tuple)):
        return (type(value).__name__,) + tuple(_freeze(v) for v in value)
    if isinstance(value, dict):
        return ("__dict__",) + tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    try:
        hash(value)
    except TypeError:
        return ("__id__", id(value))
    return value


def _tensor_key(t) -> Any:
    return t._spec if type(t) is DTensor else ("__plain__", tuple(t.shape))  # pylint: disable=protected-access,unidiomatic-typecheck


def _is_tensor(a) -> bool:
    return isinstance(a, (DTensor, ms.Tensor))


def _collect(args, kwargs):
    """(cache key parts, tensors in order, their locations) over args, kwargs and lists of tensors."""
    key: List[Any] = []
    tensors: List[Any] = []
    locs: List[tuple] = []
    for i, a in enumerate(args):
        if _is_tensor(a):
            key.append(_tensor_key(a))
            tensors.append(a)
            locs.append((i, None))
        elif type(a) in (list, tuple) and a and any(_is_tensor(t) for t in a):  # pylint: disable=unidiomatic-typecheck
            sub = []
            for j, t in enumerate(a):
                if _is_tensor(t):
                    sub.append(_tensor_key(t))
                    tensors.append(t)
                    locs.append((i, j))
                else:
                    sub.append(_freeze(t))
            key.append(("__seq__", type(a).__name__) + tuple(sub))
        else:
            key.append(_freeze(a))
    for name, v in kwargs.items():
        if _is_tensor(v):
            key.append((name, _tensor_key(v)))
            tensors.append(v)
            locs.append((name, None))
        else:
            key.append((name, _freeze(v)))
    return key, tensors, locs


def _substitute(args, kwargs, locs, values):
    """Args/kwargs with the tensor at each location replaced by the matching value."""
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
    for k, a in enumerate(args):
        if seq_types[k] is tuple:
            args[k] = tuple(a)
    return tuple(args), kwargs


def _is_leaf_output(outputs) -> bool:
    return isinstance(outputs, tuple) and len(outputs) == 2 and isinstance(outputs[0], tuple) \
        and all(hasattr(p, "is_shard") for p in outputs[0])


def _out_placements(outputs) -> List[tuple]:
    if outputs is None:
        return []
    if _is_leaf_output(outputs):
        return [outputs[0]]
    out = []
    for o in outputs:
        out.extend(_out_placements(o))
    return out


def _out_specs(mesh, outputs):
    if outputs is None:
        return None
    if _is_leaf_output(outputs):
        return DTensorSpec(mesh, outputs[0], outputs[1])
    return [_out_specs(mesh, o) for o in outputs]


def _common_mesh(name, specs):
    meshes = [s.mesh for s in specs if s is not None]
    mesh = meshes[0]
    for m in meshes[1:]:
        if m is not mesh and m != mesh:
            raise RuleError(f"{name}: DTensor inputs live on different meshes ({mesh} and {m}); redistribute them "
                            "onto one mesh first")
    return mesh


def _plan_input(plan: _Plan, plat, i: int, t, s, need, out_placements) -> None:
    """Redistribution steps and gradient all-reduce groups of tensor input ``i``."""
    mesh = plan.mesh
    cur = s.placements if s is not None else (Replicate(),) * mesh.ndim
    if need is not None and tuple(need) != cur:
        src = s if s is not None else DTensorSpec(mesh, cur, tuple(t.shape))
        _dst, steps, rplan = compile_plan(plat, src, tuple(need), t.itemsize)
        plan.redist.append((i, steps))
        if any(st.collective not in LOCAL_COLLECTIVES for st in rplan.steps):
            plan.describe.append(f"input {i}: {rplan}")
        cur = tuple(need)
    dims = tuple(d for d, p in enumerate(cur) if isinstance(p, Replicate)
                 and any(not isinstance(op[d], Replicate) for op in out_placements))
    if dims:
        plan.grad_sync.append((i, tuple(mesh.get_group(d) for d in dims)))


def _build_plan(name, rule, args, kwargs, tensors, locs) -> _Plan:
    specs = [t._spec if type(t) is DTensor else None for t in tensors]  # pylint: disable=protected-access,unidiomatic-typecheck
    mesh = _common_mesh(name, specs)
    targs = [TensorArg(i, tuple(s.shape) if s is not None else tuple(t.shape),
                       s.placements if s is not None else None, True)
             for i, (t, s) in enumerate(zip(tensors, specs))]
    pargs, pkwargs = _substitute(args, kwargs, locs, [("__tensor__", i) for i in range(len(tensors))])
    opcall = OpCall(name, targs, pargs, pkwargs, tuple(mesh.shape))
    decision = rule.infer(opcall)
    plan = _Plan()
    plan.rule, plan.call, plan.decision, plan.mesh = rule, opcall, decision, mesh
    from hyper_parallel.platform import get_platform
    plat = get_platform("mindspore")
    out_placements = _out_placements(decision.outputs)
    for i, (t, s) in enumerate(zip(tensors, specs)):
        need = decision.inputs[i] if i < len(decision.inputs) else None
        _plan_input(plan, plat, i, t, s, need, out_placements)
    plan.outs = _out_specs(mesh, decision.outputs)
    plan.expand = getattr(rule, decision.expand) if decision.expand else None
    return plan


def _wrap_outputs(out, specs):
    if specs is None:
        return out
    if type(specs) is DTensorSpec:  # pylint: disable=unidiomatic-typecheck
        if isinstance(out, ms.Tensor):
            return DTensor(out, specs)
        raise RuleError(f"rule declared a tensor output but the op returned {type(out).__name__}")
    if isinstance(out, (tuple, list)):
        return type(out)(_wrap_outputs(o, s) for o, s in zip(out, specs))
    raise RuleError(f"rule declared {len(specs)} outputs but the op returned {type(out).__name__}")


def _run(plan: _Plan, func, args, kwargs, tensors, locs):
    if plan.describe and strict_enabled():
        raise StrictRedistributionError(f"strict mode: {plan.call.op} would redistribute " + "; ".join(plan.describe))
    local = [t._local if type(t) is DTensor else t for t in tensors]  # pylint: disable=protected-access,unidiomatic-typecheck
    for i, steps in plan.redist:
        local[i] = run_redistribute(local[i], steps)
    if plan.grad_sync:
        from hyper_parallel.platform import get_platform
        plat = get_platform("mindspore")
        for i, groups in plan.grad_sync:
            for g in groups:
                local[i] = plat.grad_all_reduce(local[i], g)
    largs, lkwargs = _substitute(args, kwargs, locs, local)
    if plan.expand is not None:
        out = plan.expand(func, largs, lkwargs, plan)
    else:
        out = func(*largs, **lkwargs)
    return _wrap_outputs(out, plan.outs)


def _dispatch(func, name, rule, args, kwargs):
    parts, tensors, locs = _collect(args, kwargs)
    key = (func, *parts)
    plan = _CACHE.get(key)
    if plan is None:
        plan = _build_plan(name, rule, args, kwargs, tensors, locs)
        _CACHE[key] = plan
    return _run(plan, func, args, kwargs, tensors, locs)


def _make_handler(entry: OpEntry, func):
    rule = entry.rule_instance()
    name = entry.name

    def handler(args, kwargs):
        return _dispatch(func, name, rule, args, kwargs)

    handler.entry = entry
    return handler


def _install(entry: OpEntry) -> None:
    func = resolve_mindspore_name(entry.name)
    if func is not None:
        handler = _make_handler(entry, func)
        _TABLE[func] = handler
        _BY_NAME[entry.name] = handler


def install_registry() -> None:
    """Load the registry (once) and route every MindSpore op it names to this dispatcher."""
    if _INSTALLED[0]:
        return
    for entry in get_registry().entries.values():
        _install(entry)
    on_register(_install)
    _INSTALLED[0] = True


def registered_names() -> List[str]:
    """Every registry name this dispatcher serves (``mindspore.*``), sorted."""
    install_registry()
    return sorted(_BY_NAME)


def _has_dtensor(args, kwargs) -> bool:
    for a in args:
        if type(a) is DTensor or (type(a) in (list, tuple) and any(type(t) is DTensor for t in a)):  # pylint: disable=unidiomatic-typecheck
            return True
    return any(type(v) is DTensor for v in kwargs.values())  # pylint: disable=unidiomatic-typecheck


def _unregistered(what: str) -> RuntimeError:
    return RuntimeError(
        f"hyper_parallel DTensor (mindspore): no distributed rule for {what}. Register one with "
        "hyper_parallel.core.ops.registry.register_op('mindspore....', RuleClass), or run the code on local "
        "shards (dtensor.to_local()).")


def call(func: Callable, *args, **kwargs):
    """Run MindSpore function ``func``: through its registry rule when a DTensor is among the
    arguments, as is otherwise."""
    if not _has_dtensor(args, kwargs):
        return func(*args, **kwargs)
    install_registry()
    handler = _TABLE.get(func)
    if handler is None:
        raise _unregistered(f"{getattr(func, '__module__', '?')}.{getattr(func, '__name__', repr(func))}")
    return handler(args, kwargs)


def call_name(name: str, *args, **kwargs):
    """Like :func:`call`, by registry name (``"mindspore.mint.add"``)."""
    if not _has_dtensor(args, kwargs):
        return resolve_mindspore_name(name)(*args, **kwargs)
    install_registry()
    handler = _BY_NAME.get(name)
    if handler is None:
        raise _unregistered(name)
    return handler(args, kwargs)


class _Namespace:
    """``D.mint.add`` -> a function that dispatches ``mindspore.mint.add`` (attributes resolve lazily)."""

    def __init__(self, prefix: str) -> None:
        self._prefix = prefix
        self._cache: Dict[str, Any] = {}

    def __getattr__(self, attr: str):
        if attr.startswith("_"):
            raise AttributeError(attr)
        hit = self._cache.get(attr)
        if hit is not None:
            return hit
        name = f"{self._prefix}.{attr}"
        target = resolve_mindspore_name(name)
        if isinstance(target, type(ms)):  # a sub-module: mint.nn, mint.nn.functional
            value: Any = _Namespace(name)
        else:
            def value(*args, _name=name, **kwargs):
                return call_name(_name, *args, **kwargs)
            value.__name__ = attr
            value.__doc__ = f"Distributed {name}: dispatches DTensor arguments through the op registry."
        self._cache[attr] = value
        return value

    def __repr__(self) -> str:
        return f"<hyper_parallel dispatch namespace {self._prefix}>"


mint = _Namespace("mindspore.mint")
ops = _Namespace("mindspore.ops")
