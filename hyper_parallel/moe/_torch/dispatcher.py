# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Token dispatchers: permute -> exchange -> (experts) -> exchange back -> unpermute -> combine.

A dispatcher object holds only its configuration (group, degree, rank, options). Everything that
belongs to one call lives in a :class:`DispatchContext` that the caller creates per call and passes
to ``dispatch_start`` / ``dispatch_wait`` / ``combine``, so several micro-batches can be in flight at
once (pipeline schedules, two forwards before their backwards): they never share state.

* :class:`LocalTokenDispatcher`: no expert parallelism (permute and unpermute only).
* :class:`AllToAllTokenDispatcher`: expert parallelism, dropless, uneven splits: one small
  all-to-all of the per-expert counts, then the token all-to-all (asynchronous where the backend
  allows: the caller computes the shared experts before ``dispatch_wait``), regroup by local expert;
  the combine runs the inverse exchange. The host waits once per call, on the count exchange (the
  token exchange needs its split sizes); nothing else synchronises.
* :class:`AllGatherTokenDispatcher`: the all-gather baseline (Megatron's all-gather dispatcher):
  every rank gathers all tokens, runs its experts on the slots routed to them, and reduce-scatters
  the partial outputs. Moves ``ep`` times the tokens of the all-to-all; kept for comparison.

The combine weights each expert output by its slot's router weight and sums a token's ``k`` slots
(dropped slots contribute nothing).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence, Tuple

import torch

from hyper_parallel.moe.api import check_expert_parallel
from hyper_parallel.moe.planning import ExchangePlan, exchange_plan

__all__ = ["DispatchContext", "TokenDispatcher", "LocalTokenDispatcher", "AllToAllTokenDispatcher",
           "AllGatherTokenDispatcher", "permute"]


@dataclass
class DispatchContext:  # pylint: disable=too-many-instance-attributes
    """Per-call state of one dispatch/combine pair (create one per forward call).

    Attributes:
        stage: ``"new"`` -> ``"started"`` -> ``"dispatched"`` -> ``"combined"`` (misuse is an error).
        num_tokens: tokens of this rank in the call.
        token_index: ``[S]`` token of each kept slot, in expert order.
        slot_weights: ``[S]`` router weight of each kept slot.
        counts: ``[E]`` kept slots per expert on this rank (int64 tensor).
        input_splits: rows sent to each rank (expert parallel).
        plan: the :class:`~hyper_parallel.moe.planning.ExchangePlan` of what this rank received.
        regroup: index turning the receive buffer expert-major (``None`` when it already is).
        handle: the in-flight token exchange (``CollectiveHandle``), until ``dispatch_wait``.
        tokens, tokens_per_expert: what the experts run on (set by ``dispatch_wait``).
        extra: dispatcher-specific values (the all-gather baseline keeps its sizes there).
    """

    stage: str = "new"
    num_tokens: int = 0
    token_index: Optional[torch.Tensor] = None
    slot_weights: Optional[torch.Tensor] = None
    counts: Optional[torch.Tensor] = None
    input_splits: Tuple[int, ...] = ()
    plan: Optional[ExchangePlan] = None
    regroup: Optional[torch.Tensor] = None
    handle: Any = None
    tokens: Optional[torch.Tensor] = None
    tokens_per_expert: Any = None
    extra: dict = field(default_factory=dict)

    def expect(self, stage: str, what: str) -> None:
        """Raise a clear error unless the context is at ``stage``."""
        if self.stage != stage:
            raise RuntimeError(f"{what}: the DispatchContext is at stage {self.stage!r}, expected {stage!r} "
                               "(use one new DispatchContext per call: dispatch_start, dispatch_wait, combine)")


def permute(experts: torch.Tensor, num_experts: int, capacity: Optional[int] = None):
    """``(slot_order, counts)``: the routed slots (``token * k + j``) ordered by expert (stable: token
    order inside an expert) keeping at most ``capacity`` per expert, and the kept slots per expert."""
    flat = experts.reshape(-1)
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=num_experts)
    if capacity is not None:
        starts = torch.cumsum(counts, 0) - counts
        position = torch.arange(flat.numel(), device=flat.device) - starts[flat[order]]
        order = order[position < capacity]
        counts = counts.clamp(max=capacity)
    return order, counts


def _chunk_index(starts: Sequence[int], lengths: Sequence[int], device) -> torch.Tensor:
    """Concatenation of ``range(start, start + length)`` over the chunks, built with vector ops."""
    lengths_t = torch.tensor(lengths, dtype=torch.int64, device=device)
    starts_t = torch.tensor(starts, dtype=torch.int64, device=device)
    offsets = torch.cumsum(lengths_t, 0) - lengths_t
    total = int(sum(lengths))
    return torch.arange(total, device=device) + torch.repeat_interleave(starts_t - offsets, lengths_t,
                                                                        output_size=total)


class TokenDispatcher(ABC):
    """Base class. Subclasses implement ``dispatch_start``, ``dispatch_wait`` and ``combine``; all
    per-call state goes into the :class:`DispatchContext` argument, none into ``self``."""

    def __init__(self, num_experts: int) -> None:
        self.num_experts = num_experts

    def _permute(self, x: torch.Tensor, experts: torch.Tensor, weights: torch.Tensor, ctx: DispatchContext,
                 capacity: Optional[int]) -> torch.Tensor:
        ctx.expect("new", f"{type(self).__name__}.dispatch_start")
        if x.dim() != 2 or experts.shape[0] != x.shape[0] or weights.shape != experts.shape:
            raise ValueError(f"{type(self).__name__}.dispatch_start: expected x [N, dim] with experts and weights "
                             f"[N, k], got {tuple(x.shape)}, {tuple(experts.shape)}, {tuple(weights.shape)}")
        k = experts.shape[1]
        order, counts = permute(experts, self.num_experts, capacity)
        ctx.num_tokens = x.shape[0]
        ctx.token_index = torch.div(order, k, rounding_mode="floor")
        ctx.slot_weights = weights.reshape(-1).index_select(0, order)
        ctx.counts = counts
        ctx.stage = "started"
        return x.index_select(0, ctx.token_index)

    @abstractmethod
    def dispatch_start(self, x: torch.Tensor, experts: torch.Tensor, weights: torch.Tensor, ctx: DispatchContext,
                       capacity: Optional[int] = None) -> None:
        """Permute ``x: [N, dim]`` by the routed ``experts: [N, k]`` (router ``weights: [N, k]``) and
        start the exchange."""

    @abstractmethod
    def dispatch_wait(self, ctx: DispatchContext) -> Tuple[torch.Tensor, Any]:
        """Finish the exchange: ``(tokens grouped by local expert, rows per local expert)``."""

    @abstractmethod
    def combine(self, y: torch.Tensor, ctx: DispatchContext) -> torch.Tensor:
        """Bring the expert outputs back and combine them into ``[N, dim]``."""

    def dispatch(self, x, experts, weights, ctx: DispatchContext, capacity: Optional[int] = None):
        """``dispatch_start`` then ``dispatch_wait``."""
        self.dispatch_start(x, experts, weights, ctx, capacity)
        return self.dispatch_wait(ctx)

    @staticmethod
    def _weighted_sum(y: torch.Tensor, ctx: DispatchContext) -> torch.Tensor:
        w = ctx.slot_weights.to(y.dtype).unsqueeze(-1)
        out = y.new_zeros((ctx.num_tokens, y.shape[-1]))
        return out.index_add(0, ctx.token_index, y * w)


class LocalTokenDispatcher(TokenDispatcher):
    """Every expert is local: permute by expert, run, unpermute and combine."""

    def dispatch_start(self, x, experts, weights, ctx, capacity=None):
        ctx.tokens = self._permute(x, experts, weights, ctx, capacity)
        ctx.tokens_per_expert = ctx.counts

    def dispatch_wait(self, ctx):
        ctx.expect("started", "LocalTokenDispatcher.dispatch_wait")
        ctx.stage = "dispatched"
        return ctx.tokens, ctx.tokens_per_expert

    def combine(self, y, ctx):
        ctx.expect("dispatched", "LocalTokenDispatcher.combine")
        ctx.stage = "combined"
        ctx.tokens = None
        return self._weighted_sum(y, ctx)


class AllToAllTokenDispatcher(TokenDispatcher):
    """Dropless expert parallelism over ``group`` (``ep_size`` ranks, this one ``ep_rank``), each rank
    owning ``num_experts / ep_size`` consecutive experts. ``async_dispatch``: issue the token exchange
    asynchronously (overlapping whatever the caller runs before ``dispatch_wait``)."""

    def __init__(self, num_experts: int, group, ep_size: int, ep_rank: int, async_dispatch: bool = True,
                 platform: str = "torch") -> None:
        super().__init__(num_experts)
        self.local_experts = check_expert_parallel(num_experts, ep_size)
        self.group = group
        self.ep_size = ep_size
        self.ep_rank = ep_rank
        self.async_dispatch = async_dispatch
        self.platform = platform

    def _plat(self):
        from hyper_parallel.platform import get_platform
        return get_platform(self.platform)

    def dispatch_start(self, x, experts, weights, ctx, capacity=None):
        tokens = self._permute(x, experts, weights, ctx, capacity)
        plat, ep, local = self._plat(), self.ep_size, self.local_experts
        # count exchange: L counts to every rank; the host needs them for the token exchange's splits
        recv = plat.all_to_all_single(ctx.counts, self.group, [local] * ep, [local] * ep)
        ctx.input_splits = tuple(ctx.counts.view(ep, local).sum(1).tolist())
        plan = exchange_plan(recv.view(ep, local).tolist())
        ctx.plan = plan
        if local > 1 and ep > 1:
            ctx.regroup = _chunk_index(plan.chunk_starts, plan.chunk_lengths, x.device)
        if self.async_dispatch:
            ctx.handle = plat.all_to_all_single_start(tokens, self.group, plan.output_splits, ctx.input_splits)
        else:
            ctx.tokens = plat.all_to_all_single(tokens, self.group, plan.output_splits, ctx.input_splits)

    def dispatch_wait(self, ctx):
        ctx.expect("started", "AllToAllTokenDispatcher.dispatch_wait")
        received = ctx.handle.wait() if ctx.handle is not None else ctx.tokens
        ctx.handle = None
        ctx.tokens = None
        if ctx.regroup is not None:
            received = received.index_select(0, ctx.regroup)
        ctx.tokens_per_expert = ctx.plan.tokens_per_expert
        ctx.stage = "dispatched"
        return received, ctx.tokens_per_expert

    def combine(self, y, ctx):
        ctx.expect("dispatched", "AllToAllTokenDispatcher.combine")
        if ctx.regroup is not None:  # back to source-major order
            inverse = torch.empty_like(ctx.regroup)
            inverse[ctx.regroup] = torch.arange(ctx.regroup.numel(), device=ctx.regroup.device)
            y = y.index_select(0, inverse)
        back = self._plat().all_to_all_single(y, self.group, ctx.input_splits, ctx.plan.output_splits)
        ctx.stage = "combined"
        return self._weighted_sum(back, ctx)


class AllGatherTokenDispatcher(TokenDispatcher):
    """The all-gather baseline: gather every rank's tokens and routing, run the local experts on the
    slots routed to them, reduce-scatter the partial outputs back. Dropless only."""

    def __init__(self, num_experts: int, group, ep_size: int, ep_rank: int, platform: str = "torch") -> None:
        super().__init__(num_experts)
        self.local_experts = check_expert_parallel(num_experts, ep_size)
        self.group = group
        self.ep_size = ep_size
        self.ep_rank = ep_rank
        self.platform = platform

    def dispatch_start(self, x, experts, weights, ctx, capacity=None):
        ctx.expect("new", "AllGatherTokenDispatcher.dispatch_start")
        if capacity is not None:
            raise ValueError("AllGatherTokenDispatcher: capacity_factor (token dropping) needs the all-to-all or "
                             "the local dispatcher")
        from hyper_parallel.platform import get_platform
        plat, ep, me = get_platform(self.platform), self.ep_size, self.ep_rank
        n = torch.tensor([x.shape[0]], dtype=torch.int64, device=x.device)
        sizes = tuple(plat.all_gather(n, self.group, 0, [1] * ep, me).tolist())
        x_all = plat.all_gather(x, self.group, 0, sizes, me, grad_partial=True)
        w_all = plat.all_gather(weights, self.group, 0, sizes, me, grad_partial=True)
        e_all = plat.all_gather(experts, self.group, 0, sizes, me)
        k, lo = experts.shape[1], me * self.local_experts
        flat = e_all.reshape(-1)
        mine = torch.nonzero((flat >= lo) & (flat < lo + self.local_experts)).squeeze(1)
        order = mine.index_select(0, torch.argsort(flat.index_select(0, mine), stable=True))
        ctx.num_tokens = x_all.shape[0]
        ctx.token_index = torch.div(order, k, rounding_mode="floor")
        ctx.slot_weights = w_all.reshape(-1).index_select(0, order)
        ctx.counts = torch.bincount(flat.index_select(0, order) - lo, minlength=self.local_experts)
        ctx.tokens = x_all.index_select(0, ctx.token_index)
        ctx.tokens_per_expert = ctx.counts
        ctx.extra["sizes"] = sizes
        ctx.stage = "started"

    def dispatch_wait(self, ctx):
        ctx.expect("started", "AllGatherTokenDispatcher.dispatch_wait")
        ctx.stage = "dispatched"
        return ctx.tokens, ctx.tokens_per_expert

    def combine(self, y, ctx):
        ctx.expect("dispatched", "AllGatherTokenDispatcher.combine")
        from hyper_parallel.platform import get_platform
        partial = self._weighted_sum(y, ctx)
        ctx.stage = "combined"
        ctx.tokens = None
        return get_platform(self.platform).reduce_scatter(partial, "sum", self.group, 0, ctx.extra["sizes"],
                                                          self.ep_rank)
