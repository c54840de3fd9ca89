# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Experiment trackers beyond the built-in JSONL / PNG / TensorBoard logging: Weights & Biases.

``[metrics] wandb = "offline"`` writes a local run under ``<out_dir>/wandb`` without any network (``wandb sync``
uploads it later); ``"online"`` logs to the server (``WANDB_API_KEY``). Rank 0 logs every step's scalars and the
evaluation loss. Needs the ``wandb`` extra (``pip install 'hyper-parallel[wandb]'``).
"""
from __future__ import annotations

import os
from typing import Any, Dict

from hyper_parallel.trainer.callbacks import Callback

__all__ = ["WandbCallback", "WANDB_MODES"]

WANDB_MODES = ("", "offline", "online")


class WandbCallback(Callback):
    """Log the step metrics to a Weights & Biases run (rank 0)."""

    def __init__(self, out_dir: str, mode: str, project: str, config: Dict[str, Any]) -> None:
        if mode not in WANDB_MODES[1:]:
            raise ValueError(f"metrics.wandb: expected 'offline' or 'online', got {mode!r}")
        self.out_dir, self.mode, self.project, self.config = out_dir, mode, project, config
        self.run = None

    def on_train_begin(self, trainer: Any) -> None:
        if not trainer.is_logging_rank:
            return
        try:
            import wandb  # pylint: disable=import-outside-toplevel
        except ImportError:
            raise ValueError("metrics.wandb: wandb is not installed: pip install 'hyper-parallel[wandb]'") from None
        os.makedirs(self.out_dir, exist_ok=True)
        self.run = wandb.init(project=self.project, dir=self.out_dir, mode=self.mode, config=self.config,
                              name=trainer.config.job.name, reinit="finish_previous")

    def on_step_end(self, trainer: Any, step: int, metrics: Dict[str, Any]) -> None:
        if self.run is not None:
            self.run.log({k: v for k, v in metrics.items() if isinstance(v, (int, float))}, step=step)

    def on_train_end(self, trainer: Any) -> None:
        if self.run is not None:
            self.run.finish()
            self.run = None
