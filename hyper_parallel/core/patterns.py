# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The one glob matcher of plans (``parallelize_module``, ``shard_module``): fnmatch patterns over dotted
module and parameter names, where a pattern that matches nothing is an error, never a silent no-op."""
from __future__ import annotations

from fnmatch import fnmatchcase
from typing import List, Sequence

__all__ = ["select"]


def select(names: Sequence[str], pattern: str, nothing: str) -> List[str]:
    """The ``names`` that ``pattern`` matches (fnmatch, case-sensitive), in order; ``ValueError(nothing)``
    when none does (``nothing`` names the plan entry and what was expected)."""
    if not isinstance(pattern, str):
        raise TypeError(f"{nothing.split(':')[0]}: a plan pattern must be a string, got {pattern!r}")
    hits = [n for n in names if fnmatchcase(n, pattern)]
    if not hits:
        raise ValueError(nothing)
    return hits
