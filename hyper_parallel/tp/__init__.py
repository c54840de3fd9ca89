# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Tensor parallelism: styles and ``parallelize_module`` (torch modules and MindSpore cells), loss parallel
(both backends). ``import hyper_parallel.tp`` imports no framework."""
from __future__ import annotations

from typing import TYPE_CHECKING

from hyper_parallel._lazy import lazy_exports
from hyper_parallel.tp.api import parallelize_module
from hyper_parallel.tp.style import (ColwiseParallel, ParallelStyle, PrepareModuleInput, PrepareModuleInputOutput,
                                     PrepareModuleOutput, RowwiseParallel, SequenceParallel)

if TYPE_CHECKING:  # static analysers see the lazy names; nothing is imported at run time
    from hyper_parallel.tp._mindspore.styles import param_dtensor
    from hyper_parallel.tp.loss import loss_parallel, vocab_parallel_cross_entropy

_LAZY = {
    "loss_parallel": "hyper_parallel.tp.loss",  # torch and/or MindSpore
    "vocab_parallel_cross_entropy": "hyper_parallel.tp.loss",  # by the logits
    "param_dtensor": "hyper_parallel.tp._mindspore.styles",
}

__all__ = ["parallelize_module", "ColwiseParallel", "ParallelStyle", "PrepareModuleInput", "PrepareModuleInputOutput",
           "PrepareModuleOutput", "RowwiseParallel", "SequenceParallel", *sorted(_LAZY)]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
