# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""What LlamaFactory imports when a run sets ``use_hyper_parallel: true`` (``docs/integration.md``).

LlamaFactory 0.9.5 (``llamafactory/train/hyper_parallel/workflow.py``) imports ``HyperParallelArguments``
(``from_finetuning_args``) and ``HyperParallelTrainer`` (its ``CustomSeq2SeqTrainer`` on our ``fully_shard`` /
HSDP, TP and activation policy). Its main branch keeps the trainer on its side and imports the building blocks:
``HSDPModule``, ``fsdp2_prepare_model``, ``hsdp_sync_stream``, ``clip_grad_norm_``, ``save_hsdp_checkpoint``,
``load_hsdp_model``, ``load_hsdp_optimizer_and_scheduler``, ``export_to_hf_format``,
``wrap_optimizer_with_skip_dtensor_dispatch`` and ``hyper_parallel.integration.llamafactory.context_parallel``.
All of them are the machinery of ``hyper_parallel.integration.transformers``. Importing this package imports no
framework.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from hyper_parallel._lazy import lazy_exports
from hyper_parallel.integration.transformers.args import HyperParallelArguments

if TYPE_CHECKING:  # static analysers see the lazy names; nothing is imported at run time
    from hyper_parallel.integration.llamafactory._torch.trainer import HyperParallelTrainer, fsdp2_prepare_model
    from hyper_parallel.integration.transformers._torch.checkpoint import (export_to_hf_format, load_hsdp_model,
                                                                           load_hsdp_optimizer_and_scheduler,
                                                                           save_hsdp_checkpoint)
    from hyper_parallel.integration.transformers._torch.prepare import (HSDPModule, clip_grad_norm_,
                                                                        hsdp_sync_stream,
                                                                        wrap_optimizer_with_skip_dtensor_dispatch)

_PREPARE = "hyper_parallel.integration.transformers._torch.prepare"
_CKPT = "hyper_parallel.integration.transformers._torch.checkpoint"
_LF = "hyper_parallel.integration.llamafactory._torch.trainer"
_LAZY = {
    "HyperParallelTrainer": _LF,
    "fsdp2_prepare_model": _LF,
    "HSDPModule": _PREPARE,
    "clip_grad_norm_": _PREPARE,
    "hsdp_sync_stream": _PREPARE,
    "wrap_optimizer_with_skip_dtensor_dispatch": _PREPARE,
    "export_to_hf_format": _CKPT,
    "load_hsdp_model": _CKPT,
    "load_hsdp_optimizer_and_scheduler": _CKPT,
    "save_hsdp_checkpoint": _CKPT,
}

__all__ = ["HyperParallelArguments", *sorted(_LAZY)]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
