# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Library ops that are not torch built-ins but dispatch on DTensors like them."""
from hyper_parallel.ops.rotary import apply_rotary_emb, rotate_half

__all__ = ["apply_rotary_emb", "rotate_half"]
