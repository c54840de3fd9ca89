# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``transformers.Trainer`` on hyper_parallel: ``fully_shard`` / HSDP, tensor parallel and selective recompute /
swap applied to a ``transformers`` model (see ``docs/integration.md``).

``HyperParallelArguments`` (pure) is the strategy; ``HyperParallelTrainer`` (a ``transformers.Trainer``) or
``HyperParallelTrainerMixin`` (for any Trainer subclass) trains with it under ``torchrun``; ``prepare_model``
parallelises a model by hand. ``import hyper_parallel.integration.transformers`` imports neither torch nor
transformers (the ``hf`` extra installs transformers).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from hyper_parallel._lazy import lazy_exports
from hyper_parallel.integration.transformers.args import ACTIVATION_MODES, HyperParallelArguments

if TYPE_CHECKING:  # static analysers see the lazy names; nothing is imported at run time
    from hyper_parallel.integration.transformers._torch.checkpoint import (export_to_hf_format, load_hsdp_model,
                                                                           load_hsdp_optimizer_and_scheduler,
                                                                           save_hsdp_checkpoint)
    from hyper_parallel.integration.transformers._torch.prepare import (HSDPModule, clip_grad_norm_, hf_tp_plan,
                                                                        hsdp_sync_stream, parallel_dims,
                                                                        prepare_model,
                                                                        wrap_optimizer_with_skip_dtensor_dispatch)
    from hyper_parallel.integration.transformers._torch.trainer import (HyperParallelTrainer,
                                                                        HyperParallelTrainerMixin,
                                                                        RepeatedBatchSampler)

_PREPARE = "hyper_parallel.integration.transformers._torch.prepare"
_CKPT = "hyper_parallel.integration.transformers._torch.checkpoint"
_TRAINER = "hyper_parallel.integration.transformers._torch.trainer"
_LAZY = {
    "HSDPModule": _PREPARE,
    "clip_grad_norm_": _PREPARE,
    "hf_tp_plan": _PREPARE,
    "hsdp_sync_stream": _PREPARE,
    "parallel_dims": _PREPARE,
    "prepare_model": _PREPARE,
    "wrap_optimizer_with_skip_dtensor_dispatch": _PREPARE,
    "export_to_hf_format": _CKPT,
    "load_hsdp_model": _CKPT,
    "load_hsdp_optimizer_and_scheduler": _CKPT,
    "save_hsdp_checkpoint": _CKPT,
    "HyperParallelTrainer": _TRAINER,
    "HyperParallelTrainerMixin": _TRAINER,
    "RepeatedBatchSampler": _TRAINER,
}

__all__ = ["ACTIVATION_MODES", "HyperParallelArguments", *sorted(_LAZY)]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
