# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Context-parallel attention on local shards: ring, all-gather KV and all-to-all (Ulysses).

Inputs are this rank's shards ``q [B, H, L, E]``, ``k``/``v [B, Hkv, L, E]`` holding the global
positions ``layout.positions(rank)``; the output is this rank's shard of the attention output.

* **Ring** (:class:`RingAttention`): K+V travel around the CP group by P2P (one packed buffer per
  step); each step computes the local queries against the block at hand (the kernel calls of
  :func:`hyper_parallel.cp.blocks.plan_block`) and folds it into the running ``(out, lse)`` with
  the log-sum-exp merge. Backward rotates K+V again and sends the dK+dV accumulators around the
  ring with them, so they arrive back at their owner after ``c`` hops (no K/V is kept between
  forward and backward beyond the local shard). ``async_=True`` posts each step's exchange before
  computing the current block; in backward the incoming accumulator is also in flight while the
  block is computed.
* **All-gather** (:class:`AllGatherAttention`): one all-gather of K+V, the same block computation
  over every rank's block (own block first: the async variant computes it while the gather is in
  flight), backward re-gathers K+V and reduce-scatters dK+dV.
* **All-to-all** (:func:`ulysses_attention`): q, k, v go sequence-sharded -> head-sharded, the
  sequence is put back in global order, the local heads run ordinary SDPA (any mask), and the
  output goes back. Autograd through the differentiable all-to-all does the backward.

An explicit attention mask (global ``[..., S, S]`` in original order; boolean or additive) is
sliced per block; rows a block masks entirely merge as ``lse = -inf``.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Tuple

import torch
import torch.distributed as dist

from hyper_parallel.cp.blocks import Task, plan_block
from hyper_parallel.cp.cost import ulysses_kv_repeat
from hyper_parallel.cp.load_balance import SeqLayout
from hyper_parallel.cp.merge import merge_into
from hyper_parallel.cp._torch import comm
from hyper_parallel.cp._torch.kernel import acc_dtype, attention_backward, attention_forward

__all__ = ["AttnConfig", "RingAttention", "AllGatherAttention", "ulysses_attention", "record_steps", "StepRecord"]

_TAG_KV = 11
_TAG_DKV = 12


@dataclass
class AttnConfig:
    """Everything a CP attention call needs besides q, k, v."""

    group: Any
    rank: int
    size: int
    layout: SeqLayout
    causal: bool
    scale: Optional[float]
    mask: Optional[torch.Tensor] = None  # additive float mask, rows = local queries, cols = global positions
    async_: bool = False
    impl: Optional[str] = None
    method: str = "ring"

    def tasks(self, src: int) -> List[Task]:
        """Kernel calls for the local queries against the block of rank ``src``."""
        if self.mask is not None:
            n_q, n_k = self.layout.local_len(self.rank), self.layout.local_len(src)
            return [Task(0, n_q, ((0, n_k),), False)]
        return plan_block(self.layout.runs[self.rank], self.layout.runs[src], self.causal)

    def block_mask(self, src: int) -> Optional[torch.Tensor]:
        """The mask columns of rank ``src``'s positions (None without a mask)."""
        if self.mask is None:
            return None
        cols = torch.tensor(self.layout.positions(src), device=self.mask.device)
        return self.mask.index_select(-1, cols)


# ---------------------------------------------------------------------------------------- step trace
@dataclass
class StepRecord:
    """State after one step: forward ``(out, lse)`` merged so far, backward this step's dq/dk/dv."""

    phase: str
    step: int
    src: int
    tensors: Tuple[torch.Tensor, ...]


_TRACES: List[List[StepRecord]] = []


@contextlib.contextmanager
def record_steps() -> Iterator[List[StepRecord]]:
    """Record a :class:`StepRecord` after every ring / all-gather step (for tests: a wrong step is named)."""
    trace: List[StepRecord] = []
    _TRACES.append(trace)
    try:
        yield trace
    finally:
        _TRACES.remove(trace)


def _trace(phase: str, step: int, src: int, *tensors: torch.Tensor) -> None:
    if _TRACES:
        rec = StepRecord(phase, step, src, tuple(t.detach().clone() for t in tensors))
        for trace in _TRACES:
            trace.append(rec)


# ---------------------------------------------------------------------------------------- block math
def _keys(x: torch.Tensor, segs) -> torch.Tensor:
    parts = [x.narrow(-2, off, n) for off, n in segs]
    return parts[0] if len(parts) == 1 else torch.cat(parts, -2)


def _block_forward(cfg: AttnConfig, q, kb, vb, src: int, acc_out: torch.Tensor, acc_lse: torch.Tensor) -> None:
    mask = cfg.block_mask(src)
    if mask is not None and not bool((mask > float("-inf")).any()):
        return
    for t in cfg.tasks(src):
        qs = q.narrow(-2, t.q_off, t.q_len)
        m = None if mask is None else mask.narrow(-2, t.q_off, t.q_len)
        o, l = attention_forward(qs, _keys(kb, t.k_segs), _keys(vb, t.k_segs), causal=t.causal, scale=cfg.scale,
                                 mask=m, impl=cfg.impl)
        merge_into(acc_out.narrow(-2, t.q_off, t.q_len), acc_lse.narrow(-1, t.q_off, t.q_len), o.to(acc_out.dtype),
                   l.to(acc_lse.dtype), torch)


def _add_segments(acc: torch.Tensor, grad: torch.Tensor, segs) -> None:
    start = 0
    for off, n in segs:
        acc.narrow(-2, off, n).add_(grad.narrow(-2, start, n))
        start += n


def _block_backward(cfg: AttnConfig, saved, kb, vb, src: int, dq, dk, dv) -> None:
    grad_out, q, out, lse = saved
    mask = cfg.block_mask(src)
    if mask is not None and not bool((mask > float("-inf")).any()):
        return
    for t in cfg.tasks(src):
        sl = lambda x, t=t: x.narrow(-2, t.q_off, t.q_len)
        m = None if mask is None else sl(mask)
        g = attention_backward(sl(grad_out), sl(q), _keys(kb, t.k_segs), _keys(vb, t.k_segs), sl(out),
                               lse.narrow(-1, t.q_off, t.q_len), causal=t.causal, scale=cfg.scale, mask=m,
                               impl=cfg.impl)
        sl(dq).add_(g[0])
        _add_segments(dk, g[1], t.k_segs)
        _add_segments(dv, g[2], t.k_segs)


def _pack(*xs: torch.Tensor) -> torch.Tensor:
    return torch.cat([x.reshape(-1) for x in xs])


def _unpack(flat: torch.Tensor, shape) -> Tuple[torch.Tensor, torch.Tensor]:
    n = flat.numel() // 2
    return flat[:n].view(shape), flat[n:].view(shape)


def _accumulators(q: torch.Tensor, v: torch.Tensor):
    dt = acc_dtype(q.dtype)
    out = torch.zeros(q.shape[:-1] + (v.shape[-1],), dtype=dt, device=q.device)
    lse = torch.full(q.shape[:-1], float("-inf"), dtype=dt, device=q.device)
    return out, lse


def _check_kv(k: torch.Tensor, v: torch.Tensor) -> None:
    if k.shape != v.shape:
        raise ValueError(f"context parallel attention: key {tuple(k.shape)} and value {tuple(v.shape)} must have "
                         "the same shape (a value head dim different from the key's is not supported)")


# ---------------------------------------------------------------------------------------- ring
class RingAttention(torch.autograd.Function):
    """Ring attention (see the module docstring)."""

    @staticmethod
    def forward(ctx, q, k, v, cfg: AttnConfig):  # pylint: disable=arguments-differ
        """Rotate K+V, fold every block into ``(out, lse)``."""
        _check_kv(k, v)
        ex = comm.RingExchange(cfg.group, cfg.method) if cfg.size > 1 else None
        acc_out, acc_lse = _accumulators(q, v)
        kv, src = _pack(k, v), cfg.rank
        for step in range(cfg.size):
            last = step == cfg.size - 1
            pending = ex.start(kv, "fwd", _TAG_KV, overlapped=True) if cfg.async_ and not last else None
            kb, vb = _unpack(kv, k.shape)
            _block_forward(cfg, q, kb, vb, src, acc_out, acc_lse)
            _trace("fwd", step, src, acc_out, acc_lse)
            if not last:
                kv = pending.wait() if pending is not None else ex.exchange(kv, "fwd", _TAG_KV)
            src = (src - 1) % cfg.size
        out = acc_out.to(q.dtype)
        ctx.cfg = cfg
        ctx.save_for_backward(q, k, v, out, acc_lse)
        return out

    @staticmethod
    def backward(ctx, grad_out):  # pylint: disable=arguments-differ
        """Rotate K+V again; the dK+dV accumulators travel with them back to their owner."""
        cfg: AttnConfig = ctx.cfg
        q, k, v, out, lse = ctx.saved_tensors
        saved = (grad_out.contiguous(), q, out, lse)
        ex = comm.RingExchange(cfg.group, cfg.method) if cfg.size > 1 else None
        dt = acc_dtype(q.dtype)
        dq = torch.zeros(q.shape, dtype=dt, device=q.device)
        kv, src, incoming = _pack(k, v), cfg.rank, None
        for step in range(cfg.size):
            last = step == cfg.size - 1
            kv_next = ex.start(kv, "bwd", _TAG_KV, overlapped=True) if cfg.async_ and not last else None
            kb, vb = _unpack(kv, k.shape)
            if incoming is not None and not cfg.async_:
                dkv, incoming = incoming.wait(), None  # sync: this block's accumulator is here, add into it
            else:
                dkv = torch.zeros(2 * k.numel(), dtype=dt, device=k.device)
            before = dkv.clone() if _TRACES else None
            _block_backward(cfg, saved, kb, vb, src, dq, *_unpack(dkv, k.shape))
            if before is not None:
                _trace("bwd", step, src, dq, *_unpack(dkv - before, k.shape))
            if incoming is not None:  # async: it arrived while the block was computed
                dkv.add_(incoming.wait())
            if ex is not None:
                incoming = ex.start(dkv, "bwd", _TAG_DKV, overlapped=cfg.async_)
                if not cfg.async_:
                    incoming, dkv = _Done(incoming.wait()), None  # the sent accumulator is not needed any more
            if not last:
                kv = kv_next.wait() if kv_next is not None else ex.exchange(kv, "bwd", _TAG_KV)
            src = (src - 1) % cfg.size
        dkv = incoming.wait() if incoming is not None else dkv
        dk, dv = _unpack(dkv, k.shape)
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None


class _Done:
    """A finished exchange (sync mode): ``wait`` returns the tensor."""

    def __init__(self, value: torch.Tensor) -> None:
        self.value = value

    def wait(self) -> torch.Tensor:
        """The received tensor."""
        return self.value


# ---------------------------------------------------------------------------------------- all-gather
def _gather_blocks(flat_all: torch.Tensor, size: int, shape) -> List[Tuple[torch.Tensor, torch.Tensor]]:
    return [_unpack(chunk, shape) for chunk in flat_all.chunk(size)]


def _src_order(cfg: AttnConfig) -> List[int]:
    """Own block first (it needs no communication), then the others as a ring would see them."""
    return [(cfg.rank - i) % cfg.size for i in range(cfg.size)]


def _each_block(cfg: AttnConfig, k, v, pending):
    """``(step, src, k block, v block)``, own block first; the gathered buffer is awaited only when needed."""
    blocks = None
    for step, src in enumerate(_src_order(cfg)):
        if src == cfg.rank:
            yield step, src, k, v
            continue
        if blocks is None:
            blocks = _gather_blocks(pending.wait(), cfg.size, k.shape)
        yield (step, src) + blocks[src]


def _all_blocks_backward(cfg: AttnConfig, saved, k, v, pending, dq, dkv_all) -> None:
    for step, src, kb, vb in _each_block(cfg, k, v, pending):
        _block_backward(cfg, saved, kb, vb, src, dq, dkv_all[src, 0], dkv_all[src, 1])
        _trace("bwd", step, src, dq, dkv_all[src, 0], dkv_all[src, 1])


class AllGatherAttention(torch.autograd.Function):
    """All-gather-KV attention (see the module docstring)."""

    @staticmethod
    def forward(ctx, q, k, v, cfg: AttnConfig):  # pylint: disable=arguments-differ
        """Gather K+V, fold every rank's block into ``(out, lse)``."""
        _check_kv(k, v)
        acc_out, acc_lse = _accumulators(q, v)
        kv = _pack(k, v)
        pending = comm.all_gather_flat(kv, cfg.group, cfg.method, "fwd", async_op=True) if cfg.size > 1 else None
        if not cfg.async_ and pending is not None:
            pending = _Done(pending.wait())
        for step, src, kb, vb in _each_block(cfg, k, v, pending):
            _block_forward(cfg, q, kb, vb, src, acc_out, acc_lse)
            _trace("fwd", step, src, acc_out, acc_lse)
        out = acc_out.to(q.dtype)
        ctx.cfg = cfg
        ctx.save_for_backward(q, k, v, out, acc_lse)
        return out

    @staticmethod
    def backward(ctx, grad_out):  # pylint: disable=arguments-differ
        """Re-gather K+V, compute every block's gradients, reduce-scatter dK+dV to their owners."""
        cfg: AttnConfig = ctx.cfg
        q, k, v, out, lse = ctx.saved_tensors
        saved = (grad_out.contiguous(), q, out, lse)
        pending = None
        if cfg.size > 1:
            pending = comm.all_gather_flat(_pack(k, v), cfg.group, cfg.method, "bwd", async_op=True)
            if not cfg.async_:
                pending = _Done(pending.wait())
        dt = acc_dtype(q.dtype)
        dq = torch.zeros(q.shape, dtype=dt, device=q.device)
        dkv_all = torch.zeros((cfg.size, 2) + tuple(k.shape), dtype=dt, device=k.device)
        _all_blocks_backward(cfg, saved, k, v, pending, dq, dkv_all)
        del pending  # release the gathered K+V before the reduce-scatter
        if cfg.size > 1:
            mine = comm.reduce_scatter_flat(dkv_all.reshape(-1), cfg.group, cfg.method, "bwd").view((2,) + k.shape)
        else:
            mine = dkv_all[0]
        return dq.to(q.dtype), mine[0].to(k.dtype), mine[1].to(v.dtype), None


# ---------------------------------------------------------------------------------------- all-to-all
_INDEX_CACHE: Dict[Tuple[SeqLayout, str, str], torch.Tensor] = {}


def _order_index(layout: SeqLayout, which: str, device) -> torch.Tensor:
    key = (layout, which, str(device))
    idx = _INDEX_CACHE.get(key)
    if idx is None:
        order = layout.restore_order() if which == "restore" else layout.gather_order()
        idx = _INDEX_CACHE[key] = torch.tensor(order, dtype=torch.long, device=device)
    return idx


def ulysses_attention(q, k, v, *, group, layout: SeqLayout, causal: bool, scale: Optional[float],
                      mask: Optional[torch.Tensor], sdpa, method: str = "alltoall") -> torch.Tensor:
    """All-to-all (Ulysses) attention; ``sdpa`` is the single-process attention to run on the local heads,
    ``mask`` the global mask (``[..., S, S]``, original order) or None."""
    _check_kv(k, v)
    size = dist.get_world_size(group)
    heads, kv_heads = q.shape[-3], k.shape[-3]
    rep = ulysses_kv_repeat(heads, kv_heads, size)
    if rep > 1:
        k, v = k.repeat_interleave(rep, dim=-3), v.repeat_interleave(rep, dim=-3)
    restore = _order_index(layout, "restore", q.device)
    full = [comm.all_to_all(x, group, -3, -2, method).index_select(-2, restore) for x in (q, k, v)]
    if mask is not None and mask.dim() >= 3 and mask.shape[-3] == heads:
        mask = mask.chunk(size, -3)[dist.get_rank(group)]  # per-head mask: this rank's heads
    out = sdpa(full[0], full[1], full[2], attn_mask=mask, is_causal=causal, scale=scale,
               enable_gqa=full[1].shape[-3] != full[0].shape[-3])
    out = out.index_select(-2, _order_index(layout, "gather", q.device))
    return comm.all_to_all(out, group, -2, -3, method)
