# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Optimizers: sharded ``Muon`` (work spread over ranks), ``ChainedOptimizer``, the optimizer and
LR-scheduler factories, ``clip_grad_norm_`` over any mix of gradients, optimizer state dicts.

The configuration, the parameter-assignment rules, the LR formulas and the work planner are pure
Python (``config``, ``groups``, ``lr``, ``planner``); ``import hyper_parallel.optim`` imports no
framework. ``Muon``, ``AdamW`` and ``ChainedOptimizer`` are the classes of the backend named by
``$HYPER_PARALLEL_BACKEND`` (default ``torch``; ``AdamW`` is ``torch.optim.AdamW`` there); the
factories pick the backend from the model. See ``docs/optim.md``.
"""
from __future__ import annotations

from hyper_parallel._lazy import lazy_exports
from hyper_parallel.optim.config import OptimConfig
from hyper_parallel.optim.groups import GroupPlan, ParamDesc, assign_params
from hyper_parallel.optim.lr import LRLambda, lr_factor
from hyper_parallel.optim.planner import TensorLayout, WorkPlan, WorkUnit, ns_flops, plan_work

_LAZY = {
    "Muon": "hyper_parallel.optim.api",
    "AdamW": "hyper_parallel.optim.api",
    "ChainedOptimizer": "hyper_parallel.optim.api",
    "get_hyper_optimizer": "hyper_parallel.optim.api",
    "get_hyper_lr_scheduler": "hyper_parallel.optim.api",
    "clip_grad_norm_": "hyper_parallel.optim._torch.clip",
    "get_total_norm": "hyper_parallel.optim._torch.clip",
    "newton_schulz": "hyper_parallel.optim._torch.muon",
    "adjusted_lr": "hyper_parallel.optim._torch.muon",
    "get_optimizer_state_dict": "hyper_parallel.optim._torch.state_dict",
    "set_optimizer_state_dict": "hyper_parallel.optim._torch.state_dict",
}

__all__ = ["OptimConfig", "GroupPlan", "ParamDesc", "assign_params", "LRLambda", "lr_factor", "TensorLayout",
           "WorkPlan", "WorkUnit", "ns_flops", "plan_work", *sorted(_LAZY)]


def _cached(name: str, module: str) -> bool:
    """Backend-chosen classes of ``optim.api`` are looked up on every access; everything else is kept."""
    return module != "hyper_parallel.optim.api" or name.startswith("get_")


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, cache=_cached)
