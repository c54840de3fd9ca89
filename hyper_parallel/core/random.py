# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Reproducible, placement-invariant distributed random numbers (the backend-free part).

Random ops on DTensors draw from one *distributed stream* shared by every rank: a seed and an
offset. A random op producing a tensor of global shape ``S`` takes the counters
``offset .. offset + numel(S) - 1`` (element ``i`` of the row-major global tensor gets counter
``offset + i``) and then advances the offset by ``numel(S)`` — the same on every rank, because every
rank sees the same global shape. Each rank evaluates a counter-based hash only at the global flat
indices of *its own shard*, so the global tensor is the same for a given seed whatever the mesh,
the placements or the world size (one process included), and no rank generates data it does not keep.

The hash (:func:`hash32`) maps ``(seed, lane, counter)`` to 32 bits with two rounds of the
``lowbias32``-style integer mixer ``[16 21f0aaad 15 735a2d97 15]`` (a hash-prospector result); ``lane`` selects
independent streams for ops that need several numbers per element (Box-Muller normals). This module
holds the state and a pure-Python reference of the hash; ``hyper_parallel.platform.torch.random``
evaluates the same arithmetic on int64 tensors: both multipliers are below 2^31 and the mixed value below
2^32, so every product stays below 2^63 (no overflow, no splitting).

``manual_seed(seed)`` seeds the framework's own generator (so full tensors made before
``distribute_tensor`` agree across ranks) and resets the distributed stream to ``(seed, 0)``.
Before any ``manual_seed`` the stream is ``(0, 0)`` on every rank.

Contract: the ranks of one mesh must use the same seed and run the same random ops in the same order
(SPMD code does). Ranks that never share a DTensor — data-parallel replicas outside the mesh, or
pipeline stages — may seed differently, e.g. ``manual_seed(seed + dp_rank)`` so that replicas that
see different data also draw different dropout masks.
"""
from __future__ import annotations

import threading
from typing import Optional, Sequence, Tuple

__all__ = ["manual_seed", "initial_seed", "get_rng_state", "set_rng_state", "reserve", "mix32", "stream_keys",
           "hash32", "MASK32", "MIX_C1", "MIX_C2", "LANE_UNIFORM", "LANE_NORMAL_RADIUS", "LANE_NORMAL_ANGLE"]

MASK32 = 0xFFFFFFFF
MASK64 = 0xFFFFFFFFFFFFFFFF
#: mixer multipliers, both < 2**31 so that ``x * c < 2**63`` for ``x < 2**32`` (hash-prospector, bias ~0.11).
MIX_C1 = 0x21F0AAAD
MIX_C2 = 0x735A2D97
_GOLDEN = 0x9E3779B9
#: lanes: independent streams over the same counters.
LANE_UNIFORM = 0
LANE_NORMAL_RADIUS = 1
LANE_NORMAL_ANGLE = 2


class _StreamState:
    """The distributed stream: seed and offset (identical on every rank by construction)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seed = 0
        self.offset = 0


_STATE = _StreamState()


def _check_seed(seed: int, what: str) -> int:
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise TypeError(f"{what}: expected an int, got {seed!r}")
    return seed & MASK64


def manual_seed(seed: int, device_mesh=None, platform: Optional[str] = None) -> None:  # pylint: disable=unused-argument
    """Seed every rank with the same ``seed``.

    Seeds the framework's generator (full tensors built before ``distribute_tensor`` are identical on
    all ranks, as in PyTorch) and resets the distributed stream used by random ops on DTensors to
    ``(seed, offset 0)``. Call it with the same seed on every rank. ``device_mesh`` is accepted for
    API parity: the stream does not depend on the mesh.
    """
    stream_seed = _check_seed(seed, "manual_seed(seed)")
    from hyper_parallel.platform import get_platform
    get_platform(platform).manual_seed(seed)
    with _STATE.lock:
        _STATE.seed = stream_seed
        _STATE.offset = 0


def initial_seed() -> int:
    """The seed of the distributed stream (``0`` until :func:`manual_seed`)."""
    return _STATE.seed


def get_rng_state() -> Tuple[int, int]:
    """``(seed, offset)`` of the distributed stream (restore it with :func:`set_rng_state`)."""
    with _STATE.lock:
        return _STATE.seed, _STATE.offset


def set_rng_state(state: Sequence[int]) -> None:
    """Restore a ``(seed, offset)`` pair returned by :func:`get_rng_state`."""
    if not isinstance(state, (tuple, list)) or len(state) != 2:
        raise TypeError(f"set_rng_state(state): expected a (seed, offset) pair, got {state!r}")
    seed = _check_seed(state[0], "set_rng_state(state[0] = seed)")
    offset = state[1]
    if not isinstance(offset, int) or isinstance(offset, bool) or not 0 <= offset < 2 ** 62:
        raise ValueError(f"set_rng_state(state[1] = offset): expected an int in [0, 2**62), got {offset!r}")
    with _STATE.lock:
        _STATE.seed, _STATE.offset = seed, offset


def reserve(numel: int) -> Tuple[int, int]:
    """Take ``numel`` counters from the stream: returns ``(seed, first counter)`` and advances the offset.

    Every rank must call it with the same ``numel`` (the *global* element count) in the same order.
    """
    if not isinstance(numel, int) or numel < 0:
        raise ValueError(f"reserve(numel): expected a non-negative int, got {numel!r}")
    with _STATE.lock:
        base = _STATE.offset
        _STATE.offset = base + numel
        return _STATE.seed, base


# ---------------------------------------------------------------------- the hash (pure reference)
def mix32(x: int) -> int:
    """A bijective 32-bit integer mixer ``[16 21f0aaad 15 735a2d97 15]`` (reference for the tensor version)."""
    x &= MASK32
    x ^= x >> 16
    x = (x * MIX_C1) & MASK32
    x ^= x >> 15
    x = (x * MIX_C2) & MASK32
    x ^= x >> 15
    return x


def stream_keys(seed: int, lane: int) -> Tuple[int, int]:
    """The two 32-bit round keys for ``(seed, lane)`` (scalars, computed once per op)."""
    seed &= MASK64
    k0 = mix32((seed & MASK32) ^ mix32((lane * _GOLDEN + 1) & MASK32))
    k1 = mix32((seed >> 32) ^ k0 ^ _GOLDEN)
    return k0, k1


def hash32(seed: int, lane: int, counter: int) -> int:
    """32 random bits for ``counter`` (``0 <= counter < 2**63``) of stream ``(seed, lane)``."""
    k0, k1 = stream_keys(seed, lane)
    h = mix32((counter & MASK32) ^ k0)
    return mix32(h ^ (counter >> 32) ^ k1)
