# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""MindSpore implementation of ``hyper_parallel.activation`` (PyNative).

* ``checkpoint(cell, *args)`` is ``mindspore.recompute(cell, *args, use_reentrant=False)`` and
  ``checkpoint_wrapper(cell)`` is ``cell.recompute(use_reentrant=False)`` (MindSpore's non-reentrant
  recompute on ``saved_tensors_hooks``; extra keyword arguments such as ``output_recompute`` and
  ``early_stop`` pass through). Only full recompute exists: MindSpore PyNative has no dispatch-level
  interception to build torch-style selective (per-op) policies on, so ``"op"``, op lists and policy
  functions raise :class:`ActivationBackendError`.
* ``swap``/``swap_wrapper`` move saved activations to disk through ``mindspore.saved_tensors_hooks``
  (same ``SwapManager``, records, prefetch order, fusion and disk store as torch). Only the disk
  target exists here: pinned host memory and side streams are torch-only, so ``target="host"`` and
  ``swap_tensor_wrapper`` (in-place storage resize, which MindSpore tensors do not expose) raise
  :class:`ActivationBackendError`.
* ``apply_activation_policy`` supports modes none, full, every-k (full) and swap.
"""
from hyper_parallel.activation._mindspore.impl import (ActivationBackendError, MindSporeSwapEngine,
                                                       apply_activation_policy, checkpoint, checkpoint_wrapper, swap,
                                                       swap_tensor_wrapper, swap_wrapper)

__all__ = ["ActivationBackendError", "MindSporeSwapEngine", "apply_activation_policy", "checkpoint",
           "checkpoint_wrapper", "swap", "swap_tensor_wrapper", "swap_wrapper"]
