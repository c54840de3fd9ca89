# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Mixture of experts and expert parallelism.

``MoE(MoEConfig(...))`` routes each token to its top-k experts (``TokenChoiceTopKRouter``), runs the
routed experts as grouped matmuls (``GroupedExperts``) next to optional shared experts, and balances
the load by an expert bias or an auxiliary loss (``MoEAuxLossAutoScaler``). The token dispatcher is
its own object holding per-call state in a ``DispatchContext``. ``ExpertParallel()``,
``ExpertTensorParallel()`` and ``TensorParallel()`` are styles for ``parallelize_module``; EP uses a
dropless uneven all-to-all. See ``docs/moe.md``.

MindSpore: ``MindSporeMoE``, ``MindSporeTokenChoiceTopKRouter``, ``MindSporeGroupedExperts`` and
``MindSporeFeedForward`` are the ``nn.Cell`` layers (``moe/_mindspore``); ``expert_parallel(moe, ep_mesh)``
splits a MindSpore MoE's experts, and ``update_expert_bias(model)`` runs on the model's backend (chosen from
its class, as ``hyper_parallel.fully_shard`` does).

The configuration, router math, dispatch planning and balancing rules are pure Python
(``api``, ``routing``, ``planning``, ``balance``); names that need torch or MindSpore load on first use.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from hyper_parallel._lazy import lazy_exports

from hyper_parallel.moe.api import MoEConfig, check_expert_parallel, expert_fsdp_degree

if TYPE_CHECKING:  # static analysers see the lazy names; nothing is imported at run time
    from hyper_parallel.moe._mindspore import (MindSporeFeedForward, MindSporeGroupedExperts, MindSporeMoE,
                                               MindSporeTokenChoiceTopKRouter)
    from hyper_parallel.moe._torch.balance import register_moe_load_balancing_hook
    from hyper_parallel.moe.entry import expert_parallel, update_expert_bias
    from hyper_parallel.moe._torch.dispatcher import (AllGatherTokenDispatcher, AllToAllTokenDispatcher,
                                                      DispatchContext, LocalTokenDispatcher, TokenDispatcher)
    from hyper_parallel.moe._torch.experts import FeedForward, GroupedExperts
    from hyper_parallel.moe._torch.moe import MoE, MoEAuxLossAutoScaler
    from hyper_parallel.moe._torch.router import RouterOutput, TokenChoiceTopKRouter
    from hyper_parallel.moe._torch.styles import (ExpertParallel, ExpertTensorParallel, TensorParallel,
                                                  fully_shard_experts, init_expert_mesh)

_T = "hyper_parallel.moe._torch."
_LAZY = {
    "MoE": _T + "moe",
    "MoEAuxLossAutoScaler": _T + "moe",
    "GroupedExperts": _T + "experts",
    "FeedForward": _T + "experts",
    "TokenChoiceTopKRouter": _T + "router",
    "RouterOutput": _T + "router",
    "DispatchContext": _T + "dispatcher",
    "TokenDispatcher": _T + "dispatcher",
    "LocalTokenDispatcher": _T + "dispatcher",
    "AllToAllTokenDispatcher": _T + "dispatcher",
    "AllGatherTokenDispatcher": _T + "dispatcher",
    "ExpertParallel": _T + "styles",
    "ExpertTensorParallel": _T + "styles",
    "TensorParallel": _T + "styles",
    "init_expert_mesh": _T + "styles",
    "fully_shard_experts": _T + "styles",
    "register_moe_load_balancing_hook": _T + "balance",
    "update_expert_bias": "hyper_parallel.moe.entry",  # torch or MindSpore, by the model
    "expert_parallel": "hyper_parallel.moe.entry",  # MindSpore cells
    "MindSporeMoE": "hyper_parallel.moe._mindspore",
    "MindSporeTokenChoiceTopKRouter": "hyper_parallel.moe._mindspore",
    "MindSporeGroupedExperts": "hyper_parallel.moe._mindspore",
    "MindSporeFeedForward": "hyper_parallel.moe._mindspore",
}

__all__ = ["MoEConfig", "check_expert_parallel", "expert_fsdp_degree", *sorted(_LAZY)]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
