# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Auxiliary-loss-free load balancing: the expert-bias update as an optimizer pre-step hook.

Before each ``optimizer.step()`` the hook stacks every MoE layer's ``tokens_per_expert`` (this
rank's routed slots since the last step), sums them over ``group`` with ONE all-reduce (int64,
exact), and, for layers with ``load_balance="expert_bias"``, adds
``hyper_parallel.moe.balance.bias_update(loads, rate)`` to ``expert_bias``. The counts are integers
and the rule runs in Python floats, so every rank computes bit-identical biases. The counts are then
reset; the step's global loads stay readable as ``moe.global_tokens_per_expert``.
"""
from __future__ import annotations

from typing import List, Optional

import torch

from hyper_parallel.moe.balance import bias_update
from hyper_parallel.moe._torch.moe import MoE

__all__ = ["register_moe_load_balancing_hook", "update_expert_bias"]


def _moe_layers(model) -> List[MoE]:
    layers = [m for m in model.modules() if isinstance(m, MoE)]
    if not layers:
        raise ValueError(f"moe load balancing: {type(model).__name__} contains no MoE layer")
    return layers


def update_expert_bias(model, group=None) -> List[List[int]]:
    """Sum every MoE layer's ``tokens_per_expert`` over ``group`` (default: the world when a process
    group exists; pass the group of the ranks that hold distinct tokens), move the expert biases and
    reset the counts. Returns the global loads per layer."""
    layers = _moe_layers(model)
    counts = torch.cat([m.tokens_per_expert.reshape(-1) for m in layers])
    from hyper_parallel.platform import get_platform
    plat = get_platform("torch")
    if plat.is_initialized():
        counts = plat.all_reduce(counts, "sum", group)
    loads = counts.tolist()
    out, offset = [], 0
    for m in layers:
        n = m.config.num_experts
        layer_loads = loads[offset:offset + n]
        offset += n
        m.global_tokens_per_expert = tuple(layer_loads)
        if m.config.uses_expert_bias and sum(layer_loads):
            delta = bias_update(layer_loads, m.config.bias_update_rate)
            with torch.no_grad():
                m.expert_bias.add_(torch.tensor(delta, dtype=m.expert_bias.dtype, device=m.expert_bias.device))
        with torch.no_grad():
            m.tokens_per_expert.zero_()
        out.append(layer_loads)
    return out


def register_moe_load_balancing_hook(model, optimizer, group: Optional[object] = None):
    """Run :func:`update_expert_bias` on ``model`` before every ``optimizer.step()``; returns the hook
    handle (``.remove()`` to detach)."""
    _moe_layers(model)
    if not hasattr(optimizer, "register_step_pre_hook"):
        raise TypeError(f"register_moe_load_balancing_hook(optimizer): expected a torch.optim.Optimizer, got "
                        f"{type(optimizer).__name__}")

    def hook(_opt, _args, _kwargs):
        update_expert_bias(model, group)

    return optimizer.register_step_pre_hook(hook)
