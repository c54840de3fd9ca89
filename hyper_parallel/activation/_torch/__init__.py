# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""torch implementation of ``hyper_parallel.activation`` (the names ``api.py`` dispatches to)."""
from hyper_parallel.activation._torch.apply import apply_activation_policy
from hyper_parallel.activation._torch.checkpoint import checkpoint, checkpoint_wrapper, selective_checkpoint_contexts
from hyper_parallel.activation._torch.swap import (SwapTensor, TorchSwapEngine, default_manager, swap,
                                                   swap_tensor_wrapper, swap_wrapper)

__all__ = ["apply_activation_policy", "checkpoint", "checkpoint_wrapper", "selective_checkpoint_contexts",
           "SwapTensor", "TorchSwapEngine", "default_manager", "swap", "swap_tensor_wrapper", "swap_wrapper"]
