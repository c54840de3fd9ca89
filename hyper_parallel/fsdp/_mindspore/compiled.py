# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Graph-mode compute for a ``fully_shard`` MindSpore model: :class:`CompiledFSDPStep`.

``fully_shard`` (PyNative) gathers each unit's parameters on the autograd tape and reduce-scatters their
gradients in the gather's backward, so its forward runs op by op. ``CompiledFSDPStep`` runs the same step with
the whole forward and backward as one ``mindspore.jit(mindspore.value_and_grad(...))`` graph over an *unsharded
twin* of the model (the same class and parameter names, its own full-size ``Parameter`` s), with the
communication outside the graph, in FSDP's units and flat buckets:

1. :meth:`gather`: every unit all-gathers its flat shard buffer (the one all-gather per unit and dtype of the
   PyNative forward, :meth:`_Unit.gather`, here off the tape) and the full values are written into the twin's
   parameters in place (a compiled graph keeps reading a parameter's storage);
2. :meth:`value_and_grad` (``mindspore.jit``): the loss and the full gradients of the twin's parameters;
3. :meth:`reduce`: per unit and dtype one reduce-scatter of the flat gradient (the same
   :meth:`_Bucket.reduce` the PyNative backward runs: HSDP all-reduce, ``1 / dp`` averaging, gradient scaling
   factor) and the result split into this rank's shard gradients, aligned with the sharded parameters.

The sharded ``Parameter`` s stay what the optimizer, clipping and checkpoints see; the gradients are the ones
``mindspore.value_and_grad`` returns for them under PyNative ``fully_shard`` (same sums, other float order).
Memory: each rank keeps the full parameters (the twin) and full gradients for the step, as data parallel does;
the optimizer state and the master parameters stay sharded. Gather once per step (the parameters do not change
between micro-batches) and reduce the summed gradients once. Mixed precision (a ``param_dtype``) is refused.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Sequence, Tuple

import mindspore as ms
from mindspore import mint, ops

from hyper_parallel.fsdp._mindspore.fully_shard import _units_below

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
        full = {p.name: p for p in twin.trainable_params()}
        self._plan: List[Tuple[Any, Any, List[Any]]] = []  # (unit, bucket, twin parameters of its entries)
        seen = set()
        for unit in units:
            if unit.mp.param_dtype is not None:
                raise ValueError(f"CompiledFSDPStep: the unit {type(unit.cell).__name__} has a mixed precision "
                                 f"param_dtype ({unit.mp.param_dtype}); the compiled step computes in the "
                                 "parameters' dtype")
            for b in unit.buckets:
                self._plan.append((unit, b, [self._twin_param(full, e) for e in b.entries]))
                seen.update(e.name for e in b.entries)
        missing = sorted(set(full) - seen)
        if missing:
            raise ValueError(f"CompiledFSDPStep: twin parameters no fully_shard unit manages: {missing}")
        self.twin_params = [p for _, _, ps in self._plan for p in ps]

        def loss(*inputs):  # a def: mindspore.jit parses a lambda only on its own line
            return loss_fn(twin, *inputs)

        self._grad_fn = ms.jit(ms.value_and_grad(loss, None, self.twin_params))

    @staticmethod
    def _twin_param(full: Dict[str, Any], entry: Any) -> Any:
        p = full.get(entry.name)
        if p is None or tuple(p.shape) != tuple(entry.shape):
            got = None if p is None else tuple(p.shape)
            raise ValueError(f"CompiledFSDPStep(twin): parameter {entry.name!r} of shape {tuple(entry.shape)} "
                             f"expected in the twin, found {got}")
        return p

    def gather(self) -> None:
        """All-gather every unit's parameters (one collective per unit and dtype, outside autograd) into the
        twin's parameters, in place."""
        for unit in {id(u): u for u, _, _ in self._plan}.values():
            fulls = dict((id(e), v) for e, v in unit.gather())
            for u, b, params in self._plan:
                if u is unit:
                    for e, p in zip(b.entries, params):
                        ops.assign(p, ops.stop_gradient(fulls[id(e)]))
            for b in unit.buckets:
                b.last_gathered = None

    def value_and_grad(self, *inputs) -> Tuple[Any, Tuple[Any, ...]]:
        """``(loss, full gradients)`` of ``loss_fn(twin, *inputs)``, the gradients aligned with
        :attr:`twin_params` (one compiled graph; call :meth:`gather` first)."""
        return self._grad_fn(*inputs)

    def reduce(self, full_grads: Sequence[Any]) -> Dict[str, Any]:
        """``{parameter name: this rank's shard gradient}`` from full gradients aligned with
        :attr:`twin_params`: per unit and dtype one reduce-scatter of the flat gradient (FSDP's reduction)."""
        out: Dict[str, Any] = {}
        pos = 0
        for unit, b, params in self._plan:
            grads = full_grads[pos:pos + len(params)]
            pos += len(params)
            flat = b.reduce(_gathered_layout(b, grads), b.dtype)
            lay = b.layout
            for i, e in enumerate(b.entries):
                n = lay.local_numel(i, unit.index)
                shape = tuple(e.sharded.shape)
                out[e.name] = (mint.narrow(flat, 0, lay.offsets[i], n).reshape(shape) if n
                               else mint.zeros(shape, dtype=e.dtype))
        return out


def _gathered_layout(bucket: Any, grads: Sequence[Any]) -> Any:
    """The rank-major flat buffer of ``bucket`` 's gathered layout holding the full gradients ``grads`` (the
    gradient the gathered buffer would get in PyNative: each rank's slot holds its rows, zero-padded)."""
    lay, world = bucket.layout, bucket.unit.shard_size
    pieces = []
    for i, (e, g) in enumerate(zip(bucket.entries, grads)):
        rows = g.reshape(e.shape[0], lay.inner[i])
        pad = world * lay.rows[i] - e.shape[0]
        if pad:
            rows = mint.cat((rows, mint.zeros((pad, lay.inner[i]), dtype=rows.dtype)), 0)
        pieces.append(rows.reshape(world, lay.slots[i]))
    table = pieces[0] if len(pieces) == 1 else mint.cat(pieces, 1)
    return table.reshape(-1)
