# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The backend switch of the MoE functions that take a model: a ``torch.nn.Module`` goes to ``moe/_torch``,
a ``mindspore.nn.Cell`` to ``moe/_mindspore`` (as ``hyper_parallel.fully_shard`` picks its backend). The
MindSpore layer classes are exported under clear names (``MindSporeMoE``, ...) by ``hyper_parallel.moe``."""
from __future__ import annotations

import importlib
from typing import Any

__all__ = ["update_expert_bias", "expert_parallel"]

_IMPLEMENTATIONS = {"torch": "hyper_parallel.moe._torch.balance", "mindspore": "hyper_parallel.moe._mindspore.moe"}


def _backend(what: str, model: Any) -> str:
    from hyper_parallel.platform import platform_of
    plat = platform_of(model)
    if plat is None or plat.name not in _IMPLEMENTATIONS or not isinstance(model, plat.module_type):
        raise TypeError(f"{what}(model): expected an nn.Module (torch) or an nn.Cell (MindSpore), got "
                        f"{type(model).__name__}")
    return plat.name


def update_expert_bias(model: Any, group: Any = None) -> Any:
    """Auxiliary-loss-free balancing on the model's backend: sum the token counts over ``group``, move the
    expert biases, reset the counts.

    torch (``hyper_parallel.moe._torch.balance.update_expert_bias``): ``model`` is any module holding MoE
    layers; returns the global loads per layer (a list of lists). MindSpore
    (``hyper_parallel.moe._mindspore.moe.update_expert_bias``): ``model`` is one ``MindSporeMoE``; returns
    its global loads (a list)."""
    name = _backend("update_expert_bias", model)
    return importlib.import_module(_IMPLEMENTATIONS[name]).update_expert_bias(model, group)


def expert_parallel(moe: Any, ep_mesh: Any) -> Any:
    """Split a MindSpore ``MindSporeMoE``'s experts over the 1-D ``ep_mesh`` and route tokens with the all-to-all
    (``hyper_parallel.moe._mindspore.moe.expert_parallel``). On torch, expert parallelism is the
    ``ExpertParallel()`` style of ``parallelize_module`` (a torch module raises a ``TypeError`` saying so)."""
    name = _backend("expert_parallel", moe)
    if name == "torch":
        raise TypeError("expert_parallel(moe): a torch module is parallelised with parallelize_module(moe, ep_mesh, "
                        "{'experts': ExpertParallel()}) (hyper_parallel.moe.ExpertParallel); expert_parallel takes "
                        "a MindSpore MoE cell (hyper_parallel.moe.MindSporeMoE)")
    return importlib.import_module(_IMPLEMENTATIONS[name]).expert_parallel(moe, ep_mesh)
