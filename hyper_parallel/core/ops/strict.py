# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Strict mode, shared by every backend's dispatcher: an implicit redistribution that communicates
(any collective; local chunking and local R->P are allowed) raises :class:`StrictRedistributionError`
naming the op, the input and the plan it would have run."""
from __future__ import annotations

import threading

__all__ = ["StrictRedistributionError", "strict_dispatch", "set_strict", "strict_enabled"]

_STRICT = threading.local()


class StrictRedistributionError(RuntimeError):
    """An implicit redistribution that communicates was needed while strict mode was on."""


def set_strict(on: bool) -> None:
    """Turn strict mode on/off for this thread."""
    _STRICT.on = bool(on)


def strict_enabled() -> bool:
    """True while strict mode is on in this thread."""
    return getattr(_STRICT, "on", False)


class strict_dispatch:  # pylint: disable=invalid-name,too-few-public-methods
    """Context manager turning strict mode on for its body (nesting restores the previous state)."""

    def __init__(self) -> None:
        self._prev = False

    def __enter__(self) -> "strict_dispatch":
        self._prev = strict_enabled()
        _STRICT.on = True
        return self

    def __exit__(self, *exc) -> None:
        _STRICT.on = self._prev
