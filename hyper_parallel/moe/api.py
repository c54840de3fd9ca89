# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Public, backend-free part of the MoE API: the layer configuration and the expert-parallel mesh rule.

Nothing here imports a framework: a bad configuration is rejected before any tensor exists.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

__all__ = ["MoEConfig", "SCORE_FUNCS", "LOAD_BALANCE", "SINKHORN_ITERS", "BALANCE_ITERS", "BALANCE_TOL",
           "AUX_LOSS_LEVELS", "check_expert_parallel", "expert_fsdp_degree", "uses_expert_bias", "uses_aux_loss"]

SCORE_FUNCS = ("softmax", "sigmoid")
LOAD_BALANCE = ("aux_loss", "expert_bias", "expert_bias+aux_loss", "sinkhorn", None)
#: Sinkhorn iterations of ``load_balance="sinkhorn"`` (a fixed count: every rank runs the same collectives)
SINKHORN_ITERS = 8
#: rounds (at most) and relative tolerance of the count-balanced top-k that follows the Sinkhorn plan
#: (``hyper_parallel.moe._torch.router.balance_top_k``): every expert's load within 5 % of the mean
BALANCE_ITERS = 32
BALANCE_TOL = 0.05
AUX_LOSS_LEVELS = ("batch", "sequence")


def _int_at_least(name: str, value, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"MoEConfig({name}): expected an int >= {low}, got {value!r}")


def _number_at_least(name: str, value, low: float, strict: bool) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (value > low if strict else value >= low)
    if not ok:
        raise ValueError(f"MoEConfig({name}): expected a finite number {'>' if strict else '>='} {low}, "
                         f"got {value!r}")


@dataclass(frozen=True)
class MoEConfig:  # pylint: disable=too-many-instance-attributes
    """One mixture-of-experts layer (validated on construction; errors name the field and the value).

    Args:
        num_experts: routed experts ``E``.
        top_k: experts per token ``k`` (``1 <= k <= E``).
        dim: model width (input and output of every expert).
        hidden_dim: hidden width of one routed expert (SwiGLU).
        num_shared_experts: always-active experts; they form one SwiGLU ``FeedForward`` of hidden width
            ``num_shared_experts * hidden_dim`` (DeepSeek-V3's convention); 0 = none.
        score_func: ``"softmax"`` (over the experts) or ``"sigmoid"`` (per expert).
        route_norm: divide the ``k`` selected scores by their sum.
        route_scale: multiply the combine weights by this factor (after ``route_norm``).
        n_groups, topk_groups: group-limited routing (DeepSeek): experts form ``n_groups`` equal groups,
            a token first picks ``topk_groups`` groups (by the sum of the top-2 selection scores in each
            group) and then its ``k`` experts inside them. ``n_groups=1``: plain top-k.
        load_balance: ``"aux_loss"`` (auxiliary loss through ``MoEAuxLossAutoScaler``),
            ``"expert_bias"`` (auxiliary-loss-free: a per-expert bias added to the scores for the
            *selection only*, moved after each optimizer step), ``"expert_bias+aux_loss"`` (both:
            DeepSeek-V3's bias plus a small complementary auxiliary loss), ``"sinkhorn"`` (Megatron's
            Sinkhorn routing: while training, the selection is made on the router probabilities
            Sinkhorn-normalised over the batch, then per-expert offsets solved within the batch so that
            the hard top-k gives every expert the mean load within ``BALANCE_TOL``; the combine weights
            stay the plain scores; evaluation routes by plain top-k) or ``None``.
        aux_loss_coeff: ``alpha`` of the auxiliary loss ``alpha * E * sum_i f_i * P_i`` (= alpha at
            perfect balance).
        bias_update_rate: ``gamma`` of the bias rule ``b_i += gamma * sign(mean - load_i)`` (default
            ``1e-2``, chosen by measurement: see ``docs/moe.md``, "Choosing the balancing knobs").
        capacity_factor: ``None`` = dropless; otherwise each expert takes at most
            ``ceil(factor * tokens * k / E)`` of a rank's routed slots per call, first come first
            served in token order; the rest are dropped (their combine weight is 0).
        aux_loss_level: ``"batch"`` (statistics over all tokens of the call) or ``"sequence"``
            (per sequence of the ``[batch, seq, dim]`` input, then averaged over the sequences;
            DeepSeek-V3's complementary sequence-wise loss).
        z_loss_coeff: router z-loss ``beta * mean_tokens(logsumexp(logits)^2)`` (ST-MoE), added to the
            loss like the auxiliary loss (keeps the router logits small); 0 = off. Independent of
            ``load_balance``.
        use_grouped_mm: ``None`` = automatic (one ``torch._grouped_mm`` per projection where the dtype,
            device and 16-byte stride rule allow it, else a per-expert loop); ``True``/``False`` force it
            (``True`` raises when the kernel cannot run).
    """

    num_experts: int
    top_k: int
    dim: int
    hidden_dim: int
    num_shared_experts: int = 0
    score_func: str = "softmax"
    route_norm: bool = False
    route_scale: float = 1.0
    n_groups: int = 1
    topk_groups: int = 1
    load_balance: Optional[str] = "expert_bias"
    aux_loss_coeff: float = 1e-2
    bias_update_rate: float = 1e-2
    capacity_factor: Optional[float] = None
    aux_loss_level: str = "batch"
    use_grouped_mm: Optional[bool] = None
    z_loss_coeff: float = 0.0

    def __post_init__(self) -> None:
        _int_at_least("num_experts", self.num_experts, 1)
        _int_at_least("top_k", self.top_k, 1)
        _int_at_least("dim", self.dim, 1)
        _int_at_least("hidden_dim", self.hidden_dim, 1)
        _int_at_least("num_shared_experts", self.num_shared_experts, 0)
        if self.top_k > self.num_experts:
            raise ValueError(f"MoEConfig(top_k): top_k={self.top_k} exceeds num_experts={self.num_experts}")
        if self.score_func not in SCORE_FUNCS:
            raise ValueError(f"MoEConfig(score_func): expected one of {SCORE_FUNCS}, got {self.score_func!r}")
        if not isinstance(self.route_norm, bool):
            raise ValueError(f"MoEConfig(route_norm): expected a bool, got {self.route_norm!r}")
        _number_at_least("route_scale", self.route_scale, 0.0, strict=True)
        self._check_groups()
        if self.load_balance not in LOAD_BALANCE:
            raise ValueError(f"MoEConfig(load_balance): expected one of {LOAD_BALANCE}, got {self.load_balance!r}")
        _number_at_least("aux_loss_coeff", self.aux_loss_coeff, 0.0, strict=False)
        _number_at_least("bias_update_rate", self.bias_update_rate, 0.0, strict=False)
        _number_at_least("z_loss_coeff", self.z_loss_coeff, 0.0, strict=False)
        if self.capacity_factor is not None:
            _number_at_least("capacity_factor", self.capacity_factor, 0.0, strict=True)
        if self.aux_loss_level not in AUX_LOSS_LEVELS:
            raise ValueError(f"MoEConfig(aux_loss_level): expected one of {AUX_LOSS_LEVELS}, got "
                             f"{self.aux_loss_level!r}")
        if self.use_grouped_mm not in (None, True, False):
            raise ValueError(f"MoEConfig(use_grouped_mm): expected None, True or False, got {self.use_grouped_mm!r}")

    def _check_groups(self) -> None:
        _int_at_least("n_groups", self.n_groups, 1)
        _int_at_least("topk_groups", self.topk_groups, 1)
        if self.num_experts % self.n_groups:
            raise ValueError(f"MoEConfig(n_groups): num_experts={self.num_experts} is not divisible by "
                             f"n_groups={self.n_groups}")
        if self.topk_groups > self.n_groups:
            raise ValueError(f"MoEConfig(topk_groups): topk_groups={self.topk_groups} exceeds n_groups={self.n_groups}")
        reachable = self.topk_groups * (self.num_experts // self.n_groups)
        if self.top_k > reachable:
            raise ValueError(f"MoEConfig(top_k): top_k={self.top_k} exceeds the {reachable} experts reachable in "
                             f"topk_groups={self.topk_groups} groups of {self.num_experts // self.n_groups}")

    @property
    def uses_expert_bias(self) -> bool:
        """Whether the selection adds ``expert_bias`` (``"expert_bias"`` or ``"expert_bias+aux_loss"``)."""
        return uses_expert_bias(self.load_balance)

    @property
    def uses_aux_loss(self) -> bool:
        """Whether the auxiliary loss is added (``"aux_loss"`` or ``"expert_bias+aux_loss"``)."""
        return uses_aux_loss(self.load_balance)

    @property
    def shared_hidden_dim(self) -> int:
        """Hidden width of the shared-experts FeedForward (0 when there are none)."""
        return self.num_shared_experts * self.hidden_dim


def uses_expert_bias(load_balance: Optional[str]) -> bool:
    """Whether ``load_balance`` selects with the expert bias."""
    return load_balance in ("expert_bias", "expert_bias+aux_loss")


def uses_aux_loss(load_balance: Optional[str]) -> bool:
    """Whether ``load_balance`` adds the auxiliary loss."""
    return load_balance in ("aux_loss", "expert_bias+aux_loss")


def check_expert_parallel(num_experts: int, ep: int) -> int:
    """Experts per rank for ``ep``-way expert parallelism. Experts are split evenly: a ``num_experts``
    not divisible by ``ep`` is an error naming both (uneven splits would make ranks wait on the
    busiest one for no gain)."""
    if isinstance(ep, bool) or not isinstance(ep, int) or ep < 1:
        raise ValueError(f"expert parallel degree: expected an int >= 1, got ep={ep!r}")
    if num_experts % ep:
        raise ValueError(f"expert parallel: num_experts={num_experts} is not divisible by the expert-parallel "
                         f"degree ep={ep}")
    return num_experts // ep


def expert_fsdp_degree(*, dp_shard: int, cp: int = 1, tp: int = 1, ep: int, etp: int = 1) -> int:
    """The expert-FSDP degree ``efsdp`` of the mesh rule ``efsdp * ep * etp = dp_shard * cp * tp``.

    Expert parallelism borrows its ranks from the data-parallel, context-parallel and tensor-parallel
    dims (TorchTitan's rule, ``etp=1``); with expert tensor parallelism ``etp`` must equal ``tp`` (the
    experts reuse the dense TP group). What is left shards the expert weights with ``fully_shard``.
    Errors name the dims and the products that do not fit.
    """
    dims = {"dp_shard": dp_shard, "cp": cp, "tp": tp, "ep": ep, "etp": etp}
    for name, value in dims.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"expert mesh: {name} must be an int >= 1, got {value!r}")
    if etp not in (1, tp):
        raise ValueError(f"expert mesh: etp={etp} must be 1 or equal to tp={tp} (experts reuse the dense TP group)")
    dense = dp_shard * cp * tp
    sparse = ep * etp
    if dense % sparse:
        raise ValueError(f"expert mesh: ep*etp = {ep}*{etp} = {sparse} does not divide dp_shard*cp*tp = "
                         f"{dp_shard}*{cp}*{tp} = {dense} (efsdp * ep * etp must equal dp_shard * cp * tp)")
    return dense // sparse
