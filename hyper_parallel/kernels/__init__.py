# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Library ops that are not framework built-ins but dispatch on DTensors like them. Each op's registry
name is its public path here, e.g. ``hyper_parallel.kernels.rms_norm``.

Fused ops (C++ CPU kernels in ``csrc/``, registered as ``torch.ops.hyper_parallel.*``, built just in time
and cached; pure-PyTorch references when no compiler is available): ``rms_norm``, ``apply_rotary_emb``,
``swiglu``, ``moe_permute`` / ``moe_unpermute``, ``sinkhorn``. Distributed (MC2) ops that overlap the
collective with chunked matmuls: ``all_gather_matmul``, ``matmul_reduce_scatter``.

``import hyper_parallel.kernels`` imports no framework; an op loads its backend module on first use.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from hyper_parallel._lazy import lazy_exports

if TYPE_CHECKING:  # static analysers see the lazy names; nothing is imported at run time
    from hyper_parallel.kernels._torch.build import build_info
    from hyper_parallel.kernels._torch.mc2 import all_gather_matmul, matmul_reduce_scatter
    from hyper_parallel.kernels._torch.fused import moe_permute, moe_unpermute, rms_norm, sinkhorn, swiglu
    from hyper_parallel.kernels._torch.rotary import apply_rotary_emb, rotate_half

_LAZY = {
    "apply_rotary_emb": "hyper_parallel.kernels._torch.rotary",
    "rotate_half": "hyper_parallel.kernels._torch.rotary",
    "rms_norm": "hyper_parallel.kernels._torch.fused",
    "swiglu": "hyper_parallel.kernels._torch.fused",
    "moe_permute": "hyper_parallel.kernels._torch.fused",
    "moe_unpermute": "hyper_parallel.kernels._torch.fused",
    "sinkhorn": "hyper_parallel.kernels._torch.fused",
    "build_info": "hyper_parallel.kernels._torch.build",
    "all_gather_matmul": "hyper_parallel.kernels._torch.mc2",
    "matmul_reduce_scatter": "hyper_parallel.kernels._torch.mc2",
}

__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
