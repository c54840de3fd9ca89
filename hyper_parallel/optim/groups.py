# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Which parameter goes to which optimizer and param group (pure Python).

Input: one :class:`ParamDesc` per trainable parameter (name, global shape, kind of the module that
owns it: ``embedding``, ``norm``, ``linear`` or ``other``). Rules, in order:

1. ``param_groups`` entries claim the parameters their globs match (a parameter claimed by two
   entries is an error naming both); an entry may pick the optimizer and override settings.
2. ``adamw_params`` globs send parameters to AdamW; ``muon_params`` globs (when given) to Muon; a
   parameter matched by both is an error.
3. The default (``name="muon"``): **Muon** for every parameter with 2 or more dims (hidden matrices;
   3-D expert weights are orthogonalised per expert) except embeddings and the output head
   (``head_names`` globs over module names); **AdamW** for embeddings, norms, biases, the output
   head and everything else. With ``name="adamw"``/``"adam"`` every parameter goes to that optimizer.

A glob that matches no parameter is an error naming it (a typo never silently changes the optimizer).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any, Dict, List, Sequence, Tuple

from hyper_parallel.optim.config import OptimConfig

__all__ = ["ParamDesc", "GroupPlan", "assign_params", "KINDS"]

KINDS = ("embedding", "norm", "linear", "other")


@dataclass(frozen=True)
class ParamDesc:
    """A trainable parameter as the assignment rules see it."""

    name: str
    shape: Tuple[int, ...]
    kind: str = "other"


@dataclass
class GroupPlan:
    """One param group of one optimizer: parameter names and the group's settings."""

    optimizer: str
    names: List[str] = field(default_factory=list)
    settings: Dict[str, Any] = field(default_factory=dict)
    source: str = "default"


def _module_name(name: str) -> str:
    return name.rsplit(".", 1)[0] if "." in name else ""


def _is_head(p: ParamDesc, cfg: OptimConfig) -> bool:
    mod = _module_name(p.name)
    return any(fnmatchcase(mod, g) for g in cfg.head_names)


def default_optimizer(p: ParamDesc, cfg: OptimConfig) -> str:
    """The optimizer rule 3 picks for ``p``."""
    if cfg.name != "muon":
        return cfg.name
    if len(p.shape) >= 2 and p.kind != "embedding" and not _is_head(p, cfg):
        return "muon"
    return "adamw"


def _claims(params: Sequence[ParamDesc], globs: Sequence[str], what: str) -> Dict[str, str]:
    """name -> the glob that matched it; every glob must match something."""
    out: Dict[str, str] = {}
    for g in globs:
        hits = [p.name for p in params if fnmatchcase(p.name, g)]
        if not hits:
            sample = [p.name for p in params[:6]]
            raise ValueError(f"optimizer config {what}: glob {g!r} matches no parameter (first names: {sample})")
        for n in hits:
            out.setdefault(n, g)
    return out


def _explicit_groups(params: Sequence[ParamDesc], cfg: OptimConfig) -> Dict[str, int]:
    owner: Dict[str, int] = {}
    for i, entry in enumerate(cfg.param_groups):
        for n, g in _claims(params, entry["params"], f"'param_groups[{i}].params'").items():
            if n in owner:
                j = owner[n]
                raise ValueError(f"optimizer config 'param_groups': parameter {n!r} is claimed by two groups: "
                                 f"param_groups[{j}] and param_groups[{i}] (glob {g!r})")
            owner[n] = i
    return owner


def _base_settings(optimizer: str, cfg: OptimConfig) -> Dict[str, Any]:
    if optimizer == "muon":
        return {"lr": cfg.lr if cfg.muon_lr is None else cfg.muon_lr, "momentum": cfg.momentum,
                "nesterov": cfg.nesterov, "ns_steps": cfg.ns_steps, "adjust_lr": cfg.adjust_lr,
                "weight_decay": cfg.weight_decay if cfg.muon_weight_decay is None else cfg.muon_weight_decay}
    return {"lr": cfg.lr, "betas": cfg.betas, "eps": cfg.eps, "weight_decay": cfg.weight_decay}


_KEYS_OF = {"muon": {"lr", "momentum", "nesterov", "ns_steps", "adjust_lr", "weight_decay"},
            "adamw": {"lr", "betas", "eps", "weight_decay"}, "adam": {"lr", "betas", "eps", "weight_decay"}}


def _check_descs(params: Sequence[ParamDesc]) -> None:
    seen = set()
    for p in params:
        if p.name in seen:
            raise ValueError(f"assign_params: parameter name {p.name!r} appears twice")
        seen.add(p.name)
        if p.kind not in KINDS:
            raise ValueError(f"assign_params: parameter {p.name!r} has kind {p.kind!r}; expected one of {KINDS}")


def _explicit_group(i: int, opt: str, cfg: OptimConfig, name: str) -> GroupPlan:
    entry = cfg.param_groups[i]
    bad = sorted(k for k in entry if k not in ("params", "optimizer") and k not in _KEYS_OF[opt])
    if bad:
        raise ValueError(f"optimizer config 'param_groups[{i}]': key {bad[0]!r} does not apply to {opt} "
                         f"(parameter {name!r})")
    settings = _base_settings(opt, cfg)
    settings.update({k: v for k, v in entry.items() if k not in ("params", "optimizer")})
    return GroupPlan(opt, [], settings, f"param_groups[{i}]")


def assign_params(params: Sequence[ParamDesc], config: Any) -> List[GroupPlan]:
    """Apply the rules of the module docstring; returns the groups in a stable order (Muon groups
    first, then AdamW/Adam; default groups before ``param_groups`` entries)."""
    cfg = OptimConfig.parse(config)
    _check_descs(params)
    explicit = _explicit_groups(params, cfg)
    forced_adamw = _claims(params, cfg.adamw_params, "'adamw_params'")
    forced_muon = _claims(params, cfg.muon_params or (), "'muon_params'")
    both = sorted(set(forced_adamw) & set(forced_muon))
    if both:
        raise ValueError(f"optimizer config: parameter {both[0]!r} is claimed by both 'muon_params' (glob "
                         f"{forced_muon[both[0]]!r}) and 'adamw_params' (glob {forced_adamw[both[0]]!r})")
    fallback = "adamw" if cfg.name == "muon" else cfg.name
    groups: Dict[Any, GroupPlan] = {}
    for p in params:
        rule = _rule(p, cfg, forced_adamw, forced_muon, fallback)
        if p.name in explicit:
            i = explicit[p.name]
            opt = cfg.param_groups[i].get("optimizer") or rule
            key = ("group", i, opt)
            if key not in groups:
                groups[key] = _explicit_group(i, opt, cfg, p.name)
        else:
            key = ("default", rule)
            if key not in groups:
                groups[key] = GroupPlan(rule, [], _base_settings(rule, cfg), "default")
        if groups[key].optimizer == "muon" and len(p.shape) < 2:
            raise ValueError(f"optimizer config: parameter {p.name!r} of shape {tuple(p.shape)} is assigned to "
                             "Muon, which needs 2 or more dims; give it to AdamW")
        groups[key].names.append(p.name)
    order = {"muon": 0, "adamw": 1, "adam": 1}
    return [groups[k] for k in sorted(groups, key=lambda k: (order[groups[k].optimizer], k[0] != "default",
                                                             k[1] if k[0] == "group" else 0))]


def _rule(p: ParamDesc, cfg: OptimConfig, forced_adamw, forced_muon, fallback: str) -> str:
    if p.name in forced_adamw:
        return fallback
    if p.name in forced_muon:
        return "muon"
    if cfg.muon_params is not None and cfg.name == "muon":
        return "adamw"
    return default_optimizer(p, cfg)
