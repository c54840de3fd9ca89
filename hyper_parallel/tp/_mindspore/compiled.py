# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Tensor parallel under ``mindspore.jit``: each rank's forward and backward as one compiled graph over its
local shards (``training.compile`` with ``tp > 1`` on the MindSpore trainer).

The TP styles of ``hyper_parallel.tp._mindspore.styles`` run DTensor dispatch op by op in PyNative. Here a
*local twin* of a TP-parallelised Llama-family model (:class:`LocalTPModel`) computes the same numbers with
plain tensors: its layers hold the very ``Parameter`` objects the styles left on the cells (this rank's shards,
which the optimizer, clipping and checkpoints keep seeing; no copy per step), column-parallel projections read
their input through :class:`CopyToTP` (Megatron's *f*: identity forward, all-reduce backward), row-parallel ones
end in :class:`ReduceFromTP` (*g*: all-reduce forward, identity backward), attention runs on the local heads.
The collectives are MindSpore's ``ops.AllReduce`` / ``ops.AllGather`` inside the graph (mccl on CPU runs both
in graph mode; it has no reduce-scatter, all-to-all or send/recv there), each a ``Cell`` with a custom
``bprop`` giving its adjoint:

* vocabulary-parallel embedding: a masked lookup of this rank's rows, then *g*;
* sequence parallel (the residual stream and the norms on this rank's sequence chunk): the row-parallel
  output's reduce-scatter is an all-reduce plus this rank's chunk (:class:`ScatterSeq`, backward an
  all-gather), the gather before attention / MLP / head an all-gather (:class:`GatherSeq`, backward all-reduce
  plus chunk); the norms' weights (replicated, partial gradients) read through *f*;
* the LM head: column-parallel; its logits gathered along the vocabulary (:class:`GatherLastDim`, backward
  this rank's slice) for the plain cross-entropy, or under loss parallel kept sharded and reduced by the
  vocabulary-parallel cross-entropy's three all-reduces (max without gradient, the sum of exponentials and
  the target logit through *g*);
* Qwen3's per-head QK norms run on the local heads, their weights through *f*.

:func:`compiled_tp_grad_fn` builds the twin and returns ``mindspore.jit(mindspore.value_and_grad(...))`` of
the scaled loss with respect to the given parameters. Only Llama-family decoders with Llama's attention and
dense MLPs (Llama 3, Qwen3) are covered; anything else is an error naming the cell."""
from __future__ import annotations

from typing import Any, Optional, Sequence, Tuple

import mindspore as ms
import numpy as np
from mindspore import mint, nn, ops

from hyper_parallel.models.llama3._mindspore.model import (LlamaAttention, LlamaMLP, apply_rotary_emb, attention,
                                                           cross_entropy)

__all__ = ["CopyToTP", "ReduceFromTP", "GatherLastDim", "ScatterSeq", "GatherSeq", "LocalTPModel",
           "compiled_tp_grad_fn", "chunk_sizes"]

_SPECS_ATTR = "_hp_param_specs"


def chunk_sizes(total: int, n: int) -> Tuple[int, ...]:
    """``torch.chunk`` 's split of ``total`` into ``n`` pieces (ceil-sized, the last ones shorter or empty):
    the sizes a ``Shard`` placement gives each rank."""
    size = -(-total // n)
    return tuple(max(0, min(size, total - i * size)) for i in range(n))


class _Collective(nn.Cell):
    """A TP group's graph collectives for this rank (``group``: a ``hyper_parallel`` MindSpore group) over
    ``sizes`` (the ranks' extents of the dim it gathers or splits; static: the graph is built per shape)."""

    def __init__(self, group: Any, rank: int, sizes: Sequence[int] = ()) -> None:
        super().__init__()
        name = None if group.is_world else group.name
        self.all_reduce = ops.AllReduce() if name is None else ops.AllReduce(group=name)
        sizes = tuple(int(n) for n in sizes) or (0,) * group.size
        self.total = sum(sizes)
        self.before = sum(sizes[:rank])  # this rank's offset and extent
        self.mine = sizes[rank]
        self.after = self.total - self.before - self.mine
        # mccl's AllGather on the world group and equal pieces; else emulated (zero-padded all-reduce)
        self.native_gather = name is None and len(set(sizes)) == 1
        self.all_gather = ops.AllGather() if self.native_gather else None

    def gather0(self, x):
        """Concatenate the ranks' ``x`` (their ``sizes``) along dim 0."""
        if self.native_gather:
            return self.all_gather(x)
        pieces = []  # one value plus zeros at every position: all-reduce(sum) is exact
        if self.before:
            pieces.append(mint.zeros((self.before,) + tuple(x.shape[1:]), dtype=x.dtype))
        pieces.append(x)
        if self.after:
            pieces.append(mint.zeros((self.after,) + tuple(x.shape[1:]), dtype=x.dtype))
        return self.all_reduce(mint.cat(pieces, 0))

    def chunk(self, x, dim: int):
        """This rank's chunk of ``x`` along ``dim``."""
        return mint.narrow(x, dim, self.before, self.mine)


class CopyToTP(_Collective):
    """Megatron's *f*: identity forward, gradient all-reduced over the TP group (a replicated input feeding
    this rank's share of the work)."""

    def construct(self, x):
        """``x``."""
        return x

    def bprop(self, x, out, grad_out):  # pylint: disable=unused-argument
        """The gradient summed over the TP ranks."""
        return (self.all_reduce(grad_out),)


class ReduceFromTP(_Collective):
    """Megatron's *g*: all-reduce forward (partial sums -> replicated), identity backward."""

    def construct(self, x):
        """``x`` summed over the TP ranks."""
        return self.all_reduce(x)

    def bprop(self, x, out, grad_out):  # pylint: disable=unused-argument
        """The (replicated) gradient as it is."""
        return (grad_out,)


def _to_front(x, dim: int):
    perm = (dim,) + tuple(i for i in range(len(x.shape)) if i != dim)
    return x.transpose(perm)


def _from_front(x, dim: int):
    rest = list(range(1, len(x.shape)))
    perm = tuple(rest[:dim] + [0] + rest[dim:])
    return x.transpose(perm)


class GatherLastDim(_Collective):
    """All-gather of ``[tokens, width]`` along the last dim (``Shard(-1)`` -> ``Replicate``); backward: this
    rank's slice of the replicated gradient."""

    def construct(self, x):
        """The ranks' ``x`` side by side on the last dim."""
        return self.gather0(x.transpose(1, 0)).transpose(1, 0)

    def bprop(self, x, out, grad_out):  # pylint: disable=unused-argument
        """This rank's slice."""
        return (self.chunk(grad_out, 1),)


class ScatterSeq(_Collective):
    """Reduce-scatter of ``[batch, seq, ...]`` along the sequence (``Partial`` -> ``Shard(1)``), as an all-reduce
    plus this rank's chunk; backward: the all-gather of the chunks' gradients."""

    def construct(self, x):
        """This rank's chunk of ``x`` summed over the TP ranks."""
        return self.chunk(self.all_reduce(x), 1)

    def bprop(self, x, out, grad_out):  # pylint: disable=unused-argument
        """The ranks' chunk gradients gathered."""
        return (_from_front(self.gather0(_to_front(grad_out, 1)), 1),)


class GatherSeq(_Collective):
    """All-gather of ``[batch, seq, ...]`` along the sequence (``Shard(1)`` -> ``Replicate``); backward: the
    ranks' partial gradients reduce-scattered (all-reduce plus this rank's chunk)."""

    def construct(self, x):
        """The whole sequence."""
        return _from_front(self.gather0(_to_front(x, 1)), 1)

    def bprop(self, x, out, grad_out):  # pylint: disable=unused-argument
        """This rank's chunk of the gradient summed over the TP ranks."""
        return (self.chunk(self.all_reduce(grad_out), 1),)


def _linear(x, weight):
    """``x @ weight.T`` on a 2-D view (as the model's ``Linear``)."""
    out = mint.nn.functional.linear(x.reshape(-1, x.shape[-1]), weight, None)
    return out.reshape(tuple(x.shape[:-1]) + (out.shape[-1],))


def _rms(x, weight, eps: float):
    return x * mint.rsqrt(mint.mean(x * x, -1, keepdim=True) + eps) * weight


class _Norm(nn.Cell):
    """RMSNorm over the original cell's weight; ``partial``: the weight read through *f* (its gradient summed
    over the TP ranks: each saw its own tokens / heads)."""

    def __init__(self, norm: nn.Cell, comm: Optional[Any]) -> None:
        super().__init__()
        self.weight = norm.weight
        self.eps = norm.eps
        self.f = comm

    def construct(self, x):
        """Normalise the last dim."""
        w = self.weight if self.f is None else self.f(self.weight)
        return _rms(x, w, self.eps)


def _check_no_bias(cell: nn.Cell, what: str) -> None:
    if getattr(cell, "bias", None) is not None:
        raise ValueError(f"LocalTPModel: {what} has a bias; the compiled TP step covers bias-free projections")


class _Attention(nn.Cell):
    """Llama attention on the local heads: q/k/v column-parallel after *f* (or the sequence gather), o
    row-parallel, then *g* (or the sequence reduce-scatter)."""

    def __init__(self, attn: nn.Cell, enter: nn.Cell, leave: nn.Cell, group: Any, rank: int) -> None:
        super().__init__()
        for n in ("q_proj", "k_proj", "v_proj", "o_proj"):
            _check_no_bias(getattr(attn, n), f"self_attn.{n}")
        self.wq, self.wk, self.wv, self.wo = (attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight,
                                              attn.o_proj.weight)
        self.head_dim = attn.head_dim
        self.enter, self.leave = enter, leave
        has_qk = attn.q_norm is not None
        self.q_norm = _Norm(attn.q_norm, CopyToTP(group, rank)) if has_qk else None
        self.k_norm = _Norm(attn.k_norm, CopyToTP(group, rank)) if has_qk else None
        self.scale = attn.core_attention.scale

    def construct(self, x, cos, sin):
        """``x``: the residual stream's normed input (this rank's sequence chunk under SP)."""
        x = self.enter(x)
        b, s = x.shape[0], x.shape[1]
        q = _linear(x, self.wq).reshape(b, s, -1, self.head_dim)
        k = _linear(x, self.wk).reshape(b, s, -1, self.head_dim)
        v = _linear(x, self.wv).reshape(b, s, -1, self.head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rotary_emb(q, cos, sin), apply_rotary_emb(k, cos, sin)
        return self.leave(_linear(attention(q, k, v, self.scale), self.wo))


class _MLP(nn.Cell):
    """The gated MLP on this rank's intermediate columns: gate/up column-parallel, down row-parallel."""

    def __init__(self, mlp: nn.Cell, enter: nn.Cell, leave: nn.Cell) -> None:
        super().__init__()
        for n in ("gate_proj", "up_proj", "down_proj"):
            _check_no_bias(getattr(mlp, n), f"mlp.{n}")
        self.wg, self.wu, self.wd = mlp.gate_proj.weight, mlp.up_proj.weight, mlp.down_proj.weight
        self.act = mlp.act.fn
        self.enter, self.leave = enter, leave

    def construct(self, x):
        """``down(act(gate(x)) * up(x))`` reduced over the TP ranks."""
        x = self.enter(x)
        return self.leave(_linear(self.act(_linear(x, self.wg)) * _linear(x, self.wu), self.wd))


class _Layer(nn.Cell):
    def __init__(self, layer: nn.Cell, tp: "_TPContext") -> None:
        super().__init__()
        if type(layer.self_attn) is not LlamaAttention or type(layer.mlp) is not LlamaMLP:  # noqa  # pylint: disable=C0123
            raise TypeError(f"LocalTPModel: the compiled TP step covers Llama attention and dense MLPs, got "
                            f"{type(layer.self_attn).__name__} / {type(layer.mlp).__name__}")
        self.input_layernorm = tp.norm(layer.input_layernorm)
        self.post_attention_layernorm = tp.norm(layer.post_attention_layernorm)
        self.self_attn = _Attention(layer.self_attn, tp.enter(), tp.leave(), tp.group, tp.rank)
        self.mlp = _MLP(layer.mlp, tp.enter(), tp.leave())

    def construct(self, x, cos, sin):
        """Residual stream in, residual stream out."""
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class _TPContext:
    """What every twin cell needs: the TP group, this rank, the ranks' sequence chunks and the SP flag."""

    def __init__(self, group: Any, rank: int, seq: int, sequence_parallel: bool) -> None:
        self.group, self.rank, self.sp = group, rank, sequence_parallel
        self.seq_sizes = chunk_sizes(seq, group.size)

    def enter(self) -> nn.Cell:
        """Before column-parallel work: *f*, or the sequence all-gather under SP."""
        return GatherSeq(self.group, self.rank, self.seq_sizes) if self.sp else CopyToTP(self.group, self.rank)

    def leave(self) -> nn.Cell:
        """After row-parallel work: *g*, or the sequence reduce-scatter under SP."""
        return ScatterSeq(self.group, self.rank, self.seq_sizes) if self.sp else ReduceFromTP(self.group, self.rank)

    def norm(self, norm: nn.Cell) -> nn.Cell:
        """A residual-stream norm: replicated work without SP; on the chunk, weight through *f*, under SP."""
        return _Norm(norm, CopyToTP(self.group, self.rank) if self.sp else None)


def _vocab_range(cell: nn.Cell, what: str, tp_rank: int, tp: int) -> Tuple[int, int]:
    """(first row, rows) of this rank's vocabulary shard of ``cell.weight`` (a ``Shard(0)`` TP parameter)."""
    spec = cell.__dict__.get(_SPECS_ATTR, {}).get("weight")
    if spec is None or tuple(spec.placements) != (_shard0(),):
        got = None if spec is None else spec.placements
        raise ValueError(f"LocalTPModel: {what}.weight is expected vocabulary-sharded (Shard(0)) by the TP plan, "
                         f"found {got}")
    rows = chunk_sizes(spec.shape[0], tp)
    return sum(rows[:tp_rank]), rows[tp_rank]


def _shard0():
    from hyper_parallel.core.placement import Shard  # pylint: disable=import-outside-toplevel
    return Shard(0)


class LocalTPModel(nn.Cell):  # pylint: disable=too-many-instance-attributes
    """The local twin of a TP-parallelised MindSpore Llama-family ``model`` (``parallelize_llama3`` 's plan on
    ``tp_mesh``; no FSDP / pipeline / context parallel): ``construct(ids, labels)`` is the mean next-token
    cross-entropy of the whole batch, computed on this rank's shards with graph collectives (see the module
    doc). ``seq``: the input length the graph is built for (the sequence chunks under ``sequence_parallel``)."""

    def __init__(self, model: nn.Cell, tp_mesh: Any, *, seq: int, sequence_parallel: bool,
                 loss_parallel: bool) -> None:
        super().__init__()
        group = tp_mesh.get_group(0)
        rank = int(tp_mesh.get_local_rank(0))
        tp = _TPContext(group, rank, seq, sequence_parallel)
        inner = model.model
        self.rotary = inner.rotary
        self.embed_weight = inner.embed_tokens.weight
        self.embed_lo, self.embed_rows = _vocab_range(inner.embed_tokens, "model.embed_tokens", rank, group.size)
        self.embed_out = tp.leave()
        self.layers = nn.CellList([_Layer(layer, tp) for layer in inner.layers])
        self.norm = tp.norm(inner.norm)
        _check_no_bias(model.lm_head, "lm_head")
        self.head_weight = model.lm_head.weight
        self.head_lo = _vocab_range(model.lm_head, "lm_head", rank, group.size)[0]
        self.head_in = tp.enter()
        self.loss_parallel = loss_parallel
        vocab = model.lm_head.__dict__[_SPECS_ATTR]["weight"].shape[0]
        self.gather_logits = GatherLastDim(group, rank, chunk_sizes(vocab, group.size))
        self.sum_tp = ReduceFromTP(group, rank)
        self.gather_tp = _Collective(group, rank, (1,) * group.size)  # mccl's CPU AllReduce sums only: max by gather
        self.positions = ms.Tensor(np.arange(seq, dtype=np.int32))

    def _embed(self, ids):
        outside = mint.logical_or(ids < self.embed_lo, ids >= self.embed_lo + self.embed_rows)
        local = mint.where(outside, ops.zeros_like(ids), ids - self.embed_lo)
        rows = ops.gather(self.embed_weight, local, 0)
        return self.embed_out(rows * mint.logical_not(outside).astype(rows.dtype).unsqueeze(-1))

    def _vocab_parallel_ce(self, local, target):
        """Mean cross-entropy over vocabulary-sharded ``[tokens, vocab / tp]`` logits (``vocab_parallel_cross_
        entropy`` 's formulas, -100 ignored)."""
        local = local.astype(ms.float32)
        gmax = self.gather_tp.gather0(ops.stop_gradient(local.max(axis=-1)).unsqueeze(0)).max(axis=0)
        shifted = local - gmax.unsqueeze(-1)
        lse = mint.log(self.sum_tp(mint.exp(shifted).sum(-1)))
        width = local.shape[-1]
        valid = target != -100
        in_range = mint.logical_and(mint.logical_and(target >= self.head_lo, target < self.head_lo + width), valid)
        idx = mint.clamp(target - self.head_lo, 0, width - 1).astype(ms.int64).unsqueeze(-1)
        picked = mint.gather(shifted, -1, idx).squeeze(-1) * in_range.astype(ms.float32)
        nll = (lse - self.sum_tp(picked)) * valid.astype(ms.float32)
        return nll.sum() / mint.clamp(valid.astype(ms.float32).sum(), min=1.0)

    def construct(self, ids, labels):
        """The mean cross-entropy of ``ids`` ``[batch, seq]`` against ``labels`` (replicated on the TP ranks)."""
        cos, sin = self.rotary(self.positions)
        h = self._embed(ids)
        for layer in self.layers:
            h = layer(h, cos, sin)
        logits = _linear(self.head_in(self.norm(h)), self.head_weight)
        logits = logits.reshape(-1, logits.shape[-1])
        if self.loss_parallel:
            return self._vocab_parallel_ce(logits, labels.reshape(-1))
        return cross_entropy(self.gather_logits(logits), labels.reshape(-1))


class _CompiledTP:
    """``value_and_grad(ids, labels, scale)``: the jit graph, built for the first input length seen (one twin
    per sequence length)."""

    def __init__(self, model: nn.Cell, tp_mesh: Any, params: Sequence[Any], sequence_parallel: bool,
                 loss_parallel: bool) -> None:
        self.model, self.tp_mesh, self.params = model, tp_mesh, list(params)
        self.sp, self.lp = sequence_parallel, loss_parallel
        self._fns: dict = {}

    def _build(self, seq: int):
        names = [(p, p.name) for p in self.model.get_parameters()]
        twin = LocalTPModel(self.model, self.tp_mesh, seq=seq, sequence_parallel=self.sp, loss_parallel=self.lp)
        for p, name in names:  # the twin's cells prefix the shared parameters' names: the model's names back
            p.name = name
        used = {id(p) for p in twin.get_parameters()}
        missing = [p.name for p in self.params if id(p) not in used]
        if missing:
            raise ValueError(f"compiled_tp_grad_fn: parameters the local TP twin does not use: {missing}")

        def scaled(ids, labels, scale):
            return twin(ids, labels) * scale

        return twin, ms.jit(ms.value_and_grad(scaled, None, self.params))

    def __call__(self, ids, labels, scale):
        seq = int(ids.shape[1])
        if seq not in self._fns:
            self._fns[seq] = self._build(seq)
        return self._fns[seq][1](ids, labels, scale)


def compiled_tp_grad_fn(model: nn.Cell, tp_mesh: Any, params: Sequence[Any], *, sequence_parallel: bool = True,
                        loss_parallel: bool = False) -> "_CompiledTP":
    """``fn(ids, labels, scale) -> (loss * scale, gradients of params)``: the forward and backward of the
    TP-parallelised ``model`` (``parallelize_llama3`` on the 1-D ``tp_mesh`` with these ``sequence_parallel`` /
    ``loss_parallel`` flags) as one ``mindspore.jit`` graph per input length over a :class:`LocalTPModel`
    holding ``model`` 's own parameters. ``params``: the parameters to differentiate (this rank's shards, as
    the optimizer holds them); every one must be a parameter of the twin."""
    return _CompiledTP(model, tp_mesh, params, sequence_parallel, loss_parallel)
