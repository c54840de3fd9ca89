# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Backend-choosing front doors of the public API (``hyper_parallel.distribute_tensor``, ``hyper_parallel.DTensor``).

* :func:`distribute_tensor` picks the backend by the tensor's type (a ``torch.Tensor`` -> the torch
  DTensor, a ``mindspore.Tensor`` -> the MindSpore DTensor).
* ``DTensor`` is the class of the backend named by ``$HYPER_PARALLEL_BACKEND`` (default ``torch``),
  so ``hp.DTensor.from_local(...)`` and ``isinstance(x, hp.DTensor)`` mean the active backend's class.

Both go through the platform (``hyper_parallel.platform``), the one backend switch; nothing here imports a
framework until it is used.
"""
from __future__ import annotations

from typing import Any

from hyper_parallel.platform import get_platform, platform_for

__all__ = ["distribute_tensor"]


def distribute_tensor(tensor: Any, device_mesh: Any, placements: Any = None, **kwargs: Any) -> Any:
    """Shard a full tensor over ``device_mesh`` with ``placements``, on the backend that owns ``tensor``
    (see ``platform/<backend>/dtensor.py`` for the arguments)."""
    try:
        plat = platform_for(tensor)
    except TypeError as exc:
        raise TypeError(f"distribute_tensor(tensor): {exc}") from None
    return plat.distribute_tensor(tensor, device_mesh, placements, **kwargs)


def __getattr__(name: str) -> Any:
    if name == "DTensor":
        return get_platform().dtensor_type
    raise AttributeError(f"module 'hyper_parallel.core.api' has no attribute {name!r}")
