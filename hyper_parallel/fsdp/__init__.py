# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Fully sharded data parallel (FSDP / HSDP) with FSDP2 semantics.

``fully_shard(module, mesh=..., reshard_after_forward=..., mp_policy=..., offload_policy=...)``
turns the module's parameters into ``DTensor`` s sharded ``Shard(0)`` over the data-parallel mesh
dim. Each unit keeps one flat padded buffer of its local shards per dtype, so unsharding is one
all-gather and gradient reduction one reduce-scatter per unit. See ``docs/fsdp.md``.

The policies and the layout math are pure Python; everything that needs torch loads on first use.
"""
from __future__ import annotations

from hyper_parallel._lazy import lazy_exports
from hyper_parallel.fsdp.api import CPUOffloadPolicy, FlatLayout, MixedPrecisionPolicy, OffloadPolicy

_LAZY = {
    "fully_shard": "hyper_parallel.fsdp.entry",  # torch or MindSpore, by the module
    "FSDPModule": "hyper_parallel.fsdp._torch.fully_shard",
    "clip_grad_norm_": "hyper_parallel.optim._torch.clip",  # the general one (any mix of gradients)
    "get_model_state_dict": "hyper_parallel.fsdp._torch.state_dict",
    "set_model_state_dict": "hyper_parallel.fsdp._torch.state_dict",
    "get_optimizer_state_dict": "hyper_parallel.fsdp._torch.state_dict",
    "set_optimizer_state_dict": "hyper_parallel.fsdp._torch.state_dict",
}

__all__ = ["CPUOffloadPolicy", "FlatLayout", "MixedPrecisionPolicy", "OffloadPolicy", *sorted(_LAZY)]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
