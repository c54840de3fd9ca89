# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Stable fully qualified names (pure): the same parameter has the same key in every parallel layout.

``fully_shard``, ``parallelize_module`` and ``shard_module`` keep module and parameter names; wrappers
that insert a submodule do not (activation checkpointing's ``_checkpoint_wrapped_module``,
``torch.compile``'s ``_orig_mod``, FSDP1's ``_fsdp_wrapped_module``). Checkpoint keys drop those
segments, so a checkpoint saved with a wrapper loads without it and the other way round.
"""
from __future__ import annotations

from typing import Dict, Iterable

__all__ = ["WRAPPER_SEGMENTS", "canonical_fqn", "canonical_map"]

WRAPPER_SEGMENTS = ("_checkpoint_wrapped_module", "_orig_mod", "_fsdp_wrapped_module")


def canonical_fqn(name: str) -> str:
    """``name`` without wrapper segments: ``layers.0._checkpoint_wrapped_module.w`` -> ``layers.0.w``."""
    if not any(seg in name for seg in WRAPPER_SEGMENTS):
        return name
    return ".".join(p for p in name.split(".") if p not in WRAPPER_SEGMENTS)


def canonical_map(names: Iterable[str]) -> Dict[str, str]:
    """``{canonical name: actual name}``; two names collapsing to one canonical name is an error."""
    out: Dict[str, str] = {}
    for name in names:
        key = canonical_fqn(name)
        if key in out and out[key] != name:
            raise ValueError(f"state dict keys {out[key]!r} and {name!r} have the same canonical name {key!r}")
        out[key] = name
    return out
