# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Injectable clocks: the real one (with a time scale for demos) and a fake one for tests."""
from __future__ import annotations

import time
from typing import Callable


class Clock:
    """Wall clock; ``sleep(s)`` waits ``s * time_scale`` real seconds, ``now()`` is epoch seconds."""

    def __init__(self, time_scale: float = 1.0) -> None:
        if time_scale <= 0:
            raise ValueError(f"time scale must be > 0, got {time_scale!r}")
        self.time_scale = time_scale

    def now(self) -> float:
        """Seconds since the epoch."""
        return time.time()

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` (scaled)."""
        time.sleep(max(0.0, seconds) * self.time_scale)


class FakeClock(Clock):
    """A clock that never waits: ``sleep`` advances ``now`` and runs ``on_sleep`` callbacks."""

    def __init__(self, start: float = 1_780_000_000.0) -> None:
        super().__init__(1.0)
        self.t = float(start)
        self.slept: list[float] = []
        self.on_sleep: list[Callable[[float], None]] = []

    def now(self) -> float:
        """The fake current time."""
        return self.t

    def advance(self, seconds: float) -> None:
        """Move time forward without recording a sleep."""
        self.t += seconds

    def sleep(self, seconds: float) -> None:
        """Record the sleep, advance time, notify listeners."""
        self.slept.append(seconds)
        self.t += max(0.0, seconds)
        for callback in list(self.on_sleep):
            callback(self.t)
