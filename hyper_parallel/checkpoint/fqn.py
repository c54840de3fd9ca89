# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Stable fully qualified names (pure): the same parameter has the same key in every parallel layout.

``fully_shard``, ``parallelize_module`` and ``shard_module`` keep module and parameter names; wrappers
that insert a submodule do not (activation checkpointing's ``_checkpoint_wrapped_module``,
``torch.compile``'s ``_orig_mod``, FSDP1's ``_fsdp_wrapped_module``). Checkpoint keys drop those
segments, so a checkpoint saved with a wrapper loads without it and the other way round.
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, List

__all__ = ["WRAPPER_SEGMENTS", "canonical_fqn", "canonical_map", "flatten_optimizer_state", "unflatten_optimizer_state"]

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


def flatten_optimizer_state(osd: Dict[str, Any]) -> Dict[str, Any]:
    """torch's ``flatten_optimizer_state_dict`` form of ``{"state": {fqn: {k: v}}, "param_groups": [...]}``:
    ``{"state.<fqn>.<k>": v, "param_groups.<fqn>.<setting>": value}``. Every key names one parameter, so
    the dicts of pipeline stages (different parameters per rank) merge without collisions, and loading
    needs no group order."""
    flat: Dict[str, Any] = {}
    for name, st in osd.get("state", {}).items():
        for k, v in st.items():
            flat[f"state.{name}.{k}"] = v
    for group in osd.get("param_groups", []):
        for name in group["params"]:
            for k, v in group.items():
                if k != "params":
                    flat[f"param_groups.{name}.{k}"] = v
    return flat


def unflatten_optimizer_state(flat: Dict[str, Any], groups: List[List[str]]) -> Dict[str, Any]:
    """The nested form for an optimizer whose param groups hold the parameters ``groups`` (names, in order):
    each group's settings are those stored for its first parameter; states of other parameters are left out."""
    wanted = {n for g in groups for n in g}
    state: Dict[str, Dict[str, Any]] = {}
    settings: Dict[str, Dict[str, Any]] = {}
    for key, value in flat.items():
        kind, _, rest = key.partition(".")
        name, _, field = rest.rpartition(".")
        if kind not in ("state", "param_groups") or not name:
            raise KeyError(f"flattened optimizer state dict: unexpected key {key!r}")
        if name in wanted:
            (state if kind == "state" else settings).setdefault(name, {})[field] = value
    out_groups = []
    for names in groups:
        if not names:
            continue
        if names[0] not in settings:
            raise KeyError(f"optimizer state dict: no param-group settings stored for parameter {names[0]!r}")
        out_groups.append({**settings[names[0]], "params": list(names)})
    return {"state": state, "param_groups": out_groups}
