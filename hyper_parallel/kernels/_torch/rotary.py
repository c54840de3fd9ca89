# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Rotary position embedding as a torch-function-aware op (registered as
``hyper_parallel.kernels.apply_rotary_emb``), so DTensor inputs go through the op registry. On CPU it
runs the fused C++ kernel ``torch.ops.hyper_parallel.rotary`` when built, else the reference."""
from __future__ import annotations

import torch
from torch.overrides import handle_torch_function, has_torch_function

from hyper_parallel.kernels._torch.fused import use_kernels
from hyper_parallel.kernels._torch.reference import rotary_ref, rotate_half

__all__ = ["apply_rotary_emb", "rotate_half"]


def apply_rotary_emb(x, cos, sin):
    """``x * cos + rotate_half(x) * sin`` (HF Llama convention; ``cos``/``sin`` broadcast to ``x``)."""
    if has_torch_function((x, cos, sin)):
        return handle_torch_function(apply_rotary_emb, (x, cos, sin), x, cos, sin)
    if (x.dtype == cos.dtype == sin.dtype and x.dim() >= cos.dim() and x.dim() >= sin.dim()
            and x.shape[-1] % 2 == 0 and cos.shape[-1] == sin.shape[-1] == x.shape[-1]
            and torch.broadcast_shapes(x.shape, cos.shape, sin.shape) == x.shape and use_kernels(x, cos, sin)):
        return torch.ops.hyper_parallel.rotary(x, cos, sin, False)
    return rotary_ref(x, cos, sin)
