# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Learning-rate schedules as named formulas (pure Python).

The factor multiplies every param group's base lr at scheduler step ``t`` (``t = 0`` before the
first optimizer step). With ``W`` warmup steps, ``T`` total steps and ``r = min_lr_ratio``:

* warmup, ``t < W``: ``(t + 1) / (W + 1)`` — linear from ``1/(W+1)`` to 1, exactly torch's
  ``LinearLR(start_factor=1/(W+1), total_iters=W)``;
* then, with ``p = min(1, (t - W) / (T - W))``:

  - ``constant``: ``1``;
  - ``linear``: ``1 - (1 - r) p`` (torch's ``LinearLR(1, r, T - W)``);
  - ``cosine``: ``r + (1 - r) (1 + cos(pi p)) / 2`` (torch's ``CosineAnnealingLR(T - W, r * lr)``);
  - ``wsd`` (warmup-stable-decay): ``1`` until the decay starts at ``S = T - D`` with
    ``D = round(decay_ratio * (T - W))``, then ``q = min(1, (t - S) / D)`` and the decay shape
    ``linear`` ``1 - (1 - r) q``, ``cosine`` ``r + (1 - r) (1 + cos(pi q)) / 2`` or ``sqrt``
    ``1 - (1 - r) sqrt(q)``.

After ``T`` the factor stays at its final value (``r``, or 1 for ``constant``).
"""
from __future__ import annotations

import math
from typing import Any, Dict, Optional

__all__ = ["DECAYS", "WSD_SHAPES", "lr_factor", "LRLambda"]

DECAYS = ("constant", "linear", "cosine", "wsd")
WSD_SHAPES = ("linear", "cosine", "sqrt")


def _shape(p: float, r: float, shape: str) -> float:
    if shape == "linear":
        return 1.0 - (1.0 - r) * p
    if shape == "cosine":
        return r + (1.0 - r) * (1.0 + math.cos(math.pi * p)) / 2.0
    return 1.0 - (1.0 - r) * math.sqrt(p)


def lr_factor(step: int, *, warmup_steps: int = 0, decay: str = "constant", total_steps: Optional[int] = None,
              min_lr_ratio: float = 0.0, decay_ratio: float = 0.1, wsd_shape: str = "linear") -> float:
    """The lr multiplier at scheduler step ``step`` (see the module docstring for the formulas)."""
    if step < warmup_steps:
        return (step + 1) / (warmup_steps + 1)
    if decay == "constant":
        return 1.0
    if total_steps is None:
        raise ValueError(f"lr_factor: decay {decay!r} needs total_steps")
    span = total_steps - warmup_steps
    if decay in ("linear", "cosine"):
        p = min(1.0, (step - warmup_steps) / span) if span > 0 else 1.0
        return _shape(p, min_lr_ratio, decay)
    if decay == "wsd":
        length = int(round(decay_ratio * span))
        start = total_steps - length
        if step < start:
            return 1.0
        q = min(1.0, (step - start) / length) if length > 0 else 1.0
        return _shape(q, min_lr_ratio, wsd_shape)
    raise ValueError(f"lr_factor(decay): expected one of {DECAYS}, got {decay!r}")


class LRLambda:
    """A picklable ``lr_lambda`` for ``torch.optim.lr_scheduler.LambdaLR`` computing :func:`lr_factor`.

    Its settings live in ``__dict__``, so ``LambdaLR.state_dict()`` saves them and
    ``load_state_dict`` restores them.
    """

    def __init__(self, **settings: Any) -> None:
        lr_factor(0, **settings)  # validate now, not at the first step
        self.settings: Dict[str, Any] = dict(settings)

    def __call__(self, step: int) -> float:
        return lr_factor(step, **self.settings)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in sorted(self.settings.items()))
        return f"LRLambda({args})"
