# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""A parallel layout (:class:`ParallelPlan`) and the training settings the estimates depend on
(:class:`TrainConfig`) — pure data with validation.

Mesh convention (TorchTitan's ``ParallelDims``): ``world = dp_replicate * dp_shard * cp * tp * pp``;
FSDP shards parameters over ``dp_shard * cp``; experts are split over ``ep`` ranks borrowed from
``dp_shard * cp * tp`` and sharded by FSDP over the rest (``efsdp = dp_shard * cp * tp / ep``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

__all__ = ["ParallelPlan", "TrainConfig", "ACTIVATION_POLICIES", "OPTIMIZERS"]

ACTIVATION_POLICIES = ("none", "full")
OPTIMIZERS = ("adamw", "muon", "sgd")
_DIMS = ("dp_replicate", "dp_shard", "tp", "pp", "cp", "ep")


@dataclass(frozen=True)
class ParallelPlan:  # pylint: disable=too-many-instance-attributes
    """One point of the search space.

    Args:
        dp_replicate, dp_shard, tp, pp, cp, ep: mesh dims (see the module docstring).
        microbatches: pipeline microbatches per step (1 without PP: the local batch runs at once).
        activation: ``"none"`` (keep all activations) or ``"full"`` (recompute every decoder layer).
        schedule: pipeline schedule name (``hyper_parallel.pipeline``); ignored without PP.
        stages_per_rank: pipeline stages per rank (2 for interleaved and V schedules).
        sequence_parallel: TP shards the norms' activations over the sequence (Megatron SP).
        layers_per_stage: an explicit split (from :func:`~hyper_parallel.auto_parallel.balance_stages`);
            ``None`` = TorchTitan's even split with the first and last stage one layer lighter.
    """

    dp_replicate: int = 1
    dp_shard: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    microbatches: int = 1
    activation: str = "none"
    schedule: str = "1F1B"
    stages_per_rank: int = 1
    sequence_parallel: bool = True
    layers_per_stage: Optional[Tuple[int, ...]] = None

    def __post_init__(self) -> None:
        for name in (*_DIMS, "microbatches", "stages_per_rank"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"ParallelPlan.{name}: expected a positive int, got {value!r}")
        if self.activation not in ACTIVATION_POLICIES:
            raise ValueError(f"ParallelPlan.activation: expected one of {ACTIVATION_POLICIES}, got "
                             f"{self.activation!r}")
        if (self.dp_shard * self.cp * self.tp) % self.ep:
            raise ValueError(f"ParallelPlan.ep: ep={self.ep} must divide dp_shard*cp*tp = "
                             f"{self.dp_shard * self.cp * self.tp} (experts borrow those ranks)")
        if self.layers_per_stage is not None:
            object.__setattr__(self, "layers_per_stage", tuple(self.layers_per_stage))
            if len(self.layers_per_stage) != self.num_stages:
                raise ValueError(f"ParallelPlan.layers_per_stage: {len(self.layers_per_stage)} entries for "
                                 f"{self.num_stages} stages")

    @property
    def world_size(self) -> int:
        """Ranks the plan uses."""
        return self.dp_replicate * self.dp_shard * self.cp * self.tp * self.pp

    @property
    def dp(self) -> int:
        """Data-parallel degree (batch split): ``dp_replicate * dp_shard``."""
        return self.dp_replicate * self.dp_shard

    @property
    def fsdp(self) -> int:
        """Ranks a dense parameter is sharded over (``dp_shard * cp``)."""
        return self.dp_shard * self.cp

    @property
    def efsdp(self) -> int:
        """Ranks an expert's parameters are sharded over (``dp_shard * cp * tp / ep``)."""
        return self.dp_shard * self.cp * self.tp // self.ep

    @property
    def num_stages(self) -> int:
        """Pipeline stages in all."""
        return self.pp * self.stages_per_rank

    def label(self) -> str:
        """A short text such as ``dp2 tp2 pp2(1F1B,m4) ac=full``."""
        parts = [f"{k.replace('dp_replicate', 'ddp').replace('dp_shard', 'fsdp')}{getattr(self, k)}"
                 for k in _DIMS if getattr(self, k) > 1]
        text = " ".join(parts) or "single"
        if self.pp > 1:
            text = text.replace(f"pp{self.pp}", f"pp{self.pp}({self.schedule},m{self.microbatches})")
        if self.activation != "none":
            text += f" ac={self.activation}"
        return text


@dataclass(frozen=True)
class TrainConfig:
    """Training settings: global batch (sequences), sequence length, optimizer and dtypes.

    ``param_bytes``/``grad_bytes`` are the stored (master) parameter and gradient sizes;
    ``compute_bytes`` the activation dtype size (2 for bf16 mixed precision); ``optimizer`` is
    ``adamw`` (2 fp32 states), ``muon`` (1 fp32 momentum) or ``sgd`` (none); ``moe_imbalance`` is the
    routing imbalance factor (tokens of the busiest expert / the average) used for EP memory and time.
    ``comm_staging``: the collective library copies an all-gather's output through a buffer of its own
    (gloo on CPU does; NCCL/HCCL write in place): one more unit-sized buffer while an FSDP prefetch is in
    flight (the worst case: the peer rank reaches the collective late).
    """

    global_batch: int
    seq_len: int
    optimizer: str = "adamw"
    param_bytes: int = 4
    grad_bytes: int = 4
    compute_bytes: int = 4
    moe_imbalance: float = 1.0
    comm_staging: bool = False

    def __post_init__(self) -> None:
        for name in ("global_batch", "seq_len", "param_bytes", "grad_bytes", "compute_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"TrainConfig.{name}: expected a positive int, got {value!r}")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"TrainConfig.optimizer: expected one of {OPTIMIZERS}, got {self.optimizer!r}")
        if self.moe_imbalance < 1.0:
            raise ValueError(f"TrainConfig.moe_imbalance: expected >= 1.0, got {self.moe_imbalance!r}")

    @property
    def optimizer_states(self) -> int:
        """fp32 optimizer values per parameter."""
        return {"adamw": 2, "muon": 1, "sgd": 0}[self.optimizer]
