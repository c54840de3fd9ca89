# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Experts: ``GroupedExperts`` (all local routed experts in one grouped matmul per projection) and the
dense SwiGLU ``FeedForward`` used for the shared experts.

``GroupedExperts`` keeps its weights stacked per expert, named like Hugging Face's per-expert
projections: ``gate_proj`` and ``up_proj`` ``[E, hidden, dim]``, ``down_proj`` ``[E, dim, hidden]``.
Its input is already grouped by local expert (``num_tokens_per_expert`` rows each). Two kernels:

* ``torch._grouped_mm`` (CPU fp32/bf16/fp16, CUDA bf16): one call per projection for every expert,
  ``offs`` = cumulative row counts; experts with zero rows are fine. Its operands must have 16-byte
  aligned strides (checked up front by :func:`hyper_parallel.moe.planning.expert_kernel`), and its
  backward fails on an expanded (stride-0) incoming gradient such as the one ``y.sum().backward()``
  produces, so every grouped output passes through ``_DenseGrad`` (identity forward, contiguous
  gradient).
* a per-expert loop (any dtype/backend), chosen automatically when the grouped kernel cannot run.

Under expert parallelism the weights are ``DTensor`` s sharded on the expert dim (and, with expert
tensor parallelism, on the hidden dim); the forward works on their local shards. The styles in
``styles.py`` set ``dispatcher`` (how tokens reach the experts) and ``tp_group``.
"""
from __future__ import annotations

from typing import Optional, Sequence, Union

import torch
import torch.nn.functional as F
from torch import nn

from hyper_parallel.moe.planning import expert_kernel

__all__ = ["GroupedExperts", "FeedForward", "local_weight"]


def local_weight(p: torch.Tensor) -> torch.Tensor:
    """The local shard of a (possibly DTensor) parameter, as a plain differentiable tensor."""
    to_local = getattr(p, "to_local", None)
    return to_local() if to_local is not None else p


class _DenseGrad(torch.autograd.Function):
    """Identity forward; makes the incoming gradient contiguous (``torch._grouped_mm``'s backward
    rejects expanded gradients: "Invalid strides/sizes, got [0, 0]")."""

    @staticmethod
    def forward(_ctx, x):  # pylint: disable=arguments-differ
        """Identity."""
        return x.view_as(x)

    @staticmethod
    def backward(_ctx, grad):  # pylint: disable=arguments-differ
        """Contiguous gradient (an empty one counts as contiguous whatever its strides: rebuilt)."""
        return grad.new_zeros(grad.shape) if grad.numel() == 0 else grad.contiguous()


def _grouped(x: torch.Tensor, w_t: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    out = torch._grouped_mm(x, w_t, offs=offs)  # pylint: disable=protected-access
    return _DenseGrad.apply(out) if out.requires_grad else out


class GroupedExperts(nn.Module):
    """``num_experts`` SwiGLU experts ``down(silu(gate(x)) * up(x))`` run together.

    Args:
        num_experts: experts held by this module before any sharding.
        dim: input/output width.
        hidden_dim: hidden width of one expert.
        use_grouped_mm: ``None`` = automatic; ``True`` forces ``torch._grouped_mm`` (error when it
            cannot run); ``False`` forces the per-expert loop.
    """

    def __init__(self, num_experts: int, dim: int, hidden_dim: int, use_grouped_mm: Optional[bool] = None) -> None:
        super().__init__()
        for name, value in (("num_experts", num_experts), ("dim", dim), ("hidden_dim", hidden_dim)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"GroupedExperts({name}): expected an int >= 1, got {value!r}")
        self.num_experts = num_experts
        self.dim = dim
        self.hidden_dim = hidden_dim
        self.use_grouped_mm = use_grouped_mm
        self.gate_proj = nn.Parameter(torch.empty(num_experts, hidden_dim, dim))
        self.up_proj = nn.Parameter(torch.empty(num_experts, hidden_dim, dim))
        self.down_proj = nn.Parameter(torch.empty(num_experts, dim, hidden_dim))
        from hyper_parallel.moe._torch.dispatcher import LocalTokenDispatcher  # pylint: disable=cyclic-import
        #: how tokens reach these experts (``LocalTokenDispatcher``; the EP styles install an all-to-all one)
        self.dispatcher = LocalTokenDispatcher(num_experts)
        #: process group of expert tensor parallelism (hidden dim split), set by the ETP/TP styles
        self.tp_group = None
        #: the ranks of ``tp_group`` hold *different* tokens (sequence-parallel shards; the trainer's ETP):
        #: their rows are gathered over ``tp`` before the experts and the partial outputs reduce-scattered back
        #: (Megatron-Core's ETP under sequence parallelism). False: the tp ranks hold the same tokens.
        self.tp_gather_tokens = False
        #: factor applied to the experts' weight gradients (1: none), e.g. ``1 / dp`` for expert weights that no
        #: FSDP reduces and that sum the token gradients of ``dp`` loss replicas (the trainer's ETP)
        self.grad_scale = 1.0
        self.reset_parameters()

    def reset_parameters(self, std: float = 0.02) -> None:
        """Normal(0, std) init of the three projections (local shards when sharded)."""
        with torch.no_grad():
            for p in (self.gate_proj, self.up_proj, self.down_proj):
                nn.init.normal_(local_weight(p), std=std)

    @property
    def num_local_experts(self) -> int:
        """Experts held on this rank."""
        return local_weight(self.gate_proj).shape[0]

    def kernel(self) -> str:
        """``"grouped_mm"`` or ``"loop"``: the kernel the next forward uses (see ``use_grouped_mm``)."""
        w = local_weight(self.gate_proj)
        choice, reason = expert_kernel(w.device.type, str(w.dtype).replace("torch.", ""), w.element_size(),
                                       w.shape[2], w.shape[1], available=hasattr(torch, "_grouped_mm"))
        if self.use_grouped_mm is None:
            return choice
        if self.use_grouped_mm and choice != "grouped_mm":
            raise ValueError(f"GroupedExperts(use_grouped_mm=True): the grouped matmul cannot run: {reason}")
        return "grouped_mm" if self.use_grouped_mm else "loop"

    def forward(self, x: torch.Tensor, num_tokens_per_expert: Union[torch.Tensor, Sequence[int]]) -> torch.Tensor:
        """``x``: ``[rows, dim]`` grouped by local expert; ``num_tokens_per_expert``: rows of each local
        expert (a tensor or a list). Returns ``[rows, dim]``."""
        gate, up, down = (local_weight(p) for p in (self.gate_proj, self.up_proj, self.down_proj))
        if x.dim() != 2 or x.shape[1] != gate.shape[2]:
            raise ValueError(f"GroupedExperts.forward(x): expected [rows, {gate.shape[2]}], got {tuple(x.shape)}")
        if self.grad_scale != 1.0:
            from hyper_parallel.platform import get_platform
            gate, up, down = (get_platform("torch").scale_grad(w, self.grad_scale) for w in (gate, up, down))
        if self.tp_group is not None and self.tp_gather_tokens:
            return self._tp_gathered(x, num_tokens_per_expert, (gate, up, down))
        if self.tp_group is not None:  # replicated input of hidden-split experts: its gradient is partial
            from hyper_parallel.platform import get_platform
            x = get_platform("torch").grad_all_reduce(x, self.tp_group)
        out = self._compute(x, num_tokens_per_expert, gate, up, down)
        if self.tp_group is not None:  # each rank holds a slice of the hidden dim: partial sums
            from hyper_parallel.platform import get_platform
            out = get_platform("torch").all_reduce(out, "sum", self.tp_group)
        return out

    def _tp_gathered(self, x, num_tokens_per_expert, weights) -> torch.Tensor:
        """Expert tensor parallelism over tp ranks that hold different rows: gather every tp rank's rows (and
        its per-expert counts), regroup them expert-major, run the hidden-split experts (partial outputs),
        put the rows back in gathered order and reduce-scatter: each rank gets its own rows' full outputs.
        Gradients: the gather's adjoint is a reduce-scatter (the partial input gradients summed), the
        reduce-scatter's an all-gather."""
        import torch.distributed as dist  # pylint: disable=import-outside-toplevel
        from hyper_parallel.platform import get_platform
        platform, group = get_platform("torch"), self.tp_group
        tp, rank = dist.get_world_size(group), dist.get_rank(group)
        counts = torch.as_tensor(num_tokens_per_expert, dtype=torch.int64, device=x.device).reshape(1, -1)
        every = [torch.zeros_like(counts) for _ in range(tp)]
        dist.all_gather(every, counts, group=group)
        table = torch.cat(every, 0)  # [tp, local experts]
        rows = table.sum(1).tolist()
        gathered = platform.all_gather(x, group, 0, rows, rank, grad_partial=True)
        starts = torch.cumsum(torch.cat([table.new_zeros(1), table.reshape(-1)]), 0)[:-1].reshape(table.shape)
        order = [torch.arange(int(starts[s, e]), int(starts[s, e] + table[s, e]))
                 for e in range(table.shape[1]) for s in range(tp)]
        index = torch.cat(order).to(x.device) if order else torch.zeros(0, dtype=torch.int64, device=x.device)
        y = self._compute(gathered.index_select(0, index), table.sum(0), *weights)
        back = y.new_zeros((gathered.shape[0], y.shape[1])).index_copy(0, index, y)
        return platform.reduce_scatter(back, "sum", group, 0, rows, rank)

    def _compute(self, x, num_tokens_per_expert, gate, up, down) -> torch.Tensor:
        """The local experts on rows grouped by expert (no tensor-parallel reduction)."""
        if self.kernel() == "grouped_mm":
            counts = torch.as_tensor(num_tokens_per_expert, device=x.device)
            offs = torch.cumsum(counts, 0, dtype=torch.int32)
            h = F.silu(_grouped(x, gate.transpose(-2, -1), offs)) * _grouped(x, up.transpose(-2, -1), offs)
            out = _grouped(h, down.transpose(-2, -1), offs)
        else:
            out = self._loop(x, gate, up, down, num_tokens_per_expert)
        return out

    @staticmethod
    def _loop(x, gate, up, down, num_tokens_per_expert) -> torch.Tensor:
        counts = num_tokens_per_expert.tolist() if isinstance(num_tokens_per_expert, torch.Tensor) \
            else list(num_tokens_per_expert)
        if len(counts) != gate.shape[0] or sum(counts) != x.shape[0]:
            raise ValueError(f"GroupedExperts.forward: num_tokens_per_expert {counts} must have one entry per local "
                             f"expert ({gate.shape[0]}) summing to the {x.shape[0]} input rows")
        outs = []
        for e, rows in enumerate(x.split(counts, 0)):
            if rows.shape[0]:
                h = F.silu(rows @ gate[e].transpose(0, 1)) * (rows @ up[e].transpose(0, 1))
                outs.append(h @ down[e].transpose(0, 1))
        if not outs:
            # keep the weights in the graph so that every expert gets a (zero) gradient
            return x.new_zeros((0, down.shape[1])) + 0.0 * (x.sum() + gate.sum() + up.sum() + down.sum())
        return torch.cat(outs, 0) if len(outs) > 1 else outs[0]

    def extra_repr(self) -> str:
        """Sizes, for ``repr``."""
        return f"num_experts={self.num_experts}, dim={self.dim}, hidden_dim={self.hidden_dim}"


class FeedForward(nn.Module):
    """SwiGLU feed-forward ``down_proj(silu(gate_proj(x)) * up_proj(x))`` (the shared experts)."""

    def __init__(self, dim: int, hidden_dim: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden_dim, bias=False)
        self.up_proj = nn.Linear(dim, hidden_dim, bias=False)
        self.down_proj = nn.Linear(hidden_dim, dim, bias=False)
        self.reset_parameters()

    def reset_parameters(self, std: float = 0.02) -> None:
        """Normal(0, std) init."""
        for lin in (self.gate_proj, self.up_proj, self.down_proj):
            nn.init.normal_(lin.weight, std=std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Same shape in and out."""
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
