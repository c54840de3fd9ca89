# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``MoE``: router + token dispatcher + routed ``GroupedExperts`` + optional shared experts, with
load balancing by expert bias or by an auxiliary loss (``MoEAuxLossAutoScaler``).

Submodule names follow Hugging Face's Qwen3-MoE / DeepSeek-V3 blocks where they have a counterpart:
``router.gate`` (their ``mlp.gate``), ``experts`` (stacked per-expert ``gate_proj``/``up_proj``/
``down_proj``), ``shared_experts`` (DeepSeek-V3's ``mlp.shared_experts``); ``expert_bias`` is
DeepSeek-V3's ``gate.e_score_correction_bias``.

Token counting happens once per forward: a forward re-run by activation checkpointing (inside the
backward pass) does not count again, so ``tokens_per_expert`` is the same with and without
checkpointing, and the auxiliary loss gradient is injected exactly once.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn
from torch.profiler import record_function

from hyper_parallel.moe.api import MoEConfig
from hyper_parallel.moe.planning import capacity as capacity_of
from hyper_parallel.moe._torch.dispatcher import DispatchContext
from hyper_parallel.moe._torch.experts import FeedForward, GroupedExperts
from hyper_parallel.moe._torch.router import TokenChoiceTopKRouter

__all__ = ["MoE", "MoEAuxLossAutoScaler", "in_recompute"]


def in_recompute() -> bool:
    """True while autograd runs a backward pass: a forward executed then is a recomputation
    (``torch.utils.checkpoint``, reentrant or not), whose routing must not be counted again."""
    return torch._C._current_graph_task_id() != -1  # pylint: disable=protected-access


class MoEAuxLossAutoScaler(torch.autograd.Function):
    """``apply(output, aux_loss)`` returns ``output`` unchanged and, in backward, feeds ``aux_loss`` the
    gradient ``main_loss_backward_scale`` (1.0 by default), as if ``aux_loss`` had been added to the
    loss: the reported main loss stays clean. With gradient accumulation over ``n`` micro-batches
    whose losses are divided by ``n``, call ``set_loss_scale(1 / n)``."""

    main_loss_backward_scale: float = 1.0

    @staticmethod
    def forward(ctx, output, aux_loss):  # pylint: disable=arguments-differ
        """Identity on ``output``; remembers ``aux_loss``."""
        ctx.save_for_backward(aux_loss)
        return output.view_as(output)

    @staticmethod
    def backward(ctx, grad):  # pylint: disable=arguments-differ
        """``grad`` passes through; ``aux_loss`` gets ``main_loss_backward_scale``."""
        (aux_loss,) = ctx.saved_tensors
        return grad, torch.full_like(aux_loss, MoEAuxLossAutoScaler.main_loss_backward_scale)

    @staticmethod
    def set_loss_scale(scale: float) -> None:
        """Gradient the auxiliary losses receive (the scale applied to the main loss)."""
        if isinstance(scale, torch.Tensor):
            scale = float(scale.detach())
        MoEAuxLossAutoScaler.main_loss_backward_scale = float(scale)


class MoE(nn.Module):
    """A mixture-of-experts feed-forward block. ``forward(x)`` for ``x: [batch, seq, dim]`` (or ``[N, dim]``).

    Attributes:
        router: :class:`TokenChoiceTopKRouter` (its ``gate`` is the routing ``nn.Linear``).
        experts: :class:`GroupedExperts`; its ``dispatcher`` decides how tokens reach them.
        shared_experts: :class:`FeedForward` or ``None``; computed while the token exchange is in flight.
        expert_bias: ``[E]`` float32 buffer, used for the selection when ``config.uses_expert_bias``.
        tokens_per_expert: ``[E]`` int64 buffer: this rank's routed slots per expert, accumulated over
            the training forwards since the last optimizer step (see ``register_moe_load_balancing_hook``).
        aux_loss: this rank's share of the last auxiliary loss plus z-loss (detached), when either is on.
        token_group, sequence_group, data_parallel_size: see :meth:`set_token_groups` (set by the
            parallelize functions; one process: None, None, 1).
    """

    expert_bias: torch.Tensor
    tokens_per_expert: torch.Tensor

    def __init__(self, config: MoEConfig) -> None:
        super().__init__()
        if not isinstance(config, MoEConfig):
            raise TypeError(f"MoE(config): expected a MoEConfig, got {type(config).__name__}")
        self.config = config
        c = config
        self.router = TokenChoiceTopKRouter(c.dim, c.num_experts, c.top_k, c.score_func, c.route_norm, c.route_scale,
                                            c.n_groups, c.topk_groups)
        self.experts = GroupedExperts(c.num_experts, c.dim, c.hidden_dim, c.use_grouped_mm)
        self.shared_experts = FeedForward(c.dim, c.shared_hidden_dim) if c.num_shared_experts else None
        self.register_buffer("expert_bias", torch.zeros(c.num_experts, dtype=torch.float32))
        self.register_buffer("tokens_per_expert", torch.zeros(c.num_experts, dtype=torch.int64), persistent=False)
        self.aux_loss: Optional[torch.Tensor] = None
        self.token_group = self.sequence_group = None
        self.averaged_sequence_ranks = 1
        self.data_parallel_size = 1

    def reset_parameters(self, std: float = 0.02) -> None:
        """Normal(0, std) init of every weight; zero bias and counts."""
        self.router.reset_parameters(std)
        self.experts.reset_parameters(std)
        if self.shared_experts is not None:
            self.shared_experts.reset_parameters(std)
        with torch.no_grad():
            self.expert_bias.zero_()
            self.tokens_per_expert.zero_()  # pylint: disable=no-member

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Route, dispatch, run the experts (and the shared experts meanwhile), combine."""
        c = self.config
        if x.shape[-1] != c.dim or x.dim() not in (2, 3):
            raise ValueError(f"MoE.forward(x): expected [batch, seq, {c.dim}] or [tokens, {c.dim}], got "
                             f"{tuple(x.shape)}")
        flat = x.reshape(-1, c.dim)
        bias = self.expert_bias if c.uses_expert_bias else None
        sinkhorn = c.load_balance == "sinkhorn" and self.training
        route = self.router(flat, bias, sinkhorn=sinkhorn, group=self.token_group if sinkhorn else None)
        if self.training and not in_recompute():
            with torch.no_grad():
                counts = torch.bincount(route.experts.reshape(-1), minlength=c.num_experts)
                self.tokens_per_expert.add_(counts)  # pylint: disable=no-member
        dispatcher = self.experts.dispatcher
        ctx = DispatchContext()
        cap = capacity_of(flat.shape[0], c.top_k, c.num_experts, c.capacity_factor)
        dispatcher.dispatch_start(flat, route.experts, route.weights, ctx, cap)
        shared = None
        if self.shared_experts is not None:  # while the token exchange is in flight
            with record_function("hp.moe.compute.shared_experts"):
                shared = self.shared_experts(flat)
        tokens, per_expert = dispatcher.dispatch_wait(ctx)
        with record_function("hp.moe.compute.experts"):
            y = self.experts(tokens, per_expert)
        out = dispatcher.combine(y, ctx)
        if shared is not None:
            out = out + shared
        if (c.uses_aux_loss or c.z_loss_coeff > 0) and self.training and torch.is_grad_enabled():
            aux = self._router_losses(route, x)
            self.aux_loss = aux.detach()
            out = MoEAuxLossAutoScaler.apply(out, aux)
        return out.view(x.shape)

    def set_token_groups(self, token_group=None, sequence_group=None, data_parallel_size: int = 1,
                         averaged_sequence_ranks: int = 1) -> None:
        """Where the balancing statistics come from when the loss's tokens are spread over ranks.

        Args:
            token_group: the ranks holding distinct tokens of the one global batch (data parallel x the
                ranks splitting a sequence); the batch-level auxiliary loss and the z-loss use the expert
                counts and token total summed over it (global-batch statistics: the same value as one
                process on the whole batch). None: this rank's tokens alone.
            sequence_group: the ranks splitting one sequence (sequence / context parallel); the
                sequence-level auxiliary loss sums each sequence's counts over it. None: whole sequences.
            data_parallel_size: the number of data-parallel replicas whose gradients are averaged;
                each rank's share of the losses gets this gradient factor so that the averaged gradient
                is the gradient of the global loss.
            averaged_sequence_ranks: how many ranks of ``sequence_group`` have their gradients averaged
                rather than summed (context parallel: ``cp``; tensor-parallel ranks are summed): each rank's
                share of the sequence-level auxiliary loss gets this factor.
        """
        if isinstance(data_parallel_size, bool) or not isinstance(data_parallel_size, int) or data_parallel_size < 1:
            raise ValueError(f"MoE.set_token_groups(data_parallel_size): expected an int >= 1, got "
                             f"{data_parallel_size!r}")
        if isinstance(averaged_sequence_ranks, bool) or not isinstance(averaged_sequence_ranks, int) \
                or averaged_sequence_ranks < 1:
            raise ValueError(f"MoE.set_token_groups(averaged_sequence_ranks): expected an int >= 1, got "
                             f"{averaged_sequence_ranks!r}")
        self.token_group, self.sequence_group, self.data_parallel_size = token_group, sequence_group, data_parallel_size
        self.averaged_sequence_ranks = averaged_sequence_ranks

    def _router_losses(self, route, x: torch.Tensor) -> torch.Tensor:
        """This rank's share of the auxiliary loss plus the z-loss (their sum over the token group, with
        the data-parallel gradient factor, is the loss of the global batch)."""
        c = self.config
        total = route.scores.new_zeros(())
        if c.uses_aux_loss:
            total = total + self._aux_loss(route, x)
        if c.z_loss_coeff > 0:
            total = total + self._z_loss(route)
        return total

    def _global_counts(self, counts: torch.Tensor, group) -> torch.Tensor:
        if group is None:
            return counts
        import torch.distributed as dist  # pylint: disable=import-outside-toplevel
        counts = counts.clone()
        dist.all_reduce(counts, group=group)
        return counts

    def _batch_stats(self, slots: torch.Tensor, dtype) -> torch.Tensor:
        """``[E + 1]``: the expert counts and the token total over the token group (one all-reduce)."""
        c = self.config
        local = torch.cat([torch.bincount(slots.reshape(-1), minlength=c.num_experts),
                           torch.tensor([slots.shape[0]], device=slots.device)]).to(torch.float64)
        return self._global_counts(local, self.token_group).to(dtype)

    def _z_loss(self, route) -> torch.Tensor:
        c = self.config
        stats = self._batch_stats(route.experts, route.logits.dtype)
        lse = torch.logsumexp(route.logits, dim=-1)
        return c.z_loss_coeff * (lse * lse).sum() / stats[-1] * self.data_parallel_size

    def _aux_loss(self, route, x: torch.Tensor) -> torch.Tensor:
        c = self.config
        scores = route.scores
        probs = scores if c.score_func == "softmax" else scores / scores.sum(-1, keepdim=True)
        slots = route.experts
        if c.aux_loss_level == "sequence" and x.dim() == 3:
            b, s = x.shape[0], x.shape[1]
            counts = torch.zeros(b, c.num_experts + 1, dtype=torch.float64, device=probs.device)
            counts.scatter_add_(1, slots.reshape(b, s * c.top_k),
                                torch.ones_like(slots, dtype=torch.float64).view(b, -1))
            counts[:, -1] = s
            counts = self._global_counts(counts, self.sequence_group).to(probs.dtype)
            seq = counts[:, -1:]  # the whole sequence's length over the ranks splitting it
            f = counts[:, :-1] / (seq * c.top_k)
            p = probs.view(b, s, c.num_experts).sum(1) / seq
            return (c.aux_loss_coeff * c.num_experts * (f * p).sum(-1).mean()
                    * self.averaged_sequence_ranks)
        stats = self._batch_stats(slots, probs.dtype)
        n = stats[-1]
        f = stats[:-1] / (n * c.top_k)
        return (c.aux_loss_coeff * c.num_experts * (f * (probs.sum(0) / n)).sum()
                * self.data_parallel_size)
