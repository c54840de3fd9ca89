# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT: which backend implementation of a rule's expand runs (``core/ops/expands.py``) — a function
registered for the backend and the rule's class (or a base class), else the rule's own method."""
import inspect
import re
import sys

import pytest

from hyper_parallel.core.ops.expands import implementation, implements
from hyper_parallel.core.ops.rule import Decision, OpRule, RuleError


class Base(OpRule):
    """A rule whose expand is a plain method (what a user's rule writes)."""

    def infer(self, call):
        return Decision(inputs=[None], outputs=None, expand="expand_own")

    def expand_own(self, func, args, kwargs, plan):
        """The rule's own local computation."""
        return ("own", type(self).__name__, args)


class Child(Base):
    """Inherits both the method and any backend implementation of its base."""


class Overrides(Base):
    """Overrides the method: a base class's backend implementation no longer applies."""

    def expand_own(self, func, args, kwargs, plan):
        return ("override", args)


@implements("unit-a", Base, "expand_own")
def _base_on_a(rule, func, args, kwargs, plan):
    return ("a", type(rule).__name__, args)


@implements("unit-a", Base, "expand_only_a")
def _only_a(rule, func, args, kwargs, plan):
    return ("only-a", type(rule).__name__)


def test_backend_implementation_wins_over_the_method_and_is_inherited():
    assert implementation("unit-a", Base("x.op"), "expand_own")(None, (1,), {}, None) == ("a", "Base", (1,))
    assert implementation("unit-a", Child("x.op"), "expand_own")(None, (2,), {}, None) == ("a", "Child", (2,))
    assert implementation("unit-a", Child("x.op"), "expand_only_a")(None, (), {}, None) == ("only-a", "Child")


def test_other_backends_and_overriding_subclasses_run_the_method():
    assert implementation("unit-b", Child("x.op"), "expand_own")(None, (3,), {}, None) == ("own", "Child", (3,))
    assert implementation("unit-a", Overrides("x.op"), "expand_own")(None, (4,), {}, None) == ("override", (4,))


def test_missing_implementation_names_the_rule_and_backend():
    with pytest.raises(RuleError, match=r"Child\.expand_only_a has no unit-b implementation"):
        implementation("unit-b", Child("x.op"), "expand_only_a")


def test_every_expand_a_built_in_rule_names_runs_on_torch():
    """Each expand name written in a rule module resolves, for some rule of that module in the registry, to
    the rule's method or to a function of ``platform/torch/expands.py`` (nothing got lost in a move)."""
    from hyper_parallel.core.ops.registry import get_registry
    from hyper_parallel.platform import get_platform
    get_platform("torch")
    from hyper_parallel.platform.torch import expands  # noqa: F401  pylint: disable=unused-import
    by_module = {}
    for entry in get_registry().entries.values():
        rule = entry.rule_instance()
        by_module.setdefault(type(rule).__module__, {})[type(rule)] = rule
    pattern = re.compile(r'expand\s*=\s*"(\w+)"|"(expand_\w+)"')
    checked = 0
    for module, rules in by_module.items():
        if not module.startswith("hyper_parallel.core.ops.rules."):
            continue
        source = inspect.getsource(sys.modules[module])
        for name in {a or b for a, b in pattern.findall(source)}:
            found = []
            for rule in rules.values():
                try:
                    found.append(implementation("torch", rule, name))
                except RuleError:
                    continue
            assert found, f"{module}: no registered rule runs expand {name!r} on torch"
            checked += 1
    assert checked >= 20, checked
