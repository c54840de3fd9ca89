# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``get_hyper_optimizer`` / ``get_hyper_lr_scheduler`` for MindSpore cells (same rules and formulas as torch).

MindSpore's own LR schedulers accept only its ``experimental.optim.Optimizer`` subclasses (whose AdamW
has no CPU kernel), so the scheduler here is a small ``LambdaLR`` equivalent that sets every group's
lr to ``base_lr * factor`` with the named formula of ``hyper_parallel.optim.lr``.
"""
from __future__ import annotations

from typing import Any, Dict, List, Sequence, Union

from mindspore import nn

from hyper_parallel.optim.config import OptimConfig
from hyper_parallel.optim.groups import ParamDesc, assign_params
from hyper_parallel.optim.lr import LRLambda
from hyper_parallel.optim._mindspore.optimizers import AdamW, ChainedOptimizer, Muon, parameter_specs

__all__ = ["get_hyper_optimizer", "get_hyper_lr_scheduler", "LambdaLR"]


def _kind(cell: nn.Cell) -> str:
    name = type(cell).__name__.lower()
    if "embedding" in name:
        return "embedding"
    if "norm" in name:
        return "norm"
    if name in ("dense", "linear"):
        return "linear"
    return "other"


def _named(model: Union[nn.Cell, Sequence[nn.Cell]]):
    parts = list(model) if isinstance(model, (list, tuple)) else [model]
    out, specs, seen = [], {}, set()
    for part in parts:
        if not isinstance(part, nn.Cell):
            raise TypeError(f"get_hyper_optimizer(model): expected an nn.Cell or a list of them, got "
                            f"{type(part).__name__}")
        specs.update(parameter_specs(part))
        for _, cell in part.cells_and_names():
            for p in cell.get_parameters(expand=False):
                if p.requires_grad and p.name not in seen:
                    seen.add(p.name)
                    out.append((p, _kind(cell)))
    return out, specs


def get_hyper_optimizer(model: Union[nn.Cell, Sequence[nn.Cell]], config: Any = None) -> ChainedOptimizer:
    """``ChainedOptimizer([Muon, AdamW])`` (or ``[AdamW]``) for a MindSpore model, by the rules of
    ``hyper_parallel.optim.groups`` over global shapes (sharded parameters' specs come from their cells)."""
    cfg = OptimConfig.parse(config)
    if cfg.name == "adam":
        raise ValueError("optimizer config 'name': 'adam' is not available for MindSpore models; use 'adamw' "
                         "(weight_decay=0 gives Adam)")
    named, specs = _named(model)
    if not named:
        raise ValueError("get_hyper_optimizer(model): the model has no trainable parameters")
    by_name = {p.name: p for p, _ in named}
    descs = [ParamDesc(p.name, tuple(specs[p.name].shape if p.name in specs else p.shape), k) for p, k in named]
    per_opt: Dict[str, List[Dict[str, Any]]] = {}
    for plan in assign_params(descs, cfg):
        per_opt.setdefault(plan.optimizer, []).append({"params": [by_name[n] for n in plan.names], **plan.settings})
    optimizers = []
    for name, groups in per_opt.items():
        if name == "muon":
            optimizers.append(Muon(groups, specs=specs))
        else:
            optimizers.append(AdamW(groups, lr=cfg.lr))
    return ChainedOptimizer(optimizers)


class LambdaLR:
    """Sets every param group's lr to ``initial_lr * lr_lambda(step)``; ``step()`` advances one step."""

    def __init__(self, optimizer: Any, lr_lambda: Any) -> None:
        self.optimizer = optimizer
        self.lr_lambda = lr_lambda
        self.last_epoch = 0
        self.base_lrs = [float(_get_lr(g)) for g in optimizer.param_groups]
        self._apply()

    def _apply(self) -> None:
        factor = self.lr_lambda(self.last_epoch)
        for group, base in zip(self.optimizer.param_groups, self.base_lrs):
            _set_lr(group, base * factor)

    def step(self) -> None:
        """Advance one step and set the new lrs."""
        self.last_epoch += 1
        self._apply()

    def get_last_lr(self) -> List[float]:
        """The lr of every group now."""
        return [float(_get_lr(g)) for g in self.optimizer.param_groups]

    def state_dict(self) -> Dict[str, Any]:
        """``last_epoch``, ``base_lrs`` and the formula's settings."""
        return {"last_epoch": self.last_epoch, "base_lrs": list(self.base_lrs),
                "lr_lambda": dict(getattr(self.lr_lambda, "__dict__", {}))}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` and set the lrs it implies."""
        self.last_epoch = int(state["last_epoch"])
        self.base_lrs = list(state["base_lrs"])
        if hasattr(self.lr_lambda, "__dict__"):
            self.lr_lambda.__dict__.update(state.get("lr_lambda", {}))
        self._apply()


def _get_lr(group: Dict[str, Any]) -> float:
    return float(group["lr"])


def _set_lr(group: Dict[str, Any], value: float) -> None:
    group["lr"] = value


def get_hyper_lr_scheduler(optimizer: Any, config: Any = None) -> LambdaLR:
    """A :class:`LambdaLR` over every group of ``optimizer`` with the factor of ``hyper_parallel.optim.lr``."""
    if not hasattr(optimizer, "param_groups"):
        raise TypeError(f"get_hyper_lr_scheduler(optimizer): expected an optimizer with param_groups, got "
                        f"{type(optimizer).__name__}")
    return LambdaLR(optimizer, LRLambda(**OptimConfig.parse(config).scheduler_settings()))
