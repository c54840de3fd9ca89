# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Declarative parallelism: shard_module (torch modules and MindSpore cells); custom_shard, DFunction,
parallelize_value_and_grad (torch). ``import hyper_parallel.shard`` imports no framework."""
from __future__ import annotations

from typing import TYPE_CHECKING

from hyper_parallel._lazy import lazy_exports
from hyper_parallel.shard.api import shard_module

if TYPE_CHECKING:  # static analysers see the lazy names; nothing is imported at run time
    from hyper_parallel.shard._torch.functions import DFunction, custom_shard, parallelize_value_and_grad

_LAZY = {
    "custom_shard": "hyper_parallel.shard._torch.functions",
    "DFunction": "hyper_parallel.shard._torch.functions",
    "parallelize_value_and_grad": "hyper_parallel.shard._torch.functions",
}

__all__ = ["shard_module", *sorted(_LAZY)]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
