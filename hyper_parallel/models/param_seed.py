# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The RNG stream of each parameter at initialisation (pure Python, shared by both backends' ``init_parameters``)."""
from __future__ import annotations

import zlib

from hyper_parallel.core.random import MASK64

__all__ = ["parameter_seed"]


def parameter_seed(seed: int, name: str) -> int:
    """The RNG stream seed of parameter ``name`` (independent of which parameters a rank holds)."""
    return ((seed & MASK64) * 0x9E3779B97F4A7C15 + zlib.crc32(name.encode())) & MASK64
