# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Code whose ops activation-checkpoint dispatch modes pass through untouched.

Selective activation checkpointing caches op outputs in forward and replays them, by call order,
in the recompute. Parameter communication issued by module hooks inside a checkpointed region (a
nested ``fully_shard`` unit's unshard) is not an activation: it runs again in backward only if the
parameters were resharded meanwhile, so forward and recompute would issue different sequences and
the cache would hand one all-gather's result to another. Such code runs inside
:func:`parameter_communication`; the modes (``hyper_parallel.activation._torch.checkpoint``) execute
its ops without caching, replaying or counting them.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

__all__ = ["parameter_communication", "in_parameter_communication"]

_DEPTH = [0]


@contextlib.contextmanager
def parameter_communication() -> Iterator[None]:
    """Ops inside are passed through by activation-checkpoint modes (not cached, not replayed)."""
    _DEPTH[0] += 1
    try:
        yield
    finally:
        _DEPTH[0] -= 1


def in_parameter_communication() -> bool:
    """True inside :func:`parameter_communication` (checked by the modes on every op)."""
    return _DEPTH[0] > 0
