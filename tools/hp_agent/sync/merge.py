# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Merging sync's JSON settings into a file that may hold keys sync did not write.

Rules: a key sync writes replaces the file's value (objects merge key by key); a key sync does not write
is kept. Inside a list, sync's entries (those ``owns`` recognises, or equal to one of sync's) are
replaced by the current ones at the place the first of them stood; foreign entries keep their order.
Sync's stale entries under keys it no longer writes are dropped, and a list or object that becomes empty
only because of that disappears. ``merge(current, ours) == current`` means "no drift in sync's keys".
"""
from __future__ import annotations

from typing import Callable

Owns = Callable[[object], bool]
_GONE = object()


def _drop_owned(value: object, owns: Owns) -> object:
    """``value`` without sync's list entries (``_GONE`` when only sync's entries made it non-empty)."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            kept = _drop_owned(item, owns)
            if kept is not _GONE:
                out[key] = kept
        return _GONE if value and not out else out
    if isinstance(value, list):
        kept_items = [_drop_owned(v, owns) for v in value if not owns(v)]
        kept_items = [v for v in kept_items if v is not _GONE]
        return _GONE if value and not kept_items else kept_items
    return value


def _merge_list(current: list, ours: list, owns: Owns) -> list:
    kept, first = [], None
    for item in current:
        if owns(item) or item in ours:
            first = len(kept) if first is None else first
            continue
        dropped = _drop_owned(item, owns)
        if dropped is not _GONE:
            kept.append(dropped)
    pos = len(kept) if first is None else first
    return kept[:pos] + list(ours) + kept[pos:]


def merge(current: object, ours: object, owns: Owns) -> object:
    """``current`` with sync's keys and list entries set to ``ours`` (see the module docstring)."""
    if isinstance(current, dict) and isinstance(ours, dict):
        out = {}
        for key, value in current.items():
            merged = merge(value, ours[key], owns) if key in ours else _drop_owned(value, owns)
            if merged is not _GONE:
                out[key] = merged
        for key, value in ours.items():
            out.setdefault(key, value)
        return out
    if isinstance(current, list) and isinstance(ours, list):
        return _merge_list(current, ours, owns)
    return ours
