# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Backend-choosing front doors of ``hyper_parallel.optim``.

* ``get_hyper_optimizer(model, config)`` / ``get_hyper_lr_scheduler(optimizer, config)`` pick the
  backend of the model (a ``torch.nn.Module`` or a ``mindspore.nn.Cell``, or a list of them) or of
  the optimizer with ``hyper_parallel.platform.platform_of``.
* ``Muon``, ``AdamW`` and ``ChainedOptimizer`` are the classes of the default platform
  (``$HYPER_PARALLEL_BACKEND``, default ``torch``), like ``hyper_parallel.DTensor``.

Nothing here imports a framework until it is used.
"""
from __future__ import annotations

import importlib
from typing import Any

__all__ = ["get_hyper_optimizer", "get_hyper_lr_scheduler"]

_FACTORIES = {"torch": "hyper_parallel.optim._torch.factory", "mindspore": "hyper_parallel.optim._mindspore.factory"}
_CLASSES = {
    ("torch", "Muon"): ("hyper_parallel.optim._torch.muon", "Muon"),
    ("torch", "AdamW"): ("torch.optim", "AdamW"),
    ("torch", "ChainedOptimizer"): ("hyper_parallel.optim._torch.chained", "ChainedOptimizer"),
    ("mindspore", "Muon"): ("hyper_parallel.optim._mindspore.optimizers", "Muon"),
    ("mindspore", "AdamW"): ("hyper_parallel.optim._mindspore.optimizers", "AdamW"),
    ("mindspore", "ChainedOptimizer"): ("hyper_parallel.optim._mindspore.optimizers", "ChainedOptimizer"),
}


def _backend_of(obj: Any, what: str) -> str:
    """The backend of a model / optimizer (or of the first of a list), chosen by the platform layer."""
    from hyper_parallel.platform import platform_of
    first = obj[0] if isinstance(obj, (list, tuple)) and obj else obj
    plat = platform_of(first)
    groups = getattr(first, "param_groups", None)
    if plat is None and groups and groups[0].get("params"):
        plat = platform_of(groups[0]["params"][0])  # our MindSpore optimizers are plain Python classes
    if plat is None:
        raise TypeError(f"{what}: expected a torch or mindspore model/optimizer, got {type(first).__name__}")
    return plat.name


def get_hyper_optimizer(model: Any, config: Any = None) -> Any:
    """Build the optimizers of ``model`` from ``config`` (see ``hyper_parallel.optim.config.OptimConfig``
    and the assignment rules in ``hyper_parallel.optim.groups``); returns a ``ChainedOptimizer``."""
    backend = _backend_of(model, "get_hyper_optimizer(model)")
    return importlib.import_module(_FACTORIES[backend]).get_hyper_optimizer(model, config)


def get_hyper_lr_scheduler(optimizer: Any, config: Any = None) -> Any:
    """The LR scheduler of ``config`` (warmup + ``constant``/``linear``/``cosine``/``wsd``) over ``optimizer``."""
    backend = _backend_of(optimizer, "get_hyper_lr_scheduler(optimizer)")
    return importlib.import_module(_FACTORIES[backend]).get_hyper_lr_scheduler(optimizer, config)


def __getattr__(name: str) -> Any:
    if not any(n == name for _, n in _CLASSES):
        raise AttributeError(f"module 'hyper_parallel.optim.api' has no attribute {name!r}")
    from hyper_parallel.platform import get_platform
    module, attr = _CLASSES[(get_platform().name, name)]
    return getattr(importlib.import_module(module), attr)
