# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``get_hyper_optimizer`` / ``get_hyper_lr_scheduler`` for torch models.

The assignment of parameters to optimizers and groups is the pure rule set of
``hyper_parallel.optim.groups``; this module only describes the model's parameters to it and builds
the optimizers: ``Muon`` (ours), ``torch.optim.AdamW`` / ``torch.optim.Adam``, chained in a
``ChainedOptimizer``. The scheduler is torch's ``LambdaLR`` driven by the named formula of
``hyper_parallel.optim.lr``.
"""
from __future__ import annotations

from typing import Any, Dict, List, Sequence, Tuple, Union

import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

from hyper_parallel.optim.config import OptimConfig
from hyper_parallel.optim.groups import ParamDesc, assign_params
from hyper_parallel.optim.lr import LRLambda
from hyper_parallel.optim._torch.chained import ChainedOptimizer
from hyper_parallel.optim._torch.muon import Muon

__all__ = ["get_hyper_optimizer", "get_hyper_lr_scheduler", "describe_params", "named_trainable"]

_NAMES_ATTR = "param_names"


def _kind(module: nn.Module) -> str:
    if isinstance(module, nn.Embedding):
        return "embedding"
    if isinstance(module, nn.Linear):
        return "linear"
    if "norm" in type(module).__name__.lower():
        return "norm"
    return "other"


def _parts(model: Union[nn.Module, Sequence[nn.Module]], what: str) -> List[nn.Module]:
    parts = list(model) if isinstance(model, (list, tuple)) else [model]
    for i, m in enumerate(parts):
        if not isinstance(m, nn.Module):
            raise TypeError(f"{what}(model): expected an nn.Module or a list of them (pipeline stages), got "
                            f"{type(m).__name__} at {i}")
    if not parts:
        raise ValueError(f"{what}(model): expected at least one module")
    return parts


def named_trainable(model: Union[nn.Module, Sequence[nn.Module]]) -> List[Tuple[str, nn.Parameter, str]]:
    """``(name, parameter, kind)`` of every trainable parameter of ``model`` (or of every stage)."""
    out, seen = [], {}
    for part in _parts(model, "get_hyper_optimizer"):
        for mod_name, mod in part.named_modules():
            for pname, p in mod._parameters.items():  # pylint: disable=protected-access
                if p is None or not p.requires_grad or id(p) in seen:
                    continue
                name = f"{mod_name}.{pname}" if mod_name else pname
                seen[id(p)] = name
                out.append((name, p, _kind(mod)))
    return out


def describe_params(model: Union[nn.Module, Sequence[nn.Module]]) -> List[ParamDesc]:
    """The :class:`ParamDesc` list the assignment rules see (global shapes)."""
    return [ParamDesc(name, tuple(p.shape), kind) for name, p, kind in named_trainable(model)]


def get_hyper_optimizer(model: Union[nn.Module, Sequence[nn.Module]], config: Any = None) -> ChainedOptimizer:
    """Build the optimizers of ``model`` from ``config`` (see ``OptimConfig`` and ``optim.groups``).

    Returns a :class:`ChainedOptimizer`: ``[Muon, AdamW]`` for ``name="muon"`` (either omitted when it
    gets no parameter), ``[AdamW]`` / ``[Adam]`` otherwise. ``chain.param_names`` maps ``id(param)``
    to its name.
    """
    cfg = OptimConfig.parse(config)
    named = named_trainable(model)
    if not named:
        raise ValueError("get_hyper_optimizer(model): the model has no trainable parameters")
    by_name = {name: p for name, p, _ in named}
    plans = assign_params([ParamDesc(n, tuple(p.shape), k) for n, p, k in named], cfg)
    per_opt: Dict[str, List[Dict[str, Any]]] = {}
    for plan in plans:
        group = {"params": [by_name[n] for n in plan.names], **plan.settings}
        per_opt.setdefault(plan.optimizer, []).append(group)
    optimizers = []
    for name, groups in per_opt.items():
        if name == "muon":
            optimizers.append(Muon(groups, lr=cfg.lr if cfg.muon_lr is None else cfg.muon_lr))
        elif name == "adamw":
            optimizers.append(torch.optim.AdamW(groups, lr=cfg.lr, foreach=cfg.foreach))
        else:
            optimizers.append(torch.optim.Adam(groups, lr=cfg.lr, foreach=cfg.foreach))
    chain = ChainedOptimizer(optimizers)
    setattr(chain, _NAMES_ATTR, {id(p): n for n, p, _ in named})
    return chain


def get_hyper_lr_scheduler(optimizer: torch.optim.Optimizer, config: Any = None) -> LambdaLR:
    """torch's ``LambdaLR`` over every param group of ``optimizer`` with the factor of
    ``hyper_parallel.optim.lr.lr_factor`` (warmup, then ``constant``/``linear``/``cosine``/``wsd``)."""
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"get_hyper_lr_scheduler(optimizer): expected a torch.optim.Optimizer, got "
                        f"{type(optimizer).__name__}")
    cfg = OptimConfig.parse(config)
    return LambdaLR(optimizer, LRLambda(**cfg.scheduler_settings()))
