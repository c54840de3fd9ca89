# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Rotary position embedding as a torch-function-aware op (registered as
``hyper_parallel.kernels.apply_rotary_emb``), so DTensor inputs go through the op registry."""
from __future__ import annotations

import torch
from torch.overrides import handle_torch_function, has_torch_function


def rotate_half(x):
    """``[-x2, x1]`` for the two halves of the last dim."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rotary_emb(x, cos, sin):
    """``x * cos + rotate_half(x) * sin`` (HF Llama convention; ``cos``/``sin`` broadcast to ``x``)."""
    if has_torch_function((x, cos, sin)):
        return handle_torch_function(apply_rotary_emb, (x, cos, sin), x, cos, sin)
    return x * cos + rotate_half(x) * sin
