# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT: the backend-free part of the distributed RNG (stream state and the reference hash)."""
import pytest

from hyper_parallel.core import random as rng


def test_mix32_is_a_bijection_on_a_sample_and_stays_32_bit():
    values = [rng.mix32(x) for x in range(1 << 14)]
    assert len(set(values)) == len(values)
    assert all(0 <= v <= rng.MASK32 for v in values)
    assert rng.mix32(0) == 0  # the mixer fixes 0: the round keys keep counter 0 from mapping to 0
    assert rng.mix32(1 << 32) == rng.mix32(0)  # input taken mod 2**32


def test_hash_depends_on_seed_lane_and_both_counter_words():
    base = rng.hash32(7, 0, 12345)
    assert rng.hash32(8, 0, 12345) != base
    assert rng.hash32(7, 1, 12345) != base
    assert rng.hash32(7, 0, 12346) != base
    assert rng.hash32(7, 0, 12345 + (1 << 32)) != base
    assert rng.hash32(7 + (1 << 32), 0, 12345) != base  # the seed's high word matters too
    assert rng.hash32(7, 0, 12345) == base  # and it is a pure function


def test_hash_bits_are_balanced():
    n = 20000
    ones = [0] * 32
    for c in range(n):
        h = rng.hash32(3, 0, c)
        for b in range(32):
            ones[b] += (h >> b) & 1
    assert all(abs(k / n - 0.5) < 0.02 for k in ones), ones


def test_reserve_advances_by_numel_and_state_round_trips():
    saved = rng.get_rng_state()
    try:
        rng.set_rng_state((11, 0))
        assert rng.reserve(6) == (11, 0)
        assert rng.reserve(0) == (11, 6)
        assert rng.reserve(4) == (11, 6)
        assert rng.get_rng_state() == (11, 10)
        assert rng.initial_seed() == 11
    finally:
        rng.set_rng_state(saved)


def test_bad_inputs_are_named():
    with pytest.raises(TypeError, match=r"manual_seed\(seed\): expected an int"):
        rng.manual_seed(1.5)
    with pytest.raises(TypeError, match=r"set_rng_state\(state\): expected a \(seed, offset\) pair"):
        rng.set_rng_state(3)
    with pytest.raises(ValueError, match=r"offset\): expected an int in \[0, 2\*\*62\)"):
        rng.set_rng_state((1, -1))
    with pytest.raises(ValueError, match=r"reserve\(numel\)"):
        rng.reserve(-1)


def test_negative_and_large_seeds_wrap_to_64_bits():
    saved = rng.get_rng_state()
    try:
        rng.set_rng_state((-1, 0))
        assert rng.get_rng_state() == (rng.MASK64, 0)
    finally:
        rng.set_rng_state(saved)
