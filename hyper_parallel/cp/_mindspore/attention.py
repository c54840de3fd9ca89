# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Context parallelism on MindSpore (PyNative): ring, all-gather and all-to-all (Ulysses) causal attention over
a 1-D CP mesh, with the load-balanced sequence layouts of :mod:`hyper_parallel.cp.load_balance`.

MindSpore has no function-interception protocol (torch's CP intercepts ``scaled_dot_product_attention``), so a
model's attention asks :func:`active` for the CP attention of the enclosing :func:`context_parallel` block (the
MindSpore Llama's ``attention`` does). Inside the block every rank holds the shards of the sequence its layout
gives it (:func:`context_parallel_shard`: ids, labels and the RoPE positions), and attention over the whole
sequence is computed from them:

* ``allgather``: K and V are all-gathered over the CP group (their gradients reduce-scattered back: the
  adjoint), each rank attends its queries to the whole sequence under the causal mask of the global positions.
* ``ring``: K/V blocks travel around the ring (``cp - 1`` shifts, each a send to the next rank and a receive
  from the previous one over the platform's point-to-point; the gradients travel the reverse ring); each
  block's partial attention is folded in by its log-sum-exp (:mod:`hyper_parallel.cp.merge`'s formula).
  Blocks no query of this rank can see (causal) are skipped, so head-tail balancing evens the work.
* ``alltoall`` (Ulysses): q, k, v go from sequence shards to head shards by an all-to-all (its adjoint is the
  inverse all-to-all), attention runs on ``heads / cp`` heads over the whole sequence, and the output goes back.
  Needs the head counts divisible by ``cp`` (key/value heads are repeated to the query heads when they are not).

The causal mask is built from the global positions of the queries and keys (NumPy, cached per layout), so any
:class:`~hyper_parallel.cp.load_balance.LoadBalancer` works; every method equals one process's attention.
Costs on CPU ``mccl``: the all-gather is native; send/recv is emulated by a broadcast over the pair group (the
same bytes as a native send), the all-to-all by an all-gather + slice at 2 ranks (see ``docs/mindspore.md``).
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import mindspore as ms
import numpy as np
from mindspore import mint, ops
# MindSpore's PyNative custom-autograd base (the one hyper_parallel.platform.mindspore.collectives uses)
from mindspore.common._grad_function import _Function  # pylint: disable=import-error,no-name-in-module

from hyper_parallel.cp.load_balance import SeqLayout, make_load_balancer
from hyper_parallel.platform.base import P2POp

__all__ = ["CP_METHODS", "CPAttention", "active", "context_parallel", "context_parallel_shard",
           "context_parallel_unshard", "cp_attention"]

#: the methods the MindSpore CP attention runs
CP_METHODS = ("ring", "allgather", "alltoall")
_NEG = -1e30
#: the CP attentions of the enclosing blocks, innermost last (:func:`context_parallel` pushes and pops)
STACK: List["CPAttention"] = []


def _platform():
    from hyper_parallel.platform import get_platform  # pylint: disable=import-outside-toplevel
    return get_platform("mindspore")


def _group_of(mesh) -> Any:
    if getattr(mesh, "platform", None) != "mindspore" or len(tuple(mesh.shape)) != 1:
        raise ValueError(f"context parallel (MindSpore): expected a 1-D MindSpore device mesh (slice a multi-dim "
                         f"mesh: mesh['cp']), got {mesh!r}")
    return mesh.get_group()


def _ring_order(me: int, n: int) -> Tuple[Tuple[str, int], ...]:
    """The two point-to-point ops of a ring shift, in the global edge order ``0->1, 1->2, ..., n-1->0`` that
    makes the emulated (blocking) transfers deadlock-free: ``("send"|"recv", peer index)``."""
    send, recv = ("send", (me + 1) % n), ("recv", (me - 1) % n)
    return (send, recv) if me == 0 else (recv, send)


def _reverse_order(me: int, n: int) -> Tuple[Tuple[str, int], ...]:
    """The ops of the reverse ring (send to the previous rank, receive from the next) in the edge order
    ``0->n-1, n-1->n-2, ..., 1->0``: rank 0 sends first, every other rank receives first."""
    send, recv = ("send", (me - 1) % n), ("recv", (me + 1) % n)
    return (send, recv) if me == 0 else (recv, send)


class RingShift(_Function):  # pylint: disable=abstract-method  # forward keeps ctx itself, as the platform's
    """Differentiable ring shift: forward receives the previous rank's tensor, backward sends the gradient back
    (receives the next rank's gradient)."""

    @staticmethod
    def forward(ctx, x, ranks, me):  # pylint: disable=arguments-differ
        """Send ``x`` to the next rank, return the previous rank's."""
        ctx.args = (ranks, me)
        return _exchange(x, ranks, _ring_order(me, len(ranks)))

    @staticmethod
    def backward(ctx, grad):  # pylint: disable=arguments-differ
        """The gradient goes the reverse way."""
        ranks, me = ctx.args
        return _exchange(grad, ranks, _reverse_order(me, len(ranks))), None, None


def _exchange(x, ranks, order):
    """The ``order`` ed point-to-point ops of one ring shift; the received tensor."""
    plat = _platform()
    got = None
    for op, peer in order:
        if op == "send":
            plat.batch_isend_irecv([P2POp("send", x, ranks[peer])])
        else:
            got = plat.batch_isend_irecv([P2POp("recv", ops.zeros_like(x), ranks[peer])])[0].wait()
    return got


@dataclass
class CPAttention:
    """The CP attention of one :func:`context_parallel` block: mesh, method and load balancer; callable as the
    model's attention ``(q, k, v) -> [batch, seq_local, heads * dim]`` on ``[batch, seq_local, heads, dim]``."""

    mesh: Any
    method: str = "ring"
    load_balance: Any = "headtail"
    _masks: Dict[Any, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.method not in CP_METHODS:
            raise ValueError(f"context_parallel(method): expected one of {CP_METHODS} on MindSpore, got "
                             f"{self.method!r}")
        self.group = _group_of(self.mesh)
        self.balancer = make_load_balancer(self.load_balance)
        self.ranks = tuple(self.group.ranks) if hasattr(self.group, "ranks") else tuple(range(self.mesh.size()))
        self.size = len(self.ranks)
        self.index = self.mesh.get_local_rank()

    def layout(self, seq_len: int, what: str = "sequence") -> SeqLayout:
        """The layout of a whole sequence of ``seq_len`` positions over the CP ranks."""
        return self.balancer.layout(seq_len, self.size, what)

    def _bias(self, q_pos: Sequence[int], k_pos: Sequence[int]):
        """Additive causal mask ``[len(q), len(k)]`` (None when every key is visible; "skip" when none is)."""
        key = (tuple(q_pos), tuple(k_pos))
        if key not in self._masks:
            visible = np.asarray(k_pos)[None, :] <= np.asarray(q_pos)[:, None]
            if visible.all():
                self._masks[key] = None
            elif not visible.any():
                self._masks[key] = "skip"
            else:
                self._masks[key] = ms.Tensor(np.where(visible, 0.0, _NEG).astype(np.float32))
        return self._masks[key]

    def __call__(self, q, k, v):
        b, s, h, d = q.shape
        layout = self.layout(s * self.size, "attention query")
        if self.method == "alltoall":
            return self._ulysses(q, k, v, layout).reshape(b, s, h * d)
        if self.method == "allgather":
            out = self._allgather(q, k, v, layout)
        else:
            out = self._ring(q, k, v, layout)
        return out.transpose(0, 2, 1, 3).reshape(b, s, h * d)

    # ------------------------------------------------------------------ methods
    def _allgather(self, q, k, v, layout: SeqLayout):
        plat, s = _platform(), k.shape[1]
        sizes = [s] * self.size
        k_all = plat.all_gather(k, self.group, 1, sizes, self.index, True)
        v_all = plat.all_gather(v, self.group, 1, sizes, self.index, True)
        bias = self._bias(layout.positions(self.index), layout.gather_order())
        return _block(q, k_all, v_all, bias)[0]

    def _ring(self, q, k, v, layout: SeqLayout):
        q_pos = layout.positions(self.index)
        out = lse = None
        unused = []
        for step in range(self.size):
            if step:
                k, v = RingShift.apply(k, self.ranks, self.index), RingShift.apply(v, self.ranks, self.index)
            bias = self._bias(q_pos, layout.positions((self.index - step) % self.size))
            if isinstance(bias, str):  # no query here sees this block: skip the compute, not the exchange
                unused += [k, v]
                continue
            o, l = _block(q, k, v, bias)
            out, lse = (o, l) if out is None else _merge(out, lse, o, l)
        if unused and self.size > 1:
            # every rank must run every shift's backward (the reverse exchange is collective): a zero-weight
            # term keeps a skipped block in the graph, its gradient is zeros
            out = out + sum(t.sum() for t in unused) * 0.0
        return out

    def _ulysses(self, q, k, v, layout: SeqLayout):
        h, kv_heads = q.shape[2], k.shape[2]
        if h % self.size:
            raise ValueError(f"context_parallel(method='alltoall'): {h} query heads are not divisible by cp="
                             f"{self.size}; use 'ring' or 'allgather'")
        if kv_heads % self.size:
            k, v = _repeat_kv(k, h), _repeat_kv(v, h)
        plat, s, n = _platform(), q.shape[1], self.size

        def to_heads(x):
            return plat.all_to_all(x, self.group, 2, 1, [x.shape[2] // n] * n, [s] * n, self.index)

        order = layout.gather_order()
        out = _block(to_heads(q), to_heads(k), to_heads(v), self._bias(order, order))[0]  # [b, heads/n, S, d]
        out = out.transpose(0, 2, 1, 3)
        back = plat.all_to_all(out, self.group, 1, 2, [s] * n, [out.shape[2]] * n, self.index)
        return back


def _repeat_kv(x, heads: int):
    b, s, kv, d = x.shape
    rep = heads // kv
    return x.unsqueeze(3).broadcast_to((b, s, kv, rep, d)).reshape(b, s, heads, d)


def _block(q, k, v, bias):
    """Attention of ``q [b, sq, h, d]`` over ``k, v [b, sk, kv, d]`` with an additive ``bias [sq, sk]`` (or
    None): ``(out [b, h, sq, d], lse [b, h, sq])``."""
    h = q.shape[2]
    if k.shape[2] != h:
        k, v = _repeat_kv(k, h), _repeat_kv(v, h)
    qt, kt, vt = q.transpose(0, 2, 1, 3), k.transpose(0, 2, 3, 1), v.transpose(0, 2, 1, 3)
    scores = mint.matmul(qt, kt) * (1.0 / math.sqrt(q.shape[-1]))
    if bias is not None:
        scores = scores + bias.astype(scores.dtype)
    top = ops.stop_gradient(scores.max(axis=-1, keepdims=True))
    p = mint.exp(scores - top)
    total = p.sum(-1, keepdims=True)
    out = mint.matmul(p / total, vt)
    return out, (mint.log(total) + top).squeeze(-1)


def _merge(out_a, lse_a, out_b, lse_b):
    """Fold two partial attentions over disjoint key sets (``hyper_parallel.cp.merge.merge_partials``)."""
    top = ops.stop_gradient(mint.maximum(lse_a, lse_b))
    wa, wb = mint.exp(lse_a - top), mint.exp(lse_b - top)
    lse = mint.log(wa + wb) + top
    return (out_a * mint.exp(lse_a - lse).unsqueeze(-1) + out_b * mint.exp(lse_b - lse).unsqueeze(-1)), lse


def active() -> Optional[CPAttention]:
    """The CP attention of the innermost :func:`context_parallel` block, or None outside one."""
    return STACK[-1] if STACK else None


def cp_attention(q, k, v):
    """The active block's CP attention (see :class:`CPAttention`); an error outside a block."""
    cp = active()
    if cp is None:
        raise RuntimeError("cp_attention: no context_parallel block is active")
    return cp(q, k, v)


def _indices(layout: SeqLayout, rank: int):
    return ms.Tensor(np.asarray(layout.positions(rank), dtype=np.int32))


def context_parallel_shard(mesh, buffers: Sequence[Any], seq_dims: Sequence[int],
                           load_balance: Any = "headtail") -> List[Any]:
    """This rank's shards of ``buffers`` along ``seq_dims`` in the load-balanced layout (new tensors; a
    differentiable gather)."""
    if len(buffers) != len(seq_dims):
        raise ValueError(f"context_parallel_shard: {len(buffers)} buffers but {len(seq_dims)} seq_dims")
    _group_of(mesh)
    balancer, n, rank = make_load_balancer(load_balance), mesh.size(), mesh.get_local_rank()
    out = []
    for i, (t, dim) in enumerate(zip(buffers, seq_dims)):
        layout = balancer.layout(int(t.shape[dim]), n, f"buffer {i} (dim {dim})")
        out.append(ops.gather(t, _indices(layout, rank), dim))
    return out


def context_parallel_unshard(mesh, buffers: Sequence[Any], seq_dims: Sequence[int],
                             load_balance: Any = "headtail") -> List[Any]:
    """Gather CP shards back into whole tensors in the original order (differentiable: all-gather, then the
    inverse permutation of the layout)."""
    if len(buffers) != len(seq_dims):
        raise ValueError(f"context_parallel_unshard: {len(buffers)} buffers but {len(seq_dims)} seq_dims")
    group = _group_of(mesh)
    balancer, n, rank = make_load_balancer(load_balance), mesh.size(), mesh.get_local_rank()
    out = []
    for i, (t, dim) in enumerate(zip(buffers, seq_dims)):
        dim = dim % t.ndim
        local = int(t.shape[dim])
        layout = balancer.layout(local * n, n, f"buffer {i} (dim {dim})")
        whole = _platform().all_gather(t, group, dim, [local] * n, rank, False)
        out.append(ops.gather(whole, ms.Tensor(np.asarray(layout.restore_order(), np.int32)), dim))
    return out


@contextlib.contextmanager
def context_parallel(mesh, buffers: Optional[Sequence[Any]] = None, buffer_seq_dims: Optional[Sequence[int]] = None,
                     no_restore_buffers: Optional[Sequence[Any]] = None, method: str = "ring",
                     load_balance: Any = "headtail") -> Iterator[CPAttention]:
    """Inside the block a model's attention that asks :func:`active` (the MindSpore Llama's does) runs CP
    attention over the 1-D ``mesh``. ``buffers`` are sharded in place along ``buffer_seq_dims``
    (``Tensor.assign_value``) and restored on exit unless listed in ``no_restore_buffers``. Yields the
    :class:`CPAttention`."""
    cp = CPAttention(mesh, method, load_balance)
    buffers = list(buffers or [])
    dims = list(buffer_seq_dims or [])
    if len(buffers) != len(dims):
        raise ValueError(f"context_parallel: {len(buffers)} buffers but {len(dims)} buffer_seq_dims")
    keep = {id(b) for b in (no_restore_buffers or [])}
    saved = [(b, b.copy()) for b in buffers if id(b) not in keep]
    for b, shard in zip(buffers, context_parallel_shard(mesh, buffers, dims, load_balance)):
        b.assign_value(shard)
    STACK.append(cp)
    try:
        yield cp
    finally:
        STACK.pop()
        for b, whole in saved:
            b.assign_value(whole)
