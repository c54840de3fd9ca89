# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Placement-invariant random numbers for torch DTensors (see ``hyper_parallel.core.random``).

Each rank builds the int64 grid of *global* flat indices of its own shard, adds the stream offset
reserved for the op, and hashes ``(seed, lane, counter)`` with the same 32-bit arithmetic as
:func:`hyper_parallel.core.random.hash32` (multipliers below 2^31 on 32-bit values: every product stays
below 2^63). Distributions are made from those bits with exactly rounded arithmetic only (integer ops,
``+ - * /``, ``sqrt``, ``frexp``, ``round``, ``where``): no library ``log``/``cos``, whose vectorised
and scalar code paths may differ in the last bit. The value of a global element therefore never
depends on where it sits in a local shard, so every layout yields bit-identical global tensors.

* uniform ``[0, 1)``: the top ``min(mantissa bits + 1, 32)`` bits, scaled (exact in the dtype);
* normal: Box-Muller over lanes 1 and 2 in float64 with polynomial ``log`` and ``cos``, then cast;
* bernoulli / dropout masks: 32-bit uniforms compared with ``p`` (as integers against ``ceil(p 2^32)``);
* exponential ``-log(1 - u) / lambda``, geometric ``ceil(log(1 - u) / log(1 - p))``, cauchy
  ``median + sigma * tan(pi (u - 1/2))``, log-normal ``exp(normal)`` (polynomial ``exp``);
* integers in ``[low, high)``: ``low + floor(u * (high - low))`` with a 53-bit ``u`` (lanes 0 and 1).

The factories ``hyper_parallel.rand`` / ``randn`` (``platform/torch/factories.py``) build DTensors from a
global shape, a mesh and placements with :func:`shard_values`, generating only the local shard.
"""
from __future__ import annotations

import math
from typing import Any, Sequence, Tuple

import torch

from hyper_parallel.core import random as _core
from hyper_parallel.core.placement import Partial
from hyper_parallel.core.spec import DTensorSpec

__all__ = ["random_bits", "global_counters", "uniform_from_bits", "shard_values", "keep_mask",
           "reference_values", "holds_values", "exponential_from_uniform"]

_TWO_PI = 2.0 * math.pi
_HALF_PI = 0.5 * math.pi
_LN2 = math.log(2.0)
_SQRT_HALF = math.sqrt(0.5)
# atanh series: log(m) = 2 s sum_k s^(2k) / (2k+1), |s| <= 0.1716 on [sqrt(1/2), sqrt(2)): 12 terms < 1e-17
_LOG_COEFS = [1.0 / (2 * k + 1) for k in range(12)]
# sin t = t sum (-1)^k t^2k/(2k+1)!, cos t = sum (-1)^k t^2k/(2k)!, |t| <= pi/4: 9 terms < 1e-16
_SIN_COEFS = [(-1.0) ** k / math.factorial(2 * k + 1) for k in range(9)]
_DEFAULT_PARAMS = {"uniform": (0.0, 1.0), "normal": (0.0, 1.0), "bernoulli": (0.5,), "exponential": (1.0,),
                   "randint": (0, 2), "log_normal": (1.0, 2.0), "geometric": (0.5,), "cauchy": (0.0, 1.0)}
# exp(r) = sum r^n / n!, |r| <= ln(2) / 2: 18 terms < 1e-20
_EXP_COEFS = [1.0 / math.factorial(n) for n in range(18)]
_LN2_HI = float.fromhex("0x1.62e42fee00000p-1")  # ln 2 split: k * _LN2_HI is exact for |k| < 2**11
_LN2_LO = math.log(2.0) - _LN2_HI
_COS_COEFS = [(-1.0) ** k / math.factorial(2 * k) for k in range(9)]


# ---------------------------------------------------------------------- bits
def _mix32_(x: torch.Tensor) -> torch.Tensor:
    """In place: :func:`hyper_parallel.core.random.mix32` of int64 ``x`` in ``[0, 2**32)``.

    ``x < 2**32`` and both multipliers ``< 2**31``: every product is below ``2**63``.
    """
    x.bitwise_xor_(x >> 16).mul_(_core.MIX_C1).bitwise_and_(_core.MASK32)
    x.bitwise_xor_(x >> 15).mul_(_core.MIX_C2).bitwise_and_(_core.MASK32)
    return x.bitwise_xor_(x >> 15)


def random_bits(seed: int, lane: int, counters: torch.Tensor) -> torch.Tensor:
    """32 random bits (int64 in ``[0, 2**32)``) per counter, equal to ``hash32(seed, lane, counter)``."""
    k0, k1 = _core.stream_keys(seed, lane)
    h = _mix32_(counters.bitwise_and(_core.MASK32).bitwise_xor_(k0))
    return _mix32_(h.bitwise_xor_(counters >> 32).bitwise_xor_(k1))


def global_counters(global_shape: Sequence[int], local_shape: Sequence[int], offset: Sequence[int], base: int,
                    device: Any = None) -> torch.Tensor:
    """int64 tensor of ``local_shape``: ``base`` + row-major global flat index of each local element."""
    out = torch.full((1,) * len(local_shape), base, dtype=torch.int64, device=device)
    stride = 1
    for k in reversed(range(len(global_shape))):
        view = [1] * len(local_shape)
        view[k] = local_shape[k]
        idx = torch.arange(offset[k], offset[k] + local_shape[k], dtype=torch.int64, device=device)
        out = out + (idx * stride).view(view)
        stride *= global_shape[k]
    return out.expand(tuple(local_shape)).contiguous()


def uniform_from_bits(bits: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Uniform ``[0, 1)`` in ``dtype`` from 32-bit ints, exact: top ``min(mantissa + 1, 32)`` bits."""
    keep = min(round(-math.log2(torch.finfo(dtype).eps)) + 1, 32)  # mantissa bits + 1
    return (bits >> (32 - keep)).to(dtype).mul_(2.0 ** -keep)


def _threshold(p: float) -> int:
    """``ceil(p * 2**32)``: for 32-bit ``bits``, ``bits < t`` exactly when ``bits / 2**32 < p``."""
    return math.ceil(float(p) * 2.0 ** 32)


def _u64(bits: torch.Tensor) -> torch.Tensor:
    """32-bit uniforms in ``[0, 1)`` as float64 (exact)."""
    return bits.to(torch.float64).mul_(2.0 ** -32)


def _u53(seed: int, counters: torch.Tensor) -> torch.Tensor:
    """53-bit uniforms in ``[0, 1)`` as float64 (exact) from lanes 0 and 1 (for integer ranges)."""
    hi = random_bits(seed, _core.LANE_UNIFORM, counters) >> 11  # 21 bits
    lo = random_bits(seed, _core.LANE_NORMAL_RADIUS, counters)
    return hi.bitwise_left_shift_(32).bitwise_or_(lo).to(torch.float64).mul_(2.0 ** -53)


# ---------------------------------------------------------------------- exactly rounded elementary functions
def _horner(x: torch.Tensor, coefs: Sequence[float]) -> torch.Tensor:
    acc = torch.full_like(x, coefs[-1])
    for c in reversed(coefs[:-1]):
        acc = acc.mul_(x).add_(c)
    return acc


def _log_f64(x: torch.Tensor) -> torch.Tensor:
    """Natural log of positive float64 values from exactly rounded operations only."""
    m, e = torch.frexp(x)
    low = m < _SQRT_HALF
    m = torch.where(low, m * 2.0, m)
    e = e.to(torch.float64) - low.to(torch.float64)
    s = (m - 1.0) / (m + 1.0)
    return _horner(s * s, _LOG_COEFS).mul_(s).mul_(2.0).add_(e * _LN2)


def _cos_2pi_f64(u: torch.Tensor) -> torch.Tensor:
    """``cos(2 pi u)`` for float64 ``u`` in ``[0, 1)``: exact quadrant reduction, then Taylor polynomials."""
    q, sin_t, cos_t = _sin_cos_quarter(u * 4.0)
    quad = q.to(torch.int64).remainder_(4)
    return torch.where(quad == 0, cos_t, torch.where(quad == 1, -sin_t, torch.where(quad == 2, -cos_t, sin_t)))


def _sin_cos_quarter(w: torch.Tensor):
    """``(q, sin t, cos t)`` with ``w = q + f``, ``q = round(w)``, ``t = f * pi / 2`` in ``[-pi/4, pi/4]``."""
    q = torch.round(w)
    t = (w - q).mul_(_HALF_PI)
    t2 = t * t
    return q, _horner(t2, _SIN_COEFS).mul_(t), _horner(t2, _COS_COEFS)


def _tan_half_pi_f64(w: torch.Tensor) -> torch.Tensor:
    """``tan(w * pi / 2)`` for float64 ``w`` in ``[-1, 1)`` (``-inf`` at ``w = -1``)."""
    q, sin_t, cos_t = _sin_cos_quarter(w)
    return torch.where(q == 0, sin_t / cos_t, -cos_t / sin_t)  # tan(t +- pi/2) = -cot t


def _exp_f64(x: torch.Tensor) -> torch.Tensor:
    """``exp`` of float64 values: ``2**k * exp(r)``, ``r = x - k ln 2``, Taylor polynomial, exact scaling
    (``k`` clamped to the normal exponent range: results beyond ``2**1023`` or below ``2**-1022`` saturate)."""
    k = torch.round(x * (1.0 / _LN2)).clamp_(-1022.0, 1023.0)
    r = (x - k * _LN2_HI).sub_(k * _LN2_LO)
    scale = (k.to(torch.int64) + 1023).bitwise_left_shift_(52).view(torch.float64)
    return _horner(r, _EXP_COEFS).mul_(scale)


def _standard_normal_f64(seed: int, counters: torch.Tensor) -> torch.Tensor:
    u1 = _u64(random_bits(seed, _core.LANE_NORMAL_RADIUS, counters))
    u2 = _u64(random_bits(seed, _core.LANE_NORMAL_ANGLE, counters))
    radius = _log_f64(1.0 - u1).mul_(-2.0).sqrt_()  # 1 - u1 in (0, 1]
    return radius.mul_(_cos_2pi_f64(u2))


# ---------------------------------------------------------------------- distributions
def _uniform(seed, counters, dtype, params):
    low, high = params
    u = uniform_from_bits(random_bits(seed, _core.LANE_UNIFORM, counters), dtype)
    return u if (low, high) == (0.0, 1.0) else u.mul_(high - low).add_(low)


def _normal(seed, counters, dtype, params):
    mean, std = params
    z = _standard_normal_f64(seed, counters)
    if (mean, std) != (0.0, 1.0):
        z = z.mul_(std).add_(mean)
    return z.to(dtype)


def _log_normal(seed, counters, dtype, params):
    mean, std = params
    return _exp_f64(_standard_normal_f64(seed, counters).mul_(std).add_(mean)).to(dtype)


def exponential_from_uniform(u: torch.Tensor) -> torch.Tensor:
    """Standard exponential values ``-log(1 - u)`` from float64 uniforms in ``[0, 1)`` (exactly rounded ops)."""
    return _log_f64(1.0 - u).neg_()


def _exponential(seed, counters, dtype, params):
    (lambd,) = params
    if not lambd > 0:
        raise ValueError(f"exponential_ expects lambd > 0.0, but found lambd={lambd}")
    u = _u64(random_bits(seed, _core.LANE_UNIFORM, counters))
    return _log_f64(1.0 - u).mul_(-1.0 / lambd).to(dtype)  # 1 - u in (0, 1]


def _geometric(seed, counters, dtype, params):
    (p,) = params
    if not 0.0 < p <= 1.0:
        raise ValueError(f"geometric_ expects p to be in (0, 1], but got p={p}")
    u = _u64(random_bits(seed, _core.LANE_UNIFORM, counters))
    trials = _log_f64(1.0 - u).div_(math.log1p(-p)) if p < 1.0 else torch.zeros_like(u)
    return trials.ceil_().clamp_min_(1.0).to(dtype)


def _cauchy(seed, counters, dtype, params):
    median, sigma = params
    u = _u64(random_bits(seed, _core.LANE_UNIFORM, counters))
    return _tan_half_pi_f64(u.mul_(2.0).sub_(1.0)).mul_(sigma).add_(median).to(dtype)


def _randint(seed, counters, dtype, params):
    low, high = params
    return _u53(seed, counters).mul_(high - low).floor_().add_(low).to(dtype)


def _bernoulli(seed, counters, dtype, params):
    (p,) = params
    bits = random_bits(seed, _core.LANE_UNIFORM, counters)
    if isinstance(p, torch.Tensor):
        return (_u64(bits) < p.to(torch.float64)).to(dtype)
    return (bits < _threshold(p)).to(dtype)  # == (u < p) for u = bits / 2**32, without floats


#: kind -> (generator, needs a floating dtype)
_KINDS = {"uniform": (_uniform, True), "normal": (_normal, True), "log_normal": (_log_normal, True),
          "exponential": (_exponential, True), "geometric": (_geometric, False), "cauchy": (_cauchy, True),
          "randint": (_randint, False), "bernoulli": (_bernoulli, False)}


def _values(kind: str, seed: int, counters: torch.Tensor, dtype: torch.dtype, params: tuple) -> torch.Tensor:
    """Values of distribution ``kind`` at ``counters`` (see :func:`shard_values` for ``params``)."""
    if kind not in _KINDS:
        raise ValueError(f"random distribution {kind!r}: expected one of {sorted(_KINDS)}")
    make, floating = _KINDS[kind]
    if floating and not dtype.is_floating_point:
        raise TypeError(f"{kind}: random values need a floating dtype, got {dtype}")
    return make(seed, counters, dtype, params or _DEFAULT_PARAMS[kind])


def holds_values(spec: DTensorSpec, coord: Sequence[int]) -> bool:
    """False on ranks that hold zeros of a ``Partial(sum)`` random tensor (non-zero coordinate there)."""
    return all(coord[d] == 0 for d, p in enumerate(spec.placements)
               if isinstance(p, Partial) and p.reduce_op == "sum")


def shard_values(kind: str, spec: DTensorSpec, coord: Sequence[int], dtype: torch.dtype, device: Any = None,
                 params: tuple = ()) -> torch.Tensor:
    """This rank's shard of a fresh random tensor of ``spec`` (advances the stream by the global numel).

    ``kind``: ``uniform`` (params ``(low, high)``), ``normal`` (``(mean, std)``), ``log_normal``
    (``(mean, std)`` of the log), ``exponential`` (``(lambd,)``), ``geometric`` (``(p,)``), ``cauchy``
    (``(median, sigma)``), ``randint`` (``(low, high)``) or ``bernoulli`` (``(p,)``: a float, or a tensor
    of the local shape); empty ``params``: the standard ones (torch's defaults).
    ``Partial(sum)`` mesh dims: the rank at coordinate 0 holds the values, the others zeros (so the sum
    is the random tensor); other ``Partial`` kinds hold the values on every rank.
    """
    seed, base = _core.reserve(spec.numel)
    local_shape, offset = spec.local_shape_and_offset(coord)
    if not holds_values(spec, coord):
        return torch.zeros(local_shape, dtype=dtype, device=device)
    counters = global_counters(spec.shape, local_shape, offset, base, device)
    return _values(kind, seed, counters, dtype, params)


def reference_values(kind: str, shape: Sequence[int], state: Tuple[int, int], dtype: torch.dtype = torch.float32,
                     params: tuple = ()) -> torch.Tensor:
    """The full tensor a random op draws at stream ``state = (seed, offset)``, on one process without
    a mesh (for tests and single-device reproduction); does not touch the stream."""
    shape = tuple(shape)
    counters = global_counters(shape, shape, (0,) * len(shape), state[1])
    return _values(kind, state[0], counters, dtype, params)


def keep_mask(spec: DTensorSpec, coord: Sequence[int], p: float, dtype: torch.dtype,
              device: Any = None) -> torch.Tensor:
    """Dropout's keep mask (1 with probability ``1 - p``, else 0) for this rank's shard of ``spec``;
    every rank holding an element (Partial or Replicate dims included) draws the same value for it."""
    seed, base = _core.reserve(spec.numel)
    local_shape, offset = spec.local_shape_and_offset(coord)
    counters = global_counters(spec.shape, local_shape, offset, base, device)
    keep = random_bits(seed, _core.LANE_UNIFORM, counters) >= _threshold(p)  # == (u >= p), u = bits / 2**32
    return keep.to(dtype)
