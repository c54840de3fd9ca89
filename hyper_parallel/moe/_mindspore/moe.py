# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""MindSpore MoE layers (PyNative): ``TokenChoiceTopKRouter``, ``GroupedExperts``, ``FeedForward``, ``MoE``
and expert parallelism with a dropless uneven all-to-all (``expert_parallel``).

Same configuration (:class:`hyper_parallel.moe.MoEConfig`), parameter names and shapes as the torch layers
(``router.gate``, ``experts.gate_proj/up_proj/down_proj`` of shapes ``[E, H, D]``, ``[E, H, D]``,
``[E, D, H]``, ``shared_experts``), so checkpoints move between backends. Differences forced by
MindSpore 2.10 on CPU, each documented in ``docs/moe.md``: the experts run as a per-expert loop (no grouped
matmul kernel); the token all-to-all is the platform's emulated, synchronous ``all_to_all_single`` (the
shared experts do not overlap it); token dropping (``capacity_factor``), the sequence-level auxiliary loss,
the z-loss and Sinkhorn routing are refused with a clear error; the expert bias is updated by
:func:`update_expert_bias` (the pure ``bias_update`` rule) rather than an optimizer hook. Group-limited routing
(``n_groups > 1``, DeepSeek-V3) and the batch-level auxiliary loss (Qwen3-MoE; injected into the backward by
:class:`AuxLossScaler` as torch's ``MoEAuxLossAutoScaler`` does) follow the torch layers.
"""
from __future__ import annotations

from typing import List, Sequence

import numpy as np
import mindspore as ms
from mindspore import mint, nn, ops
from mindspore.common.initializer import Normal, initializer

from hyper_parallel.core.placement import Shard
from hyper_parallel.core.spec import DTensorSpec
from hyper_parallel.moe.api import MoEConfig, check_expert_parallel
from hyper_parallel.moe.balance import bias_update
from hyper_parallel.moe.routing import ROUTE_NORM_EPS
from hyper_parallel.platform.mindspore.collectives import raw_all_gather, raw_all_reduce
from hyper_parallel.platform.mindspore.platform import PLATFORM
from hyper_parallel.platform.mindspore.runtime import is_replaying

__all__ = ["TokenChoiceTopKRouter", "GroupedExperts", "FeedForward", "MoE", "AuxLossScaler", "expert_parallel",
           "update_expert_bias"]

_SPECS_ATTR = "_hp_param_specs"


def _init(shape, std: float = 0.02) -> ms.Parameter:
    """Normal(0, std) from MindSpore's seeded generator (``mindspore.set_seed``: identical on every rank)."""
    return ms.Parameter(initializer(Normal(std), shape, ms.float32))


class TokenChoiceTopKRouter(nn.Cell):
    """Each token picks its ``top_k`` experts; ``construct(x, expert_bias=None)`` on ``x: [N, dim]`` returns
    ``(weights [N, k], experts [N, k], scores [N, E])``. The bias only shifts the selection."""

    def __init__(self, dim: int, num_experts: int, top_k: int, score_func: str = "softmax",  # pylint: disable=too-many-arguments
                 route_norm: bool = False, route_scale: float = 1.0, n_groups: int = 1, topk_groups: int = 1) -> None:
        super().__init__()
        if not 1 <= top_k <= num_experts:
            raise ValueError(f"TokenChoiceTopKRouter(top_k): expected 1 <= top_k <= num_experts={num_experts}, "
                             f"got {top_k}")
        if num_experts % n_groups or not 1 <= topk_groups <= n_groups:
            raise ValueError(f"TokenChoiceTopKRouter(n_groups={n_groups}, topk_groups={topk_groups}): n_groups must "
                             f"divide num_experts={num_experts} and 1 <= topk_groups <= n_groups")
        self.gate = nn.Dense(dim, num_experts, has_bias=False)
        self.num_experts, self.top_k, self.score_func = num_experts, top_k, score_func
        self.route_norm, self.route_scale = route_norm, route_scale
        self.n_groups, self.topk_groups = n_groups, topk_groups

    def _group_masked(self, selection):
        """``selection`` with the experts outside each token's ``topk_groups`` best groups at ``-inf`` (a group's
        score: the sum of its top-2 selection scores, as ``hyper_parallel.moe.routing.group_scores``)."""
        n, e = selection.shape
        grouped = selection.reshape(n, self.n_groups, e // self.n_groups)
        group_score = ops.topk(grouped, min(2, grouped.shape[-1]))[0].sum(-1)  # [N, G]
        keep = ops.topk(group_score, self.topk_groups)[1]  # [N, topk_groups]
        groups = ms.Tensor(np.arange(self.n_groups, dtype=np.int32))
        chosen = (keep.astype(ms.int32).unsqueeze(-1) == groups).astype(ms.int32).sum(1) > 0  # [N, G]
        mask = chosen.unsqueeze(-1).broadcast_to(grouped.shape).reshape(n, e)
        return mint.where(mask, selection, ms.Tensor(float("-inf"), selection.dtype))

    def construct(self, x, expert_bias=None):
        """Route ``x: [N, dim]``."""
        logits = self.gate(x).astype(ms.float32)
        scores = mint.softmax(logits, -1) if self.score_func == "softmax" else mint.sigmoid(logits)
        selection = ops.stop_gradient(scores if expert_bias is None else scores + expert_bias)
        if self.n_groups > 1:
            selection = self._group_masked(selection)
        experts = ops.topk(selection, self.top_k)[1]
        weights = mint.gather(scores, 1, experts)
        if self.route_norm:
            weights = weights / (weights.sum(-1, keepdims=True) + ROUTE_NORM_EPS)
        if self.route_scale != 1.0:
            weights = weights * self.route_scale
        return weights, experts, scores


class GroupedExperts(nn.Cell):
    """``num_experts`` SwiGLU experts ``down(silu(gate(x)) * up(x))``; ``construct(x, counts)`` runs the rows
    of ``x`` (grouped by expert, ``counts[e]`` rows each) through their experts, one matmul chain per
    expert (MindSpore has no grouped-matmul CPU kernel); experts with zero tokens are skipped."""

    def __init__(self, dim: int, hidden_dim: int, num_experts: int) -> None:
        super().__init__()
        self.gate_proj = _init((num_experts, hidden_dim, dim))
        self.up_proj = _init((num_experts, hidden_dim, dim))
        self.down_proj = _init((num_experts, dim, hidden_dim))
        self.num_experts = num_experts

    def construct(self, x, counts: Sequence[int]):
        """``x: [sum(counts), dim]`` grouped by local expert."""
        if len(counts) != self.gate_proj.shape[0]:
            raise ValueError(f"GroupedExperts: {len(counts)} counts for {self.gate_proj.shape[0]} local experts")
        outs, start = [], 0
        for e, n in enumerate(counts):
            if n:
                rows = mint.narrow(x, 0, start, n)
                h = mint.nn.functional.silu(mint.matmul(rows, self.gate_proj[e].T)) * mint.matmul(rows,
                                                                                                 self.up_proj[e].T)
                outs.append(mint.matmul(h, self.down_proj[e].T))
                start += n
        if not outs:  # no token here (x has 0 rows): an empty result that still depends on x and the weights,
            # so this rank's backward of the token exchange runs like its peers' (never pruned)
            return x * 0.0 + self.down_proj.sum() * 0.0
        return outs[0] if len(outs) == 1 else mint.cat(outs, 0)


class FeedForward(nn.Cell):
    """SwiGLU feed-forward ``down_proj(silu(gate_proj(x)) * up_proj(x))`` (the shared experts)."""

    def __init__(self, dim: int, hidden_dim: int) -> None:
        super().__init__()
        self.gate_proj = nn.Dense(dim, hidden_dim, has_bias=False)
        self.up_proj = nn.Dense(dim, hidden_dim, has_bias=False)
        self.down_proj = nn.Dense(hidden_dim, dim, has_bias=False)

    def construct(self, x):
        """The SwiGLU of ``x``."""
        return self.down_proj(mint.nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class AuxLossScaler(nn.Cell):
    """``scaler(output, aux_loss)`` returns ``output`` unchanged and, in backward, gives ``aux_loss`` the gradient
    ``AuxLossScaler.scale`` (1.0; ``1 / n`` under gradient accumulation over ``n`` micro-batches), as if it had
    been added to the loss while the reported loss stays clean (torch's ``MoEAuxLossAutoScaler``)."""

    scale: float = 1.0

    def construct(self, output, aux_loss):  # pylint: disable=unused-argument
        """Identity on ``output``."""
        return output

    def bprop(self, output, aux_loss, out, grad):  # pylint: disable=unused-argument
        """``grad`` passes through; ``aux_loss`` gets the scale."""
        return grad, ops.ones_like(aux_loss) * AuxLossScaler.scale


def _check_config(c: MoEConfig) -> None:
    for bad, why in ((c.capacity_factor is not None, f"token dropping (capacity_factor={c.capacity_factor})"),
                     (c.uses_aux_loss and c.aux_loss_level != "batch",
                      f"the sequence-level auxiliary loss (aux_loss_level={c.aux_loss_level!r})"),
                     (c.z_loss_coeff > 0, f"the router z-loss (z_loss_coeff={c.z_loss_coeff})"),
                     (c.load_balance == "sinkhorn", "Sinkhorn routing (load_balance='sinkhorn')")):
        if bad:
            raise ValueError(f"MoE on MindSpore: {why} is not supported; it needs per-op autograd hooks and "
                             "kernels that MindSpore 2.10 PyNative lacks on CPU (use load_balance='expert_bias' "
                             ", 'aux_loss' at batch level or None, dropless; or the torch backend)")


class MoE(nn.Cell):
    """A mixture-of-experts block; ``construct(x)`` for ``x: [batch, seq, dim]`` or ``[N, dim]``.

    Attributes: ``router``, ``experts`` (:class:`GroupedExperts`), ``shared_experts`` (:class:`FeedForward`
    or None), ``expert_bias`` (``[E]`` float32, used when ``load_balance="expert_bias"``),
    ``tokens_per_expert`` (this rank's routed slots per expert since the last :func:`update_expert_bias`).
    """

    def __init__(self, config: MoEConfig) -> None:
        super().__init__()
        if not isinstance(config, MoEConfig):
            raise TypeError(f"MoE(config): expected a MoEConfig, got {type(config).__name__}")
        _check_config(config)
        c = self.config = config
        self.router = TokenChoiceTopKRouter(c.dim, c.num_experts, c.top_k, c.score_func, c.route_norm,
                                            c.route_scale, c.n_groups, c.topk_groups)
        self.experts = GroupedExperts(c.dim, c.hidden_dim, c.num_experts)
        self.shared_experts = FeedForward(c.dim, c.hidden_dim * c.num_shared_experts) if c.num_shared_experts \
            else None
        self.expert_bias = ms.Tensor(np.zeros(c.num_experts, np.float32))
        self.tokens_per_expert = np.zeros(c.num_experts, np.int64)
        self.ep_mesh = None
        self.aux_scaler = AuxLossScaler() if c.uses_aux_loss else None
        self.aux_loss = None
        self.token_group, self.data_parallel_size = None, 1

    def set_token_groups(self, token_group=None, data_parallel_size: int = 1) -> None:
        """The ranks holding distinct tokens of one global batch (the auxiliary loss uses their summed expert
        counts and token total) and the number of data-parallel replicas whose gradients are averaged (each
        rank's share gets this gradient factor), as torch's ``MoE.set_token_groups``."""
        self.token_group, self.data_parallel_size = token_group, int(data_parallel_size)

    def _aux_loss(self, scores, counts: np.ndarray, n: int):
        """Batch-level ``coeff * E * sum_e f_e * P_e`` with ``f_e`` the share of routed slots and ``P_e`` the mean
        routing probability (global statistics over ``token_group``; the counts are constants)."""
        c = self.config
        stats = np.concatenate([counts.astype(np.float64), [float(n)]])
        if self.token_group is not None:
            stats = raw_all_reduce(ms.Tensor(stats.astype(np.float32)), "sum", self.token_group).asnumpy()
        total = float(stats[-1])
        f = ms.Tensor((stats[:-1] / (total * c.top_k)).astype(np.float32))
        probs = scores if c.score_func == "softmax" else scores / scores.sum(-1, keepdims=True)
        return (f * probs.sum(0) / total).sum() * (c.aux_loss_coeff * c.num_experts * self.data_parallel_size)

    def construct(self, x):
        """Route, permute, (exchange,) run the experts, (exchange back,) unpermute, combine."""
        c = self.config
        if x.shape[-1] != c.dim or x.ndim not in (2, 3):
            raise ValueError(f"MoE(x): expected [batch, seq, {c.dim}] or [tokens, {c.dim}], got {tuple(x.shape)}")
        flat = x.reshape(-1, c.dim)
        n = flat.shape[0]
        bias = self.expert_bias if c.uses_expert_bias else None
        weights, experts, scores = self.router(flat, bias)
        chosen = experts.asnumpy().reshape(-1)  # [N * k], token-major
        counts = np.bincount(chosen, minlength=c.num_experts)
        if not is_replaying():  # a pipeline stage's recomputed forward routes the same tokens again
            self.tokens_per_expert += counts
        order = np.argsort(chosen, kind="stable")  # slots grouped by expert
        tokens = ops.gather(flat, ms.Tensor((order // c.top_k).astype(np.int32)), 0)
        out = self._experts(tokens, counts)
        inverse = np.empty_like(order)
        inverse[order] = np.arange(order.size)
        slots = ops.gather(out, ms.Tensor(inverse.astype(np.int32)), 0).reshape(n, c.top_k, c.dim)
        routed = (slots * weights.astype(slots.dtype).unsqueeze(-1)).sum(1)
        if self.shared_experts is not None:
            routed = routed + self.shared_experts(flat)
        if self.aux_scaler is not None:  # identity forward: only the backward differs
            aux = self._aux_loss(scores, counts, n)
            self.aux_loss = ops.stop_gradient(aux)
            routed = self.aux_scaler(routed, aux)
        return routed.reshape(x.shape)

    def _experts(self, tokens, counts: np.ndarray):
        if self.ep_mesh is None:
            return self.experts(tokens, [int(v) for v in counts])
        return _ep_experts(self, tokens, counts)


def _ep_experts(moe: MoE, tokens, counts: np.ndarray):
    """Dropless EP: one all-gather of the per-expert counts (host sync), the uneven token all-to-all, the
    local experts, the all-to-all back (its adjoint carries the gradients)."""
    mesh = moe.ep_mesh
    group = mesh.get_group(0)
    ep, me = mesh.shape[0], mesh.get_coordinate()[0]
    e_local = moe.config.num_experts // ep
    matrix = raw_all_gather(ms.Tensor(counts.astype(np.int32).reshape(1, -1)), group, 0, (1,) * ep).asnumpy()
    per_rank = matrix.reshape(ep, ep, e_local)  # [source, destination rank, local expert]
    send = [int(v) for v in per_rank[me].sum(-1)]
    recv = [int(v) for v in per_rank[:, me].sum(-1)]
    got = PLATFORM.all_to_all_single(tokens, group, recv, send)  # grouped by source, then local expert
    mine = per_rank[:, me]  # [source, local expert]
    starts = np.concatenate([[0], np.cumsum(mine.reshape(-1))[:-1]]).reshape(ep, e_local)
    regroup = np.concatenate([np.arange(starts[r, l], starts[r, l] + mine[r, l]) for l in range(e_local)
                              for r in range(ep)] + [np.zeros(0, np.int64)]).astype(np.int32)
    local_counts = [int(v) for v in mine.sum(0)]
    if regroup.size:
        out = moe.experts(ops.gather(got, ms.Tensor(regroup), 0), local_counts)
        back = np.empty_like(regroup)
        back[regroup] = np.arange(regroup.size, dtype=np.int32)
        out = ops.gather(out, ms.Tensor(back), 0)
    else:
        out = moe.experts(got, local_counts)
    return PLATFORM.all_to_all_single(out, group, send, recv)


def expert_parallel(moe: MoE, ep_mesh) -> MoE:
    """Split ``moe.experts`` over the 1-D ``ep_mesh`` (``num_experts / ep`` contiguous experts per rank,
    recorded as ``Shard(0)`` for optimizers and checkpoints) and route tokens with the all-to-all."""
    if not isinstance(moe, MoE):
        raise TypeError(f"expert_parallel(moe): expected a MindSpore MoE, got {type(moe).__name__}")
    if ep_mesh.ndim != 1:
        raise ValueError(f"expert_parallel(ep_mesh): expected a 1-D mesh, got {ep_mesh}")
    ep = ep_mesh.shape[0]
    e_local = check_expert_parallel(moe.config.num_experts, ep) if ep > 1 else moe.config.num_experts
    me = ep_mesh.get_coordinate()[0]
    specs = moe.experts.__dict__.setdefault(_SPECS_ATTR, {})
    for name in ("gate_proj", "up_proj", "down_proj"):
        param = getattr(moe.experts, name)
        spec = DTensorSpec(ep_mesh, (Shard(0),), tuple(param.shape))
        local = mint.narrow(param.value(), 0, me * e_local, e_local).copy()
        setattr(moe.experts, name, ms.Parameter(local, name=param.name, requires_grad=param.requires_grad))
        specs[name] = spec
    moe.ep_mesh = ep_mesh
    return moe


def update_expert_bias(moe: MoE, group=None) -> List[float]:
    """Auxiliary-loss-free balancing: sum ``tokens_per_expert`` over ``group`` (the data/expert ranks; a
    native all-reduce), move ``expert_bias`` by ``rate * sign(mean - load)`` (identical on every rank),
    reset the counts. Returns the loads used."""
    loads = ms.Tensor(moe.tokens_per_expert.astype(np.float32))
    if group is not None and group.size > 1:
        loads = raw_all_reduce(loads, "sum", group)
    values = [float(v) for v in loads.asnumpy()]
    delta = bias_update(values, moe.config.bias_update_rate)
    moe.expert_bias = moe.expert_bias + ms.Tensor(np.asarray(delta, np.float32))
    moe.tokens_per_expert = np.zeros_like(moe.tokens_per_expert)
    return values
