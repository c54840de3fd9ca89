# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Backend implementations of rule methods that compute on local tensors (expands and their helpers).

A rule's ``infer`` is pure. When its decision names an expand (``Decision.expand = "expand_scan"``), the
dispatcher of a backend runs ``implementation(backend, rule, "expand_scan")``: the function registered with
:func:`implements` for that backend and the rule's class or its nearest base class, else the rule's own
method of that name. So an expand that needs only tensor methods and ``plan.platform`` is a method of the
rule (as in users' rules), and one that needs a framework's functions lives with that framework
(``platform/torch/expands.py``): rule modules import no framework.
"""
from __future__ import annotations

import functools
from typing import Callable, Dict, Tuple

from hyper_parallel.core.ops.rule import OpRule, RuleError

__all__ = ["implements", "implementation"]

_IMPLS: Dict[Tuple[str, type, str], Callable] = {}


def implements(backend: str, rule_class: type, name: str) -> Callable[[Callable], Callable]:
    """Decorator: ``fn(rule, *args)`` is ``backend``'s implementation of method ``name`` of ``rule_class``
    (and of its subclasses that do not override it)."""
    def deco(fn: Callable) -> Callable:
        _IMPLS[(backend, rule_class, name)] = fn
        return fn
    return deco


def implementation(backend: str, rule: OpRule, name: str) -> Callable:
    """``rule``'s method ``name`` as ``backend`` runs it (see the module docstring)."""
    for cls in type(rule).__mro__:
        fn = _IMPLS.get((backend, cls, name))
        if fn is not None:
            return functools.partial(fn, rule)
        if name in cls.__dict__:
            return getattr(rule, name)
    raise RuleError(f"{rule.op}: {type(rule).__name__}.{name} has no {backend} implementation")
