# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Declarative parallelism: ``shard_module`` lays out a model as a plan says (the plan format is in
``hyper_parallel/shard/plan.py``); the model code stays untouched. It takes torch modules
(``shard/_torch/module.py``) and MindSpore cells (``shard/_mindspore/module.py``)."""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Dict

from hyper_parallel.platform import platform_for_module
from hyper_parallel.shard.plan import check_plan

if TYPE_CHECKING:
    from hyper_parallel.core.device_mesh import DeviceMesh

__all__ = ["shard_module"]

_IMPLEMENTATIONS = {"torch": "hyper_parallel.shard._torch.module",
                    "mindspore": "hyper_parallel.shard._mindspore.module"}


def shard_module(module: Any, device_mesh: "DeviceMesh", sharding_plan: Dict[str, Any]) -> Any:
    """Lay out ``module``'s parameters and module boundaries as ``sharding_plan`` says (in place) and
    return it; ``module`` is a ``torch.nn.Module`` or a ``mindspore.nn.Cell``."""
    check_plan(sharding_plan)
    plat = platform_for_module(module)
    return importlib.import_module(_IMPLEMENTATIONS[plat.name]).shard_module(module, device_mesh, sharding_plan)
