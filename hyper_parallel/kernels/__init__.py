# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Library ops that are not framework built-ins but dispatch on DTensors like them (C++ kernels live in
``csrc/``). Each op's registry name is its public path here, e.g. ``hyper_parallel.kernels.apply_rotary_emb``.

``import hyper_parallel.kernels`` imports no framework; an op loads its backend module on first use.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from hyper_parallel._lazy import lazy_exports

if TYPE_CHECKING:  # static analysers see the lazy names; nothing is imported at run time
    from hyper_parallel.kernels._torch.rotary import apply_rotary_emb, rotate_half

_LAZY = {
    "apply_rotary_emb": "hyper_parallel.kernels._torch.rotary",
    "rotate_half": "hyper_parallel.kernels._torch.rotary",
}

__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
