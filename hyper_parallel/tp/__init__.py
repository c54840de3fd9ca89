# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Tensor parallelism: styles, ``parallelize_module`` and loss parallel."""
from hyper_parallel.tp.api import parallelize_module
from hyper_parallel.tp.loss import loss_parallel, vocab_parallel_cross_entropy
from hyper_parallel.tp.style import (ColwiseParallel, ParallelStyle, PrepareModuleInput, PrepareModuleInputOutput,
                                     PrepareModuleOutput, RowwiseParallel, SequenceParallel)

__all__ = ["parallelize_module", "loss_parallel", "vocab_parallel_cross_entropy", "ColwiseParallel",
           "ParallelStyle", "PrepareModuleInput", "PrepareModuleInputOutput", "PrepareModuleOutput",
           "RowwiseParallel", "SequenceParallel"]
