# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Activation memory: selective checkpointing with policies, activation swap with prefetch, and both.

* ``checkpoint(fn, *args, policy=...)`` / ``checkpoint_wrapper(module, policy)`` — recompute in
  backward what the policy does not keep (torch: non-reentrant checkpoint + our selective modes,
  which keep our collectives; MindSpore: ``mindspore.recompute``).
* ``swap`` / ``swap_wrapper`` / ``swap_tensor_wrapper`` with a ``SwapManager`` — move saved
  activations to pinned host memory (accelerators) or to disk (CPU) and bring them back one layer
  ahead of backward.
* ``CheckpointPolicy``, ``save_ops``, ``op_policy``, ``full_policy``, ``every_k_layers`` — policies.
* ``apply_activation_policy(model, config)`` — one config block (none | full | selective-op |
  every-k | swap | auto) applied to a model's layers.

Policies, the config, the auto planner, the swap schedule and the disk store are pure Python;
backend code loads on first use. See ``docs/activation.md``.
"""
from __future__ import annotations

from hyper_parallel._lazy import lazy_exports

from hyper_parallel.activation.api import (ActivationPlan, apply_activation_policy, checkpoint, checkpoint_wrapper,
                                           swap, swap_tensor_wrapper, swap_wrapper)
from hyper_parallel.activation.auto import AutoBudgetError, AutoPlan, plan_auto
from hyper_parallel.activation.config import (ActivationConfig, ActivationConfigError, SwapConfig,
                                              parse_activation_config)
from hyper_parallel.activation.manager import SwapError, SwapManager
from hyper_parallel.activation.policy import (CheckpointPolicy, LayerSelection, OpPolicy, PolicyError, every_k_layers,
                                              full_policy, op_policy, save_ops)

_LAZY = {
    "selective_checkpoint_contexts": "hyper_parallel.activation._torch.checkpoint",
    "SwapTensor": "hyper_parallel.activation._torch.swap",
    "swap_pipeline_schedule": "hyper_parallel.activation._torch.pipeline",
}

__all__ = ["ActivationConfig", "ActivationConfigError", "ActivationPlan", "AutoBudgetError", "AutoPlan",
           "CheckpointPolicy", "LayerSelection", "OpPolicy", "PolicyError", "SwapConfig", "SwapError", "SwapManager",
           "apply_activation_policy", "checkpoint", "checkpoint_wrapper", "every_k_layers", "full_policy",
           "op_policy", "parse_activation_config", "plan_auto", "save_ops", "swap", "swap_tensor_wrapper",
           "swap_wrapper", *sorted(_LAZY)]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
