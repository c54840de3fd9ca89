# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Placement-invariant random numbers for the MindSpore side, on NumPy arrays (see ``hyper_parallel.core.random``).

The same counter-based arithmetic as ``hyper_parallel.platform.torch.random`` (the 32-bit hash on int64
values, Box-Muller in float64 with the polynomial ``log`` and ``cos`` built from exactly rounded operations
only), evaluated with NumPy: every operation is an IEEE-exact integer or float64 ``+ - * /``, ``sqrt``,
``frexp``, round-half-even or ``where``, so a value equals the torch implementation's bit for bit. MindSpore's
CPU kernels lack 64-bit shifts and ``frexp``; the values are made on the host and handed to MindSpore once,
when a parameter is initialised. Nothing here imports torch or MindSpore.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from hyper_parallel.core import random as _core

__all__ = ["random_bits", "global_counters", "normal_values", "shard_normal"]

_HALF_PI = 0.5 * math.pi
_LN2 = math.log(2.0)
_SQRT_HALF = math.sqrt(0.5)
_LOG_COEFS = [1.0 / (2 * k + 1) for k in range(12)]
_SIN_COEFS = [(-1.0) ** k / math.factorial(2 * k + 1) for k in range(9)]
_COS_COEFS = [(-1.0) ** k / math.factorial(2 * k) for k in range(9)]


def _mix32(x: np.ndarray) -> np.ndarray:
    """:func:`hyper_parallel.core.random.mix32` of int64 ``x`` in ``[0, 2**32)`` (products stay below 2**63)."""
    x = x ^ (x >> 16)
    x = (x * _core.MIX_C1) & _core.MASK32
    x = x ^ (x >> 15)
    x = (x * _core.MIX_C2) & _core.MASK32
    return x ^ (x >> 15)


def random_bits(seed: int, lane: int, counters: np.ndarray) -> np.ndarray:
    """32 random bits (int64 in ``[0, 2**32)``) per counter, equal to ``hash32(seed, lane, counter)``."""
    k0, k1 = _core.stream_keys(seed, lane)
    h = _mix32((counters & _core.MASK32) ^ k0)
    return _mix32(h ^ (counters >> 32) ^ k1)


def global_counters(global_shape: Sequence[int], local_shape: Sequence[int], offset: Sequence[int],
                    base: int) -> np.ndarray:
    """int64 array of ``local_shape``: ``base`` + row-major global flat index of each local element."""
    out = np.full((1,) * len(local_shape), base, dtype=np.int64)
    stride = 1
    for k in reversed(range(len(global_shape))):
        view = [1] * len(local_shape)
        view[k] = local_shape[k]
        idx = np.arange(offset[k], offset[k] + local_shape[k], dtype=np.int64)
        out = out + (idx * stride).reshape(view)
        stride *= global_shape[k]
    return np.ascontiguousarray(np.broadcast_to(out, tuple(local_shape)))


def _horner(x: np.ndarray, coefs: Sequence[float]) -> np.ndarray:
    acc = np.full_like(x, coefs[-1])
    for c in reversed(coefs[:-1]):
        acc = acc * x + c
    return acc


def _log_f64(x: np.ndarray) -> np.ndarray:
    m, e = np.frexp(x)
    low = m < _SQRT_HALF
    m = np.where(low, m * 2.0, m)
    e = e.astype(np.float64) - low.astype(np.float64)
    s = (m - 1.0) / (m + 1.0)
    return _horner(s * s, _LOG_COEFS) * s * 2.0 + e * _LN2


def _cos_2pi_f64(u: np.ndarray) -> np.ndarray:
    w = u * 4.0
    q = np.round(w)  # half to even, as torch.round
    t = (w - q) * _HALF_PI
    t2 = t * t
    sin_t, cos_t = _horner(t2, _SIN_COEFS) * t, _horner(t2, _COS_COEFS)
    quad = np.remainder(q.astype(np.int64), 4)
    return np.where(quad == 0, cos_t, np.where(quad == 1, -sin_t, np.where(quad == 2, -cos_t, sin_t)))


def normal_values(seed: int, counters: np.ndarray, mean: float = 0.0, std: float = 1.0,
                  dtype=np.float32) -> np.ndarray:
    """Normal(``mean``, ``std``) values at ``counters`` of stream ``seed`` (torch's ``_normal`` bit for bit)."""
    u1 = random_bits(seed, _core.LANE_NORMAL_RADIUS, counters).astype(np.float64) * 2.0 ** -32
    u2 = random_bits(seed, _core.LANE_NORMAL_ANGLE, counters).astype(np.float64) * 2.0 ** -32
    z = np.sqrt(_log_f64(1.0 - u1) * -2.0) * _cos_2pi_f64(u2)
    if (mean, std) != (0.0, 1.0):
        z = z * std + mean
    return z.astype(dtype)


def shard_normal(seed: int, global_shape: Sequence[int], local_shape: Sequence[int], offset: Sequence[int],
                 std: float, base: int = 0) -> np.ndarray:
    """The ``local_shape`` block at ``offset`` of a Normal(0, ``std``) tensor of ``global_shape`` drawn at stream
    ``(seed, base)``: the same values wherever the block sits (one process: the whole shape at offset 0)."""
    counters = global_counters(global_shape, local_shape, offset, base)
    return normal_values(seed, counters, 0.0, std)
