# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Sharding-plan parsing for ``shard_module`` (pure; both backends use it).

A plan is a dict with up to four keys (patterns are fnmatch globs; a pattern that matches nothing is an
error naming it)::

    plan = {
        "parameters": {"mlp.fc1.weight": (Shard(0),), "mlp.fc2.weight": Layout((2,), ("tp",))("None", "tp")},
        "inputs":  {"mlp": (Replicate(),)},      # per positional input; None leaves one alone
        "outputs": {"mlp": (Replicate(),)},      # per output; DTensor outputs are redistributed
        "use_local_output": ["mlp"],             # modules whose DTensor outputs become local tensors
    }

Use ``""`` as the module pattern for the root module.
"""
from __future__ import annotations

from typing import Any, Dict, List, Sequence

from hyper_parallel.core.layout import Layout
from hyper_parallel.core.patterns import select
from hyper_parallel.core.placement import Placement

__all__ = ["PLAN_KEYS", "check_plan", "placements_of", "match", "layouts_of"]

PLAN_KEYS = frozenset({"parameters", "inputs", "outputs", "use_local_output"})


def check_plan(sharding_plan: Any) -> Dict[str, Any]:
    """``sharding_plan`` if it is a dict with known keys only (a clear error otherwise)."""
    if not isinstance(sharding_plan, dict):
        raise TypeError(f"shard_module: sharding_plan must be a dict, got {type(sharding_plan).__name__}")
    unknown = set(sharding_plan) - PLAN_KEYS
    if unknown:
        raise ValueError(f"shard_module: unknown plan key(s) {sorted(unknown)}; expected {sorted(PLAN_KEYS)}")
    return sharding_plan


def placements_of(spec: Any, what: str) -> tuple:
    """Placements from a placement, a tuple of placements or a bound ``Layout``."""
    if isinstance(spec, Layout):
        return spec.placements
    if isinstance(spec, Placement):
        return (spec,)
    if isinstance(spec, (list, tuple)) and all(isinstance(p, Placement) for p in spec):
        return tuple(spec)
    raise TypeError(f"{what}: expected placements (a tuple of Shard/Replicate/Partial) or a bound Layout, got {spec!r}")


def layouts_of(seq: Any, what: str) -> List:
    """One layout (placements, or ``None`` to leave a position alone) per input/output position."""
    if not isinstance(seq, (list, tuple)):
        raise TypeError(f"shard_module: {what} must be a tuple with one layout (or None) per position, got {seq!r}")
    return [None if pl is None else placements_of(pl, f"shard_module {what}") for pl in seq]


def match(names: Sequence[str], pattern: str, what: str) -> List[str]:
    """The names ``pattern`` matches; an error naming the plan entry when it matches nothing."""
    return select(names, pattern, f"shard_module: {what} pattern {pattern!r} matches nothing (known: "
                                  f"{list(names)[:8]})")
