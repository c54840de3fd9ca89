# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Three-stage dispatch of registered torch ops on DTensors.

1. **preprocess** — walk the arguments once: DTensor specs, plain-tensor shapes and the other
   argument values form the cache key (specs are interned, so hashing them is an identity hash).
2. **infer** — on a cache miss only: build the rule's :class:`OpCall`, run the rule, and compile its
   decision into a :class:`_Plan` (redistribution steps per input, gradient all-reduce groups,
   output specs, expand method). Rules never run on a hit.
3. **run** — redistribute inputs if the plan says so (an error in strict mode), run the local op (or
   the rule's expand method) on local shards with torch-function dispatch disabled, and re-class the
   fresh outputs as DTensors with their precomputed specs.

Gradient rule applied here: a *replicated* input that feeds an output which is sharded or partial
on some mesh dim receives only a partial gradient on each rank, so its local value passes through
``grad_all_reduce`` (identity forward, all-reduce of the gradient) on those mesh dims.
"""
from __future__ import annotations

import math
import types
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
from torch._C import DisableTorchFunctionSubclass as _NoTF

from hyper_parallel.core.placement import Replicate
from hyper_parallel.core.redistribute import compile_plan, run_redistribute
from hyper_parallel.core.redistribute_plan import LOCAL_COLLECTIVES
from hyper_parallel.core.ops.registry import OpEntry, get_registry, on_register
from hyper_parallel.core.ops.strict import (StrictRedistributionError, set_strict,  # noqa: F401  pylint: disable=unused-import
                                              strict_dispatch, strict_enabled)
from hyper_parallel.core.ops.rule import Decision, OpCall, RuleError, TensorArg
from hyper_parallel.core.spec import DTensorSpec
from hyper_parallel.platform.torch import dtensor as _dt

__all__ = ["install_registry", "strict_dispatch", "set_strict", "StrictRedistributionError", "resolve_torch_name",
           "cache_info", "clear_cache"]

DTensor = _dt.DTensor
_wrap = _dt._wrap  # pylint: disable=protected-access
_CACHE: Dict[tuple, "_Plan"] = {}
_INSTALLED = False
_PY_FUNCS = (types.FunctionType, types.MethodType)


def cache_info() -> Dict[str, int]:
    """Number of cached dispatch plans."""
    return {"plans": len(_CACHE)}


def clear_cache() -> None:
    """Forget every cached plan (rules run again on the next call)."""
    _CACHE.clear()


# ---------------------------------------------------------------------- name resolution
def resolve_torch_name(name: str) -> Optional[Callable]:
    """``torch.add`` / ``Tensor.add_`` / ``torch.nn.functional.linear`` -> the function object the
    torch-function protocol reports (property getters resolve to ``__get__``); None for other frontends."""
    parts = name.split(".")
    if parts[0] == "Tensor":
        obj: Any = torch.Tensor
        parts = parts[1:]
    elif parts[0] == "torch":
        obj = torch
        parts = parts[1:]
    elif parts[0] == "hyper_parallel":  # library ops written with the torch-function protocol
        import importlib
        obj = importlib.import_module(".".join(parts[:-1]))
        parts = parts[-1:]
    else:
        return None
    for p in parts:
        nxt = getattr(obj, p, None)
        if nxt is None:
            raise RuleError(f"op registry: {name!r} does not exist in torch {torch.__version__}")
        obj = nxt
    if isinstance(obj, (types.GetSetDescriptorType, property)):
        return obj.__get__
    return obj


# ---------------------------------------------------------------------- plan
class _Plan:
    __slots__ = ("fast", "sync_only", "redist", "grad_sync", "grad_scale", "outs", "expand", "unwrap", "rule",
                 "decision", "call", "mesh", "describe", "locs")

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


def _freeze(value: Any) -> Any:
    """A hashable stand-in for a non-tensor argument."""
    if isinstance(value, slice):
        return ("__slice__", value.start, value.stop, value.step)
    if isinstance(value, list):
        return ("__list__",) + tuple(_freeze(v) for v in value)
    if isinstance(value, tuple):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, dict):
        return ("__dict__",) + tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    try:
        hash(value)
    except TypeError:
        return ("__id__", id(value))
    return value


def _collect(args, kwargs):
    """(cache key parts, tensors in order, locations) for top-level args, kwargs and lists of tensors."""
    key: List[Any] = []
    tensors: List[torch.Tensor] = []
    locs: List[tuple] = []
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor):
            key.append(a._spec if type(a) is DTensor else ("__plain__", tuple(a.shape)))  # pylint: disable=protected-access,unidiomatic-typecheck
            tensors.append(a)
            locs.append((i, None))
        elif type(a) in (list, tuple) and any(isinstance(t, torch.Tensor) for t in a):  # pylint: disable=unidiomatic-typecheck
            sub = []
            for j, t in enumerate(a):
                if isinstance(t, torch.Tensor):
                    sub.append(t._spec if type(t) is DTensor else ("__plain__", tuple(t.shape)))  # pylint: disable=protected-access,unidiomatic-typecheck
                    tensors.append(t)
                    locs.append((i, j))
                else:
                    sub.append(_freeze(t))
            key.append(("__seq__", type(a).__name__) + tuple(sub))
        else:
            key.append(_freeze(a))
    for name, v in kwargs.items():
        if isinstance(v, torch.Tensor):
            key.append((name, v._spec if type(v) is DTensor else ("__plain__", tuple(v.shape))))  # pylint: disable=protected-access,unidiomatic-typecheck
            tensors.append(v)
            locs.append((name, None))
        else:
            key.append((name, _freeze(v)))
    return key, tensors, locs


def _placeholders(args, kwargs, locs):
    """Args/kwargs with tensors replaced by their slot numbers (for the rule); tuples stay tuples."""
    tuples = [isinstance(a, tuple) for a in args]
    args = [list(a) if isinstance(a, (list, tuple)) else a for a in args]
    kwargs = dict(kwargs)
    for slot, (where, j) in enumerate(locs):
        marker = ("__tensor__", slot)
        if isinstance(where, str):
            kwargs[where] = marker
        elif j is None:
            args[where] = marker
        else:
            args[where][j] = marker
    return tuple(tuple(a) if was else a for a, was in zip(args, tuples)), kwargs


def _one_mesh(name: str, specs) -> Any:
    """The mesh shared by every DTensor input (clear error when they differ)."""
    meshes = [s.mesh for s in specs if s is not None]
    mesh = meshes[0]
    for m in meshes[1:]:
        if m is not mesh and m != mesh:
            raise RuleError(f"{name}: DTensor inputs live on different meshes ({mesh} and {m}); redistribute them "
                            "onto one mesh first")
    return mesh


def _make_call(name, args, kwargs, tensors, locs, specs, mesh) -> OpCall:
    targs = [TensorArg(i, tuple(s.shape) if s is not None else tuple(t.shape),
                       s.placements if s is not None else None, t.requires_grad)
             for i, (t, s) in enumerate(zip(tensors, specs))]
    pargs, pkwargs = _placeholders(args, kwargs, locs)
    return OpCall(name, targs, pargs, pkwargs, tuple(mesh.shape))


def _plan_input(plan: _Plan, i: int, t, s, need, sharded_out) -> None:
    """Redistribution, gradient scaling and gradient all-reduce for tensor input ``i``."""
    mesh = plan.mesh
    if s is None:
        s = DTensorSpec(mesh, (Replicate(),) * mesh.ndim, tuple(t.shape))
    cur, flag = s.placements, s.grad_partial
    if need is not None and tuple(need) != cur:
        src = s.without_grad_partial()
        dst, steps, rplan = compile_plan(_torch_platform(), src, tuple(need), t.element_size())
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


def _build_plan(func, name, rule, args, kwargs, tensors, locs) -> _Plan:
    if kwargs.get("out") is not None:
        raise RuleError(f"{name}: out= is not supported on DTensors (the output's layout is decided by the op); "
                        "assign the result, or copy_ it into the destination")
    specs = [t._spec if isinstance(t, DTensor) else None for t in tensors]  # pylint: disable=protected-access
    mesh = _one_mesh(name, specs)
    call = _make_call(name, args, kwargs, tensors, locs, specs, mesh)
    decision = rule.infer(call)
    plan = _Plan()
    plan.rule, plan.decision, plan.call, plan.mesh = rule, decision, call, mesh
    out_placements = _out_placements(decision.outputs)
    sharded_out = {d for d in range(mesh.ndim) if any(not isinstance(op[d], Replicate) for op in out_placements)}
    for i, (t, s) in enumerate(zip(tensors, specs)):
        _plan_input(plan, i, t, s, decision.inputs[i] if i < len(decision.inputs) else None, sharded_out)
    plan.outs = _out_specs(mesh, decision.outputs)
    plan.expand = getattr(rule, decision.expand) if decision.expand else None
    plan.unwrap = isinstance(func, _PY_FUNCS)
    extra = plan.redist or plan.grad_scale or plan.expand or plan.unwrap
    plan.fast = not (extra or plan.grad_sync)
    plan.sync_only = not plan.fast and not extra
    return plan


def _out_placements(outputs) -> List[tuple]:
    if outputs is None:
        return []
    if isinstance(outputs, tuple) and len(outputs) == 2 and isinstance(outputs[0], tuple) \
            and all(hasattr(p, "is_shard") for p in outputs[0]):
        return [outputs[0]]
    out = []
    for o in outputs:
        out.extend(_out_placements(o))
    return out


def _out_specs(mesh, outputs):
    if outputs is None:
        return None
    if isinstance(outputs, tuple) and len(outputs) == 2 and isinstance(outputs[0], tuple) \
            and all(hasattr(p, "is_shard") for p in outputs[0]):
        return DTensorSpec(mesh, outputs[0], outputs[1])
    return [_out_specs(mesh, o) for o in outputs]


def _wrap_outputs(out, specs):
    if specs is None:
        return out
    if type(specs) is DTensorSpec:  # pylint: disable=unidiomatic-typecheck
        if isinstance(out, torch.Tensor):
            return _wrap(out, specs)
        raise RuleError(f"rule declared a tensor output but the op returned {type(out).__name__}")
    if isinstance(out, (tuple, list)):
        wrapped = [_wrap_outputs(o, s) for o, s in zip(out, specs)]
        if isinstance(out, list):
            return wrapped
        return type(out)(wrapped) if type(out) is not tuple else tuple(wrapped)  # pylint: disable=unidiomatic-typecheck
    raise RuleError(f"rule declared {len(specs)} outputs but the op returned {type(out).__name__}")


def _local(t):
    """Plain alias of a DTensor (its local shard) — for Python code that reads ``.shape``."""
    return t.view_as(t) if isinstance(t, DTensor) else t


def _prepare_inputs(plan: _Plan, tensors) -> list:
    """Local inputs after gradient scaling, redistribution and gradient all-reduce wrappers."""
    new = list(tensors)
    grad = torch.is_grad_enabled()
    if plan.grad_scale and grad:
        for i, factor in plan.grad_scale:
            if new[i].requires_grad:
                new[i] = _dt._ScaleGrad.apply(_local(new[i]), factor)  # pylint: disable=protected-access
    for i, steps, _dst in plan.redist:
        new[i] = run_redistribute(_local(new[i]), steps)
    if plan.grad_sync and grad:
        plat = _torch_platform()
        for i, groups in plan.grad_sync:
            if new[i].requires_grad:
                x = _local(new[i])
                for g in groups:
                    x = plat.grad_all_reduce(x, g)
                new[i] = x
    if plan.unwrap or plan.expand is not None:
        new = [_local(t) for t in new]
    return new


def _rebuild(args, kwargs, new, locs):
    """Args/kwargs with the tensors at ``locs`` replaced by ``new`` (tuples stay tuples)."""
    seq_types = [type(a) for a in args]
    args = [list(a) if isinstance(a, (list, tuple)) else a for a in args]
    kwargs = dict(kwargs)
    for t, (where, j) in zip(new, locs):
        if isinstance(where, str):
            kwargs[where] = t
        elif j is None:
            args[where] = t
        else:
            args[where][j] = t
    return [tuple(a) if seq_types[k] is tuple else a for k, a in enumerate(args)], kwargs


def _run_general(plan: _Plan, func, args, kwargs, tensors, locs):
    if plan.describe and strict_enabled():
        raise StrictRedistributionError(
            f"strict mode: {plan.call.op} would redistribute " + "; ".join(plan.describe))
    args, kwargs = _rebuild(args, kwargs, _prepare_inputs(plan, tensors), locs)
    if plan.expand is not None:
        return plan.expand(func, args, kwargs, plan)
    return func(*args, **kwargs)


_SIMPLE = (int, float, bool, type(None), str)


_PLATFORM: List[Any] = []


def _torch_platform():
    """The torch platform object (looked up once)."""
    if not _PLATFORM:
        from hyper_parallel.platform import get_platform
        _PLATFORM.append(get_platform("torch"))
    return _PLATFORM[0]


def _grad_needed(args, tensors) -> bool:
    """True when autograd will record this call (some tensor input requires grad)."""
    if not torch.is_grad_enabled():
        return False
    if tensors is not None:
        return any(t.requires_grad for t in tensors)
    return any(type(a) is DTensor and a.requires_grad for a in args)  # pylint: disable=unidiomatic-typecheck


def _fast_key(func, args):
    """Cache key when every argument is a DTensor or a plain scalar (the common case), else None."""
    key = [func]
    for a in args:
        t = type(a)
        if t is DTensor:
            key.append(a._spec)  # pylint: disable=protected-access
        elif t in _SIMPLE:
            key.append(a)
        else:
            return None
    return tuple(key)


def _dispatch(func, name, rule, args, kwargs):
    key = None if kwargs else _fast_key(func, args)
    if key is None:
        parts, tensors, locs = _collect(args, kwargs)
        key = (func, "__full__", *parts)
    else:
        tensors = locs = None
    plan = _CACHE.get(key)
    if plan is None:
        if tensors is None:
            _, tensors, locs = _collect(args, kwargs)
        plan = _build_plan(func, name, rule, args, kwargs, tensors, locs)
        plan.locs = locs
        _CACHE[key] = plan
    with _NoTF():
        if plan.fast or (plan.sync_only and not _grad_needed(args, tensors)):
            out = func(*args, **kwargs)
        else:
            if tensors is None:
                _, tensors, locs = _collect(args, kwargs)
            out = _run_general(plan, func, args, kwargs, tensors, locs)
    specs = plan.outs
    if type(specs) is DTensorSpec and type(out) is torch.Tensor:  # pylint: disable=unidiomatic-typecheck
        out.__class__ = DTensor
        out._spec = specs  # pylint: disable=protected-access
        return out
    return _wrap_outputs(out, specs)


def _make_handler(entry: OpEntry):
    rule = entry.rule_instance()
    name = entry.name

    def handler(func, args, kwargs):
        return _dispatch(func, name, rule, args, kwargs)

    handler.entry = entry
    return handler


def _install(entry: OpEntry) -> None:
    func = resolve_torch_name(entry.name)
    if func is not None:
        _dt.DISPATCH_TABLE[func] = _make_handler(entry)


def install_registry() -> None:
    """Load the registry (once) and route every torch op it names to the dispatcher."""
    global _INSTALLED  # pylint: disable=global-statement
    if _INSTALLED:
        return
    reg = get_registry()
    for entry in reg.entries.values():
        _install(entry)
    on_register(_install)
    _INSTALLED = True
