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

The three stages (preprocess -> cached infer -> run) and the gradient rule are the shared core's
(``hyper_parallel/core/ops/dispatch.py``), the same as for torch, ``grad_partial`` promises included;
this module keeps what is MindSpore's: name resolution, the explicit entry points, local execution
and wrapping.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple

import mindspore as ms

from hyper_parallel.core.ops.dispatch import DispatchPlan, build_plan, collect, make_handler, run_plan, wrap_outputs
from hyper_parallel.core.ops.registry import OpEntry, get_registry, on_register
from hyper_parallel.core.ops.strict import (StrictRedistributionError, set_strict,  # noqa: F401  pylint: disable=unused-import
                                            strict_dispatch)
from hyper_parallel.core.ops.rule import RuleError
from hyper_parallel.platform.mindspore.platform import PLATFORM as _PLATFORM
from hyper_parallel.platform.mindspore.dtensor import DTensor, set_op_caller

__all__ = ["call", "call_name", "resolve_mindspore_name", "install_registry", "registered_names", "mint", "ops",
           "strict_dispatch", "StrictRedistributionError", "cache_info", "clear_cache"]

_TABLE: Dict[Any, Callable] = {}
_BY_NAME: Dict[str, Tuple[Callable, Callable]] = {}
_CACHE: Dict[tuple, DispatchPlan] = {}
_TENSORS = (DTensor, ms.Tensor)
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


# ---------------------------------------------------------------------- plan and run (shared core)
def _always(_t) -> bool:
    """MindSpore's autodiff is functional (``mindspore.grad`` picks the inputs): any input may be
    differentiated, so every input is treated as requiring grad."""
    return True


def _itemsize(t) -> int:
    return t.itemsize


def _local(t):
    return t._local if type(t) is DTensor else t  # pylint: disable=protected-access,unidiomatic-typecheck


def _dispatch(func, name, rule, args, kwargs):
    parts, tensors, locs = collect(args, kwargs, _TENSORS, DTensor)
    key = (func, *parts)
    plan = _CACHE.get(key)
    if plan is None:
        specs = [t._spec if type(t) is DTensor else None for t in tensors]  # pylint: disable=protected-access,unidiomatic-typecheck
        plan = build_plan(_PLATFORM, name, rule, args, kwargs, tensors, locs, specs,
                          grads=[True] * len(tensors), itemsize=_itemsize, unwrap=True)
        _CACHE[key] = plan
    out = run_plan(plan, func, args, kwargs, tensors, locs, _PLATFORM, local=_local, grad_enabled=True,
                   requires_grad=_always)
    return wrap_outputs(out, plan.outs, ms.Tensor, DTensor)




def _install(entry: OpEntry) -> None:
    func = resolve_mindspore_name(entry.name)
    if func is not None:
        handler = make_handler(entry, _dispatch)
        _TABLE[func] = handler
        _BY_NAME[entry.name] = (func, handler)


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
    return handler(func, args, kwargs)


def call_name(name: str, *args, **kwargs):
    """Like :func:`call`, by registry name (``"mindspore.mint.add"``)."""
    if not _has_dtensor(args, kwargs):
        return resolve_mindspore_name(name)(*args, **kwargs)
    install_registry()
    found = _BY_NAME.get(name)
    if found is None:
        raise _unregistered(name)
    func, handler = found
    return handler(func, args, kwargs)


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

set_op_caller(call_name)
