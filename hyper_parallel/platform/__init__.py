# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Backend selection. Nothing here imports a framework until a backend is asked for.

The backend is chosen explicitly: ``get_platform("torch")``, the ``HYPER_PARALLEL_BACKEND``
environment variable (``torch`` or ``mindspore``; default ``torch``), or by the type of a tensor
(``platform_for(tensor)``) — never by whichever framework happens to be installed.
"""
from __future__ import annotations

import os
from typing import Any, Dict, Optional

from hyper_parallel.platform.base import CollectiveError, Platform

__all__ = ["get_platform", "platform_for", "platform_of", "platform_for_module", "Platform", "CollectiveError",
           "BACKENDS"]

BACKENDS = ("torch", "mindspore")
_INSTANCES: Dict[str, Platform] = {}


def _backend_name(name: Optional[str]) -> str:
    name = name or os.environ.get("HYPER_PARALLEL_BACKEND", "torch")
    name = name.strip().lower()
    if name not in BACKENDS:
        raise ValueError(f"HYPER_PARALLEL_BACKEND / backend name: expected one of {BACKENDS}, got {name!r}")
    return name


def get_platform(name: Optional[str] = None) -> Platform:
    """The backend named ``name`` (default: ``$HYPER_PARALLEL_BACKEND`` or ``torch``)."""
    name = _backend_name(name)
    inst = _INSTANCES.get(name)
    if inst is None:
        if name == "torch":
            from hyper_parallel.platform.torch.platform import PLATFORM as inst
        else:
            from hyper_parallel.platform.mindspore.platform import PLATFORM as inst  # pylint: disable=import-error,no-name-in-module
        _INSTANCES[name] = inst
    return inst


def _backend_of_module(module: str) -> Optional[str]:
    for name in BACKENDS:
        if module.startswith(name) or module.startswith(f"hyper_parallel.platform.{name}"):
            return name
    return None


def platform_for(tensor: Any) -> Platform:
    """The backend that owns ``tensor`` (by its type's module)."""
    name = _backend_of_module(type(tensor).__module__)
    if name is None:
        raise TypeError(f"expected a torch or mindspore tensor, got {type(tensor).__module__}.{type(tensor).__name__}")
    return get_platform(name)


def platform_of(obj: Any) -> Optional[Platform]:
    """The backend of any framework object (tensor, module/cell, optimizer, scheduler) by its class
    hierarchy — a user's ``nn.Module`` subclass included; None for plain Python objects."""
    for cls in type(obj).__mro__:
        name = _backend_of_module(cls.__module__ or "")
        if name is not None:
            return get_platform(name)
    return None


def platform_for_module(module: Any) -> Platform:
    """The backend whose module class ``module`` is (``torch.nn.Module`` or ``mindspore.nn.Cell``)."""
    plat = platform_of(module)
    if plat is None or not isinstance(module, plat.module_type):
        raise TypeError(f"expected a torch.nn.Module or a mindspore.nn.Cell, got {type(module).__module__}."
                        f"{type(module).__name__}")
    return plat
