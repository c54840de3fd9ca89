# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Backend-choosing front doors of the public API (``hyper_parallel.distribute_tensor``, ``hyper_parallel.DTensor``).

* :func:`distribute_tensor` picks the backend by the tensor's type (a ``torch.Tensor`` -> the torch
  DTensor, a ``mindspore.Tensor`` -> the MindSpore DTensor).
* ``DTensor`` is the class of the backend named by ``$HYPER_PARALLEL_BACKEND`` (default ``torch``),
  so ``hp.DTensor.from_local(...)`` and ``isinstance(x, hp.DTensor)`` mean the active backend's class.

Nothing here imports a framework until it is used.
"""
from __future__ import annotations

import importlib
import os
from typing import Any

__all__ = ["distribute_tensor", "dtensor_module"]

_MODULES = {"torch": "hyper_parallel.platform.torch.dtensor", "mindspore": "hyper_parallel.platform.mindspore.dtensor"}


def dtensor_module(backend: str) -> Any:
    """The DTensor module of ``backend`` (``torch`` or ``mindspore``)."""
    module = _MODULES.get(backend)
    if module is None:
        raise ValueError(f"backend: expected one of {sorted(_MODULES)}, got {backend!r}")
    return importlib.import_module(module)


def _backend_of(tensor: Any) -> str:
    module = type(tensor).__module__
    for name in _MODULES:
        if module.startswith(name) or module.startswith(f"hyper_parallel.platform.{name}"):
            return name
    raise TypeError(f"distribute_tensor(tensor): expected a torch or mindspore tensor, got "
                    f"{module}.{type(tensor).__name__}")


def distribute_tensor(tensor: Any, device_mesh: Any, placements: Any = None, **kwargs: Any) -> Any:
    """Shard a full tensor over ``device_mesh`` with ``placements``, on the backend that owns ``tensor``
    (see ``platform/<backend>/dtensor.py`` for the arguments)."""
    return dtensor_module(_backend_of(tensor)).distribute_tensor(tensor, device_mesh, placements, **kwargs)


def __getattr__(name: str) -> Any:
    if name == "DTensor":
        backend = os.environ.get("HYPER_PARALLEL_BACKEND", "torch").strip().lower() or "torch"
        return dtensor_module(backend).DTensor
    raise AttributeError(f"module 'hyper_parallel.core.api' has no attribute {name!r}")
