# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Back-off between polls of one waiting phase: 60 → 270 → 1200 → 1800 s, jitter, cap 3600 s."""
from __future__ import annotations

import random

SCHEDULE_S = (60.0, 270.0, 1200.0, 1800.0)
CAP_S = 3600.0
JITTER = 0.1


def delay(attempt: int, rng: random.Random | None = None, jitter: float = JITTER) -> float:
    """Seconds to wait before poll ``attempt`` (0-based) of the current phase, jittered, capped."""
    if attempt < 0:
        raise ValueError(f"attempt must be >= 0, got {attempt}")
    base = SCHEDULE_S[min(attempt, len(SCHEDULE_S) - 1)]
    factor = 1.0 + (rng or random).uniform(-jitter, jitter) if jitter else 1.0
    return min(CAP_S, base * factor)
