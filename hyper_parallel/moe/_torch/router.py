# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``TokenChoiceTopKRouter``: the vectorised form of ``hyper_parallel.moe.routing`` (same semantics,
tested against it token by token)."""
from __future__ import annotations

from typing import NamedTuple, Optional

import torch
from torch import nn

from hyper_parallel.moe.api import SCORE_FUNCS
from hyper_parallel.moe.routing import ROUTE_NORM_EPS

__all__ = ["TokenChoiceTopKRouter", "RouterOutput", "sinkhorn_balance", "balance_top_k"]


def sinkhorn_balance(logits: torch.Tensor, group=None, iters: Optional[int] = None) -> torch.Tensor:
    """``diag(r) exp(logits - max) diag(c)`` with ``r``, ``c`` from ``iters`` Sinkhorn iterations: every row (token)
    sums to 1 and every column (expert) to ``N_total / E``, where the column sums run over the tokens of every rank
    of ``group`` (one ``[E]`` all-reduce per iteration; None: this rank's tokens). Each token's top-k of it spreads
    a batch evenly over the experts even when the tokens' own scores barely differ (Megatron-Core's ``sinkhorn``)."""
    from hyper_parallel.moe.api import SINKHORN_ITERS  # pylint: disable=import-outside-toplevel
    iters = SINKHORN_ITERS if iters is None else iters
    logits = logits.double()
    peak = logits.max()
    if group is not None:
        import torch.distributed as dist  # pylint: disable=import-outside-toplevel
        dist.all_reduce(peak, op=dist.ReduceOp.MAX, group=group)
    cost = torch.exp(logits - peak)
    n = torch.tensor([float(cost.shape[0])], dtype=cost.dtype)
    if group is not None:
        dist.all_reduce(n, group=group)
    col = torch.ones(cost.shape[1], dtype=cost.dtype)
    row = torch.ones(cost.shape[0], dtype=cost.dtype)
    for _ in range(iters):
        row = 1.0 / ((cost * col).sum(1) + 1e-30)
        sums = (cost * row.unsqueeze(1)).sum(0)
        if group is not None:
            dist.all_reduce(sums, group=group)
        col = (n / cost.shape[1]) / (sums + 1e-30)
    return (cost * col * row.unsqueeze(1)).float()


def balance_top_k(selection: torch.Tensor, top_k: int, group=None, iters: Optional[int] = None,
                  tol: Optional[float] = None) -> torch.Tensor:
    """``selection - offsets`` with per-expert ``offsets`` found so that each token's top-k of it gives every expert
    the mean load ``N_total * k / E`` within ``tol`` (relative): up to ``iters`` rounds of one ``[E]`` count
    all-reduce over ``group`` (None: this rank's tokens), each moving the over-loaded experts' offsets up and the
    under-loaded ones' down by a step that shrinks by ``0.8`` per round (starting at a quarter of the selection's
    global range), stopping at the first round within ``tol`` (a decision made on the summed counts, so every rank
    stops together and selects exactly as one process on the whole batch). A soft balanced plan (Sinkhorn) does not
    make the *hard* top-k balanced when the tokens' scores barely differ; this turns it into one that is."""
    from hyper_parallel.moe.api import BALANCE_ITERS, BALANCE_TOL  # pylint: disable=import-outside-toplevel
    iters = BALANCE_ITERS if iters is None else iters
    tol = BALANCE_TOL if tol is None else tol
    sel = selection.double()
    num_experts = sel.shape[1]
    finite = sel[torch.isfinite(sel)]  # group-limited routing masks experts with -inf
    head = torch.stack([finite.max(), -finite.min(), torch.tensor(float(sel.shape[0]), dtype=sel.dtype)]) \
        if finite.numel() else torch.tensor([float("-inf"), float("-inf"), float(sel.shape[0])], dtype=sel.dtype)
    if group is not None:
        import torch.distributed as dist  # pylint: disable=import-outside-toplevel
        total = head[2:].clone()
        dist.all_reduce(total, group=group)
        dist.all_reduce(head, op=dist.ReduceOp.MAX, group=group)
        head[2] = total[0]
    target = float(head[2]) * top_k / num_experts
    step = max(float(head[0] + head[1]), 1e-12) / 4
    offsets = torch.zeros(num_experts, dtype=sel.dtype)
    for _ in range(iters):
        counts = torch.bincount((sel - offsets).topk(top_k, dim=-1).indices.reshape(-1),
                                minlength=num_experts).to(sel.dtype)
        if group is not None:
            dist.all_reduce(counts, group=group)
        if float(counts.max()) <= target * (1 + tol) and float(counts.min()) >= target * (1 - tol):
            break
        offsets += step * torch.sign(counts - target)
        step *= 0.8
    return (sel - offsets).to(selection.dtype)


class RouterOutput(NamedTuple):
    """What the router hands to the dispatcher and the load-balancing code.

    Attributes:
        weights: ``[N, k]`` combine weights (float32; from the unbiased scores).
        experts: ``[N, k]`` selected experts (int64), in descending selection-score order.
        scores: ``[N, E]`` router scores (float32; softmax or sigmoid), differentiable.
        logits: ``[N, E]`` router logits (float32), differentiable (the z-loss reads them).
    """

    weights: torch.Tensor
    experts: torch.Tensor
    scores: torch.Tensor
    logits: Optional[torch.Tensor] = None


class TokenChoiceTopKRouter(nn.Module):
    """Each token picks its ``top_k`` experts (token choice).

    Submodule ``gate``: ``nn.Linear(dim, num_experts, bias=False)`` (Hugging Face's ``mlp.gate``).
    ``forward(x, expert_bias=None)`` on ``x: [N, dim]`` returns a :class:`RouterOutput`. The
    ``expert_bias`` (auxiliary-loss-free balancing) only shifts the selection; the combine weights
    come from the unbiased scores. Group-limited routing, ``route_norm`` and ``route_scale`` follow
    ``hyper_parallel.moe.routing``.
    """

    def __init__(self, dim: int, num_experts: int, top_k: int, score_func: str = "softmax",  # pylint: disable=too-many-arguments
                 route_norm: bool = False, route_scale: float = 1.0, n_groups: int = 1, topk_groups: int = 1) -> None:
        super().__init__()
        if score_func not in SCORE_FUNCS:
            raise ValueError(f"TokenChoiceTopKRouter(score_func): expected one of {SCORE_FUNCS}, got {score_func!r}")
        if not 1 <= top_k <= num_experts:
            raise ValueError(f"TokenChoiceTopKRouter(top_k): expected 1 <= top_k <= num_experts={num_experts}, "
                             f"got {top_k}")
        if num_experts % n_groups or not 1 <= topk_groups <= n_groups:
            raise ValueError(f"TokenChoiceTopKRouter(n_groups={n_groups}, topk_groups={topk_groups}): n_groups must "
                             f"divide num_experts={num_experts} and 1 <= topk_groups <= n_groups")
        self.gate = nn.Linear(dim, num_experts, bias=False)
        self.num_experts = num_experts
        self.top_k = top_k
        self.score_func = score_func
        self.route_norm = route_norm
        self.route_scale = route_scale
        self.n_groups = n_groups
        self.topk_groups = topk_groups

    def reset_parameters(self, std: float = 0.02) -> None:
        """Normal(0, std) init of the gate."""
        nn.init.normal_(self.gate.weight, std=std)

    def _group_mask(self, selection: torch.Tensor) -> torch.Tensor:
        n, e = selection.shape
        grouped = selection.view(n, self.n_groups, e // self.n_groups)
        group_score = grouped.topk(min(2, grouped.shape[-1]), dim=-1).values.sum(-1)  # [N, G]
        keep = group_score.topk(self.topk_groups, dim=-1).indices
        mask = torch.zeros_like(group_score, dtype=torch.bool).scatter_(1, keep, True)
        return mask.unsqueeze(-1).expand_as(grouped).reshape(n, e)

    def forward(self, x: torch.Tensor, expert_bias: Optional[torch.Tensor] = None, *, sinkhorn: bool = False,
                group=None) -> RouterOutput:
        """Route ``x: [N, dim]``. ``sinkhorn``: select on the Sinkhorn-balanced probabilities (column sums over the
        tokens of every rank of ``group`` made equal), see :func:`sinkhorn_balance`."""
        logits = self.gate(x).float()
        scores = torch.softmax(logits, dim=-1) if self.score_func == "softmax" else torch.sigmoid(logits)
        with torch.no_grad():
            selection = scores if expert_bias is None else scores + expert_bias.float()
            if sinkhorn:
                selection = sinkhorn_balance(logits, group)
            if self.n_groups > 1:
                selection = selection.masked_fill(~self._group_mask(selection), float("-inf"))
            if sinkhorn:  # after the group limit: the offsets balance the top-k actually taken
                selection = balance_top_k(selection, self.top_k, group)
            experts = selection.topk(self.top_k, dim=-1).indices
        weights = scores.gather(1, experts)
        if self.route_norm:
            weights = weights / (weights.sum(dim=-1, keepdim=True) + ROUTE_NORM_EPS)
        if self.route_scale != 1.0:
            weights = weights * self.route_scale
        return RouterOutput(weights, experts, scores, logits)
