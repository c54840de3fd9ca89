# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""pylint plugin: names declared in ``__slots__`` are instance members.

Immutable value types in this project (mesh topology, placements, specs) declare ``__slots__`` and set
their fields once with ``object.__setattr__`` in ``__init__``; pylint cannot see those assignments and
reports every read as ``no-member`` (E1101). This transform declares each slot name on the class, as
a ``name: T`` annotation without a value would, so real ``no-member`` errors elsewhere are still reported.
"""
from __future__ import annotations

from astroid import MANAGER, nodes


def _slot_names(cls: nodes.ClassDef) -> list[str]:
    names = []
    for value in cls.locals.get("__slots__", []):
        parent = value.parent
        if isinstance(parent, nodes.Assign) and isinstance(parent.value, (nodes.Tuple, nodes.List, nodes.Set)):
            names += [e.value for e in parent.value.elts if isinstance(e, nodes.Const) and isinstance(e.value, str)]
        elif isinstance(parent, nodes.Assign) and isinstance(parent.value, nodes.Const) \
                and isinstance(parent.value.value, str):
            names.append(parent.value.value)
    return names


def _annotation(cls: nodes.ClassDef, name: str) -> nodes.AssignName:
    """A synthetic ``name: <slot>`` class annotation without a value (astroid leaves its value uninferred)."""
    where = {"lineno": cls.lineno, "col_offset": cls.col_offset, "end_lineno": cls.lineno,
             "end_col_offset": cls.col_offset}
    ann = nodes.AnnAssign(parent=cls, **where)
    target = nodes.AssignName(name=name, parent=ann, **where)
    ann.postinit(target=target, annotation=nodes.Const("slot", parent=ann, **where), simple=1, value=None)
    return target


def declare_slots(cls: nodes.ClassDef) -> nodes.ClassDef:
    """Declare every ``__slots__`` name of ``cls`` as a member, as ``name: T`` in the class body would."""
    for name in _slot_names(cls):
        if name not in cls.instance_attrs and name not in cls.locals:
            cls.locals[name] = [_annotation(cls, name)]
    return cls


def register(linter: object) -> None:  # pylint: disable=unused-argument
    """pylint entry point: the transform is registered at import time."""


MANAGER.register_transform(nodes.ClassDef, declare_slots)
