# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Dispatch of registered torch ops on DTensors (the torch half; the backend-free half is
``hyper_parallel/core/ops/dispatch.py``: argument collection, plan building, input planning, running).

What is torch's: name resolution (``torch.add``, ``Tensor.add_``, property getters; in ``names.py``), the table the
DTensor's ``__torch_function__`` reads, and the hot path of a cache hit — a key built from the
arguments' types only when every argument is a DTensor or a scalar, the local op run with torch-function
dispatch disabled, and the fresh output re-classed as a DTensor in place. Rules never run on a hit.
"""
from __future__ import annotations

import types
from typing import Dict

import torch
from torch._C import DisableTorchFunctionSubclass as _NoTF

from hyper_parallel.core.ops.dispatch import DispatchPlan, build_plan, collect, make_handler, run_plan, wrap_outputs
from hyper_parallel.core.ops.registry import OpEntry, get_registry, on_register
from hyper_parallel.core.ops.strict import (StrictRedistributionError, set_strict,  # noqa: F401  pylint: disable=unused-import
                                            strict_dispatch)
from hyper_parallel.core import process_group as _pg
from hyper_parallel.core.spec import DTensorSpec
from hyper_parallel.platform.torch import dtensor as _dt
from hyper_parallel.platform.torch import expands as _expands  # noqa: F401  pylint: disable=unused-import  # registers
from hyper_parallel.platform.torch.names import resolve_torch_name
from hyper_parallel.platform.torch.platform import PLATFORM as _PLATFORM

__all__ = ["install_registry", "strict_dispatch", "set_strict", "StrictRedistributionError", "resolve_torch_name",
           "cache_info", "clear_cache"]

DTensor = _dt.DTensor
as_dtensor = _dt.as_dtensor
_CACHE: Dict[tuple, DispatchPlan] = {}
# cached plans may hold process groups: drop them with the groups (destroy_process_group)
_pg.ON_DESTROY.append(_CACHE.clear)
_INSTALLED = False
_PY_FUNCS = (types.FunctionType, types.MethodType)


def cache_info() -> Dict[str, int]:
    """Number of cached dispatch plans."""
    return {"plans": len(_CACHE)}


def clear_cache() -> None:
    """Forget every cached plan (rules run again on the next call)."""
    _CACHE.clear()


# ---------------------------------------------------------------------- plan and run (shared core)
def _requires_grad(t) -> bool:
    return t.requires_grad


def _element_size(t) -> int:
    return t.element_size()


def _local(t):
    """Plain alias of a DTensor (its local shard) — for Python code that reads ``.shape``."""
    return t.view_as(t) if isinstance(t, DTensor) else t


def _build_plan(func, name, rule, args, kwargs, tensors, locs) -> DispatchPlan:
    specs = [t._spec if isinstance(t, DTensor) else None for t in tensors]  # pylint: disable=protected-access
    return build_plan(_PLATFORM, name, rule, args, kwargs, tensors, locs, specs,
                      grads=[t.requires_grad for t in tensors], itemsize=_element_size,
                      unwrap=isinstance(func, _PY_FUNCS))


def _run_general(plan: DispatchPlan, func, args, kwargs, tensors, locs):
    return run_plan(plan, func, args, kwargs, tensors, locs, _PLATFORM, local=_local,
                    grad_enabled=torch.is_grad_enabled(), requires_grad=_requires_grad)


def _wrap_outputs(out, specs):
    return wrap_outputs(out, specs, torch.Tensor, as_dtensor)


_SIMPLE = (int, float, bool, type(None), str)




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
        parts, tensors, locs = collect(args, kwargs, torch.Tensor, DTensor)
        key = (func, "__full__", *parts)
    else:
        tensors = locs = None
    plan = _CACHE.get(key)
    if plan is None:
        if tensors is None:
            _, tensors, locs = collect(args, kwargs, torch.Tensor, DTensor)
        plan = _build_plan(func, name, rule, args, kwargs, tensors, locs)
        _CACHE[key] = plan
    with _NoTF():
        if plan.fast or (plan.sync_only and not _grad_needed(args, tensors)):
            out = func(*args, **kwargs)
        else:
            if tensors is None:
                _, tensors, locs = collect(args, kwargs, torch.Tensor, DTensor)
            out = _run_general(plan, func, args, kwargs, tensors, locs)
    specs = plan.outs
    if type(specs) is DTensorSpec and type(out) is torch.Tensor:  # pylint: disable=unidiomatic-typecheck
        out.__class__ = DTensor
        out._spec = specs  # pylint: disable=protected-access
        return out
    return _wrap_outputs(out, specs)


def _install(entry: OpEntry) -> None:
    func = resolve_torch_name(entry.name)
    if func is not None:
        _dt.DISPATCH_TABLE[func] = make_handler(entry, _dispatch)


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


_dt.set_registry_loader(install_registry)
