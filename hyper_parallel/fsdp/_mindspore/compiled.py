# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Graph-mode compute for a ``fully_shard`` MindSpore model: :class:`CompiledFSDPStep`.

``fully_shard`` (PyNative) gathers each unit's parameters on the autograd tape and reduce-scatters their
gradients in the gather's backward, so its forward runs op by op. ``CompiledFSDPStep`` runs the same step with
the whole forward and backward as one ``mindspore.jit(mindspore.value_and_grad(...))`` graph over an *unsharded
twin* of the model (the same class and parameter names, its own full-size ``Parameter`` s), with the
communication outside the graph, in FSDP's units and flat buckets:

1. :meth:`gather`: the units' flat shard buffers, concatenated, in one all-gather (per unit and dtype, as the
   PyNative forward's :meth:`_Unit.gather`, when the units differ in group or dtype or a gradient is kept without
   sync), the full values written into the twin's parameters in place (a compiled graph keeps reading a
   parameter's storage);
2. :meth:`value_and_grad` (``mindspore.jit``): the loss and the full gradients of the twin's parameters, laid out
   inside the graph in the units' gathered flat layout (one ``[shard size, total]`` table);
3. :meth:`reduce`: one reduce-scatter of that table (per unit: the same :meth:`_Bucket.reduce` the PyNative
   backward runs; fused: its arithmetic -- HSDP all-reduce, ``1 / dp`` averaging, gradient scaling factor), split
   into this rank's shard gradients by parameter name.

The sharded ``Parameter`` s stay what the optimizer, clipping and checkpoints see; the gradients are the ones
``mindspore.value_and_grad`` returns for them under PyNative ``fully_shard`` (same sums, other float order).
Memory: each rank keeps the full parameters (the twin) and full gradients for the step, as data parallel does;
the optimizer state and the master parameters stay sharded. Gather once per step (the parameters do not change
between micro-batches) and reduce the summed gradients once. Mixed precision (a ``param_dtype``) is refused.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import mindspore as ms
import numpy as np
from mindspore import mint, ops

from hyper_parallel.fsdp._mindspore.fully_shard import _units_below
from hyper_parallel.platform.mindspore import collectives as C

__all__ = ["CompiledFSDPStep"]


class CompiledFSDPStep:
    """The forward and backward of ``model`` (after ``fully_shard``) as one ``mindspore.jit`` graph over
    ``twin`` (an unsharded model of the same class: the same parameter names and shapes; its values do not
    matter, :meth:`gather` overwrites them).

    Args:
        model: the ``fully_shard`` model (its root and every unit below it).
        twin: the unsharded model the graph computes with.
        loss_fn: ``loss_fn(twin, *inputs)`` -> a scalar tensor (traced by ``mindspore.jit``: graph-compatible).
    """

    def __init__(self, model: Any, twin: Any, loss_fn: Callable[..., Any]) -> None:
        units = _units_below(model)
        if not units:
            raise ValueError("CompiledFSDPStep(model): expected a model with fully_shard units, found none")
        #: (unit, bucket, twin parameters of its entries)
        self._plan: List[Tuple[Any, Any, List[Any]]] = _plan(units, {p.name: p for p in twin.trainable_params()})
        self.twin_params = [p for _, _, ps in self._plan for p in ps]
        if len({b.dtype for _, b, _ in self._plan}) != 1 or len({u.shard_size for u, _, _ in self._plan}) != 1:
            raise ValueError("CompiledFSDPStep: expected one parameter dtype and one shard group size over the "
                             "units (the gradients leave the graph as one table)")
        world = self._plan[0][0].shard_size
        layout = tuple((e.shape[0], b.layout.inner[i], world * b.layout.rows[i] - e.shape[0], b.layout.slots[i])
                       for _, b, _ in self._plan for i, e in enumerate(b.entries))

        def loss(*inputs):  # a def: mindspore.jit parses a lambda only on its own line
            return loss_fn(twin, *inputs)

        grad_fn = ms.value_and_grad(loss, None, self.twin_params)

        def loss_and_table(*inputs):
            value, grads = grad_fn(*inputs)
            return value, (_table(grads, layout, world, value),)

        self._grad_fn = ms.jit(loss_and_table)
        self._pack, self._install, self._split = _jitted_layout(self._plan, world)
        self._squares: Any = None  # the last fused reduce's squared shard-gradient norms (a tensor, plan order)
        self._loss: Any = None  # the last fused reduce's mean loss over the data-parallel ranks (a [1] tensor)
        self._norm_sq: Any = None  # the last fused reduce's squared norm of the full reduced gradients (a tensor)

    @property
    def fused(self) -> bool:
        """Whether :meth:`gather` and :meth:`reduce` run one collective for every unit (else one per unit)."""
        return self._fusable()

    def _fusable(self) -> bool:
        """Whether every bucket can share one collective: one dtype, one shard group and replicate group, and no
        gradient kept from a backward without sync."""
        first = self._plan[0][0]
        return all(b.dtype == self._plan[0][1].dtype and b.compute_dtype == b.dtype == b.reduce_dtype and b.acc is None
                   and u.shard_group == first.shard_group and u.replicate_group == first.replicate_group
                   and u.requires_grad_sync and u.is_last_backward for u, b, _ in self._plan)

    def gather(self) -> None:
        """All-gather every unit's parameters (outside autograd) into the twin's parameters, in place: one
        all-gather of every unit's flat shard concatenated when they share a group and dtype (else one per unit
        and dtype)."""
        if not self._fusable():
            self._gather_per_unit()
            return
        unit = self._plan[0][0]
        one = self._pack()  # every bucket's flat shard, concatenated (one graph)
        table = C.raw_all_gather(one, unit.shard_group, 0, (one.shape[0],) * unit.shard_size)
        self._install(table.reshape(unit.shard_size, -1))  # into the twin's parameters (one graph)
        for u, _, _ in self._plan:
            u.stats["all_gathers"] += 1

    def _gather_per_unit(self) -> None:
        for unit in {id(u): u for u, _, _ in self._plan}.values():
            fulls = dict((id(e), v) for e, v in unit.gather())
            for u, b, params in self._plan:
                if u is unit:
                    for e, p in zip(b.entries, params):
                        ops.assign(p, ops.stop_gradient(fulls[id(e)]))
            for b in unit.buckets:
                b.last_gathered = None

    def value_and_grad(self, *inputs) -> Tuple[Any, Tuple[Any]]:
        """``(loss, (table,))`` of ``loss_fn(twin, *inputs)`` (one compiled graph; call :meth:`gather` first):
        the full gradients of :attr:`twin_params` leave the graph already in the units' gathered flat layout,
        a ``[shard size, total + 1]`` table (each rank's slots, every bucket's columns in turn, then the loss in
        every row: it rides in the reduce-scatter, see :meth:`mean_loss`), in a 1-tuple so that micro-batches'
        gradients sum like lists of gradients. :meth:`reduce` takes it."""
        return self._grad_fn(*inputs)

    def reduce(self, grads: Sequence[Any]) -> Dict[str, Any]:
        """``{parameter name: this rank's shard gradient}`` from :meth:`value_and_grad` 's (summed) gradients:
        one reduce-scatter of the table for every unit (per unit and dtype when not :attr:`fused`), FSDP's
        reduction."""
        table = grads[0]
        out: Dict[str, Any] = {}
        if self._fusable():  # one reduce-scatter of every unit's flat gradient, split by one graph
            pieces, squares, self._loss, self._norm_sq = self._split(self._reduce_fused(table))
            shards = iter(pieces)
            for unit, b, _ in self._plan:
                for i, e in enumerate(b.entries):
                    out[e.name] = (next(shards) if b.layout.local_numel(i, unit.index)
                                   else mint.zeros(tuple(e.sharded.shape), dtype=e.dtype))
            self._squares = squares
            return out
        self._squares = self._loss = self._norm_sq = None
        flats, col = [], 0
        for _, b, _ in self._plan:  # per unit and dtype: _Bucket.reduce (accumulation without sync, ...)
            flats.append(b.reduce(mint.narrow(table, 1, col, b.layout.total).reshape(-1), b.dtype))
            col += b.layout.total
        for (unit, b, _), flat in zip(self._plan, flats):
            lay = b.layout
            for i, e in enumerate(b.entries):
                n = lay.local_numel(i, unit.index)
                shape = tuple(e.sharded.shape)
                out[e.name] = (mint.narrow(flat, 0, lay.offsets[i], n).reshape(shape) if n
                               else mint.zeros(shape, dtype=e.dtype))
        return out

    def mean_loss(self) -> Optional[Any]:
        """The loss of the last fused :meth:`reduce`, summed over the micro-batches the table summed and averaged
        over the data-parallel ranks (a ``[1]`` tensor; it rode in the table's last column through the
        reduce-scatter: no collective of its own); None after a per-unit reduce."""
        return self._loss

    def reduced_grad_sq_norm(self) -> Optional[Any]:
        """The squared 2-norm of the *full* reduced gradients of the last fused :meth:`reduce` (a 0-d tensor,
        the same on every rank; ``replicate``'s method of the same name gives data parallel's), for clipping
        without a collective: mccl has no reduce-scatter, its emulation all-reduces the whole table, so every rank
        holds every reduced gradient; None after a per-unit reduce."""
        return self._norm_sq

    def squared_norms(self) -> Optional[Dict[str, float]]:
        """``{parameter name: squared 2-norm of this rank's shard gradient}`` of the last fused :meth:`reduce`
        (computed in its split graph; one host copy here), for the non-empty shards; None after a per-unit
        reduce. ``clip_grad_norm(..., squares=...)`` takes it instead of one reduction per gradient."""
        if self._squares is None:
            return None
        names = [e.name for unit, b, _ in self._plan for i, e in enumerate(b.entries)
                 if b.layout.local_numel(i, unit.index)]
        return dict(zip(names, (float(x) for x in self._squares.asnumpy())))

    def _reduce_fused(self, table: Any) -> Any:
        """The ``[world, total]`` gathered-layout gradient table reduced over the data-parallel ranks for every
        unit (flat), and the per-column factors as a ``[total]`` tensor: :meth:`_Bucket.reduce` 's arithmetic
        (``scale / dp``) and this rank's slice happen in ``_split``. The reduce-scatter is an all-reduce of the
        table, in place (mccl has none: :func:`raw_reduce_scatter` emulates it so, then slices; keeping the
        whole table gives the global gradient norm without a collective); under HSDP a second one over the
        replicate group."""
        unit = self._plan[0][0]
        world = unit.shard_size
        total = table.shape[1]
        # the graph done before the collective starts (mccl's wait would share the CPU with its kernels): a host
        # read of the table's last element (written last), as replicate's compiled path does
        mint.narrow(mint.narrow(table, 0, world - 1, 1), 1, total - 1, 1).asnumpy()
        full = C.raw_all_reduce(table.reshape(-1), "sum", unit.shard_group, inplace=True)  # a step's temporary
        if unit.replicate_group is not None:
            full = C.raw_all_reduce(full, "sum", unit.replicate_group, inplace=True)
        for u, _, _ in self._plan:
            u.stats["reduce_scatters"] += 1
        factors = [u.scale / u.dp_size for u, _, _ in self._plan] + [1.0 / unit.dp_size]  # the loss: the mean
        return full, ms.Tensor(np.repeat(np.asarray(factors, np.float32),
                                          [b.layout.total for _, b, _ in self._plan] + [1]))


def _jitted_layout(plan: List[Tuple[Any, Any, List[Any]]], world: int):
    """The fused path's three layout graphs: ``pack()`` (every bucket's sharded parameters, each padded to its
    slot, as one flat buffer), ``install(table)`` (the ``[world, total]`` gathered table into the twin's
    parameters, in place) and ``split((full, factors))`` (this rank's slice of the reduced flat table times its
    buckets' factors, cut into the non-empty shard gradients in plan order, their squared norms, the mean loss at
    the slice's end, and the squared norm of the whole scaled table without its loss column)."""
    shards, fulls, pack_spec, install_spec, split_spec = [], [], [], [], []
    col = 0
    for unit, b, params in plan:
        lay = b.layout
        for i, (e, p) in enumerate(zip(b.entries, params)):
            n = lay.local_numel(i, unit.index)
            shards.append(e.sharded)
            fulls.append(p)
            pack_spec.append((n, lay.slots[i] - n))
            install_spec.append((col + lay.offsets[i], lay.slots[i], lay.inner[i], e.shape[0], tuple(e.shape)))
            if n:
                split_spec.append((col + lay.offsets[i], n, tuple(e.sharded.shape)))
        col += lay.total
    shards, fulls = tuple(shards), tuple(fulls)
    pack_spec, install_spec, split_spec = tuple(pack_spec), tuple(install_spec), tuple(split_spec)
    dtype = plan[0][1].dtype

    def pack():
        pieces = []
        for i in range(len(pack_spec)):  # pylint: disable=consider-using-enumerate  # a loop mindspore.jit unrolls
            n, pad = pack_spec[i]
            if n:
                pieces.append(shards[i].reshape(-1))
            if pad:
                pieces.append(mint.zeros((pad,), dtype=dtype))
        return mint.cat(pieces, 0)

    def install(table):
        for i in range(len(install_spec)):  # pylint: disable=consider-using-enumerate
            start, slot, inner, rows, shape = install_spec[i]
            block = mint.narrow(table, 1, start, slot).reshape(world * slot // inner, inner)
            ops.assign(fulls[i], mint.narrow(block, 0, 0, rows).reshape(shape))
        return table

    index = plan[0][0].index

    def split(full, factors):
        total = factors.shape[0]
        whole = full.reshape(world, total) * factors
        norm_sq = (mint.narrow(whole, 1, 0, total - 1) ** 2).sum()
        scaled = mint.narrow(whole, 0, index, 1).reshape(-1)
        out, squares = [], []
        for i in range(len(split_spec)):  # pylint: disable=consider-using-enumerate
            start, n, shape = split_spec[i]
            piece = mint.narrow(scaled, 0, start, n)
            out.append(piece.reshape(shape))
            squares.append((piece * piece).sum().reshape(1))  # for clipping: no PyNative op per gradient
        return tuple(out), mint.cat(squares, 0), mint.narrow(scaled, 0, total - 1, 1), norm_sq

    jit_split = ms.jit(split)
    return ms.jit(pack), ms.jit(install), lambda pair: jit_split(*pair)


def _twin_param(full: Dict[str, Any], entry: Any) -> Any:
    p = full.get(entry.name)
    if p is None or tuple(p.shape) != tuple(entry.shape):
        got = None if p is None else tuple(p.shape)
        raise ValueError(f"CompiledFSDPStep(twin): parameter {entry.name!r} of shape {tuple(entry.shape)} "
                         f"expected in the twin, found {got}")
    return p


def _plan(units: List[Any], full: Dict[str, Any]) -> List[Tuple[Any, Any, List[Any]]]:
    """(unit, bucket, the twin's parameters of its entries) for every bucket; errors naming what does not fit."""
    plan, seen = [], set()
    for unit in units:
        if unit.mp.param_dtype is not None:
            raise ValueError(f"CompiledFSDPStep: the unit {type(unit.cell).__name__} has a mixed precision "
                             f"param_dtype ({unit.mp.param_dtype}); the compiled step computes in the "
                             "parameters' dtype")
        for b in unit.buckets:
            plan.append((unit, b, [_twin_param(full, e) for e in b.entries]))
            seen.update(e.name for e in b.entries)
    missing = sorted(set(full) - seen)
    if missing:
        raise ValueError(f"CompiledFSDPStep: twin parameters no fully_shard unit manages: {missing}")
    return plan


def _table(grads, layout, world, loss):
    """The ``[world, total + 1]`` gathered-layout table of full gradients (inside the graph): each parameter's
    rows zero-padded to ``world`` equal slots, the slots side by side, then ``loss`` in every row (each rank's
    shard of the reduced table ends with the loss summed over the ranks). ``layout``: per parameter ``(rows,
    inner, pad rows, slot)``."""
    pieces = []
    for i in range(len(layout)):  # pylint: disable=consider-using-enumerate  # a loop mindspore.jit unrolls
        rows, inner, pad, slot = layout[i]
        g = grads[i].reshape(rows, inner)
        if pad:
            g = mint.cat((g, mint.zeros((pad, inner), dtype=g.dtype)), 0)
        pieces.append(g.reshape(world, slot))
    pieces.append(loss.reshape(1, 1).astype(pieces[0].dtype) * mint.ones((world, 1), dtype=pieces[0].dtype))
    return mint.cat(pieces, 1)
