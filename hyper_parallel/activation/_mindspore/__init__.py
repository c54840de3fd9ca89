# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""MindSpore implementation of ``hyper_parallel.activation`` (PyNative).

* ``checkpoint(cell, *args)`` is ``mindspore.recompute(cell, *args, use_reentrant=False)`` and
  ``checkpoint_wrapper(cell)`` is ``cell.recompute(use_reentrant=False)`` (MindSpore's non-reentrant
  recompute on ``saved_tensors_hooks``; extra keyword arguments such as ``output_recompute`` and
  ``early_stop`` pass through). Selective policies (``"op"``, op lists, ``OpPolicy``: the same
  ``CheckpointPolicy`` names) are decided per block of a cell (``Cell.recompute()`` on the blocks whose op the
  policy does not keep: ``schedule.py``), since MindSpore PyNative has no per-op interception; policy
  functions raise :class:`ActivationBackendError`. ``apply_recompute_schedule(model, schedule)`` gives each
  layer its own decision (the independent recompute schedule).
* ``swap``/``swap_wrapper`` move saved activations to disk through ``mindspore.saved_tensors_hooks``
  (same ``SwapManager``, records, prefetch order, fusion and disk store as torch). Only the disk
  target exists here: pinned host memory and side streams are torch-only, so ``target="host"`` and
  ``swap_tensor_wrapper`` (in-place storage resize, which MindSpore tensors do not expose) raise
  :class:`ActivationBackendError`.
* ``apply_activation_policy`` supports modes none, full, selective-op, every-k and swap.
"""
from hyper_parallel.activation._mindspore.impl import (ActivationBackendError, MindSporeSwapEngine,
                                                       apply_activation_policy, checkpoint, checkpoint_wrapper, swap,
                                                       swap_tensor_wrapper, swap_wrapper)
from hyper_parallel.activation._mindspore.schedule import (apply_recompute_schedule, block_kind, end_of_forward,
                                                           saved_activation_bytes)

__all__ = ["ActivationBackendError", "MindSporeSwapEngine", "apply_activation_policy", "apply_recompute_schedule",
           "block_kind", "checkpoint", "checkpoint_wrapper", "end_of_forward", "saved_activation_bytes", "swap",
           "swap_tensor_wrapper", "swap_wrapper"]
