# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The result of ``apply_activation_policy`` (pure; the front door and every backend return it)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Tuple

__all__ = ["ActivationPlan"]


@dataclass
class ActivationPlan:
    """What :func:`apply_activation_policy` did: the mode of each layer, the shared modules left out,
    the swap manager (when some layer swaps) and, for ``mode="auto"``, the solver's plan."""

    layers: Dict[str, str] = field(default_factory=dict)
    excluded: Tuple[str, ...] = ()
    manager: Any = None
    auto: Any = None

    def report(self) -> str:
        """Human-readable summary."""
        lines = ["activation plan:"]
        lines += [f"  {name}: {mode}" for name, mode in self.layers.items()]
        if self.excluded:
            lines.append(f"  shared modules left alone: {', '.join(self.excluded)}")
        if self.auto is not None:
            lines.append(self.auto.report())
        return "\n".join(lines)
