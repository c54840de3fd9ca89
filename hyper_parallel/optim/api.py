# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Backend-choosing front doors of ``hyper_parallel.optim``.

* ``get_hyper_optimizer(model, config)`` / ``get_hyper_lr_scheduler(optimizer, config)`` pick the
  backend from the model (a ``torch.nn.Module`` or a ``mindspore.nn.Cell``, or a list of them) and
  from the optimizer.
* ``Muon``, ``AdamW`` and ``ChainedOptimizer`` are the classes of the backend named by
  ``$HYPER_PARALLEL_BACKEND`` (default ``torch``), like ``hyper_parallel.DTensor``.

Nothing here imports a framework until it is used.
"""
from __future__ import annotations

import importlib
import os
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
    first = obj[0] if isinstance(obj, (list, tuple)) and obj else obj
    for cls in type(first).__mro__:
        module = cls.__module__
        if module.startswith("hyper_parallel.optim._mindspore"):
            return "mindspore"
        if module.startswith("torch"):
            return "torch"
        if module.startswith("mindspore"):
            return "mindspore"
    raise TypeError(f"{what}: expected a torch or mindspore model/optimizer, got {type(first).__name__}")


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
    backend = os.environ.get("HYPER_PARALLEL_BACKEND", "torch").strip().lower() or "torch"
    target = _CLASSES.get((backend, name))
    if target is None:
        if any(n == name for _, n in _CLASSES):
            raise ValueError(f"$HYPER_PARALLEL_BACKEND: expected 'torch' or 'mindspore', got {backend!r}")
        raise AttributeError(f"module 'hyper_parallel.optim.api' has no attribute {name!r}")
    return getattr(importlib.import_module(target[0]), target[1])
