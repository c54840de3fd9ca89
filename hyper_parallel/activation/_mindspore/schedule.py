# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Selective recompute and the independent recompute schedule on MindSpore (``Cell.recompute()`` per block).

Each cell of a layer is a block of a kind (``hyper_parallel.activation.schedule.BLOCK_OPS``) by its class:
linear layers ``matmul``, the routed experts ``grouped_matmul``, the attention core ``attention``, the MoE
router ``routing``, RMSNorms ``norm``, the gated activation ``activation``. A layer whose decision is
``"full"`` recomputes as a whole (:func:`checkpoint_wrapper`); under a policy or a block table, every block
that recomputes gets ``Cell.recompute()`` (its inputs are kept, what it computes inside is not, and it runs
again in backward), the others keep their activations. Cells of other classes are containers (attention, MLP,
MoE) whose blocks are decided one by one.
"""
from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Any, Dict, List, Optional, Sequence, Tuple

import mindspore as ms

from hyper_parallel.activation.config import ActivationConfigError
from hyper_parallel.activation.schedule import LayerRecompute, RecomputeSchedule

__all__ = ["apply_recompute_schedule", "block_kind", "saved_activation_bytes", "end_of_forward"]

#: cell class name -> block kind
_KINDS = {"Linear": "matmul", "Dense": "matmul", "Embedding": "matmul", "GroupedExperts": "grouped_matmul",
          "CoreAttention": "attention", "TokenChoiceTopKRouter": "routing", "GatedAct": "activation"}


def block_kind(cell: ms.nn.Cell) -> Optional[str]:
    """The block kind of ``cell`` (None for containers and unknown cells)."""
    for klass in type(cell).__mro__:
        if klass.__name__ in _KINDS:
            return _KINDS[klass.__name__]
        if klass.__name__.endswith("RMSNorm") or klass is ms.nn.LayerNorm:
            return "norm"
    return None


def _matching(named, patterns, model) -> List[Tuple[str, Any]]:
    out: List[Tuple[str, Any]] = []
    for pattern in patterns:
        hits = [(n, c) for n, c in named if fnmatchcase(n, pattern)]
        if not hits:
            raise ActivationConfigError(f"activation.layers: {pattern!r} matches no cell of {type(model).__name__}")
        out += [h for h in hits if h not in out]
    return out


def _layers(model, patterns) -> List[Tuple[str, Any]]:
    named = [(n, c) for n, c in model.cells_and_names() if n]
    if patterns:
        return _matching(named, patterns, model)
    best: List[Tuple[str, Any]] = []
    for name, cell in named:
        if isinstance(cell, (ms.nn.CellList, ms.nn.SequentialCell)) and len(cell):
            kids = [(f"{name}.{i}", c) for i, c in enumerate(cell)]
            if len({type(c) for _, c in kids}) == 1 and len(kids) > len(best):
                best = kids
    if not best:
        raise ActivationConfigError("activation.layers: the model has no CellList/SequentialCell of same-class "
                                    "blocks; name the layer cells with activation.layers (globs)")
    return best


def _apply_layer(layer: ms.nn.Cell, decision: LayerRecompute) -> List[str]:
    if decision.mode == "none":
        return []
    if getattr(layer, "_hp_activation_checkpoint", False):
        raise ValueError(f"recompute: {type(layer).__name__} is already checkpointed")
    if decision.mode == "full":
        layer.recompute(use_reentrant=False)
        layer._hp_activation_checkpoint = True  # pylint: disable=protected-access
        return [""]
    done: List[str] = []
    for name, cell in layer.cells_and_names():
        kind = block_kind(cell) if name else None
        if kind is None or any(name.startswith(d + ".") for d in done):
            continue
        if decision.recomputes(kind):
            cell.recompute()
            done.append(name)
    return done


def apply_recompute_schedule(model: ms.nn.Cell, schedule: RecomputeSchedule,
                             layers: Sequence[str] = ()) -> Dict[str, Tuple[str, ...]]:
    """Apply ``schedule`` to ``model``'s layer cells (``layers``: globs naming them; default the model's
    repeated blocks, e.g. ``model.layers.*``); returns ``{layer name: recomputed block names}`` (``("",)``: the
    whole layer). The schedule's length must equal the number of layers."""
    if not isinstance(schedule, RecomputeSchedule):
        raise TypeError(f"apply_recompute_schedule(schedule): expected a RecomputeSchedule, got "
                        f"{type(schedule).__name__}")
    found = _layers(model, list(layers))
    if len(found) != len(schedule.layers):
        raise ValueError(f"apply_recompute_schedule: the schedule has {len(schedule.layers)} layers, the model "
                         f"{len(found)} ({found[0][0]} ...)")
    return {name: tuple(_apply_layer(cell, d)) for (name, cell), d in zip(found, schedule.layers)}


def saved_activation_bytes(step: Any, *args: Any) -> Tuple[int, Any]:
    """``(bytes of the non-parameter tensors saved for backward during the forward, step(*args))`` for a
    ``step`` built with ``mindspore.value_and_grad`` whose forward calls
    ``hyper_parallel.activation._mindspore.schedule.end_of_forward()`` last (what is saved by recomputation
    inside backward is not counted): the activation memory a schedule leaves between forward and backward."""
    counter = _COUNTER
    counter[:] = [0, 0]
    with ms.saved_tensors_hooks(_pack, _unpack):
        out = step(*args)
    return counter[0], out


_COUNTER = [0, 0]  # [bytes packed in forward, 1 once the forward ended]


def end_of_forward() -> None:
    """Mark the end of the forward for :func:`saved_activation_bytes` (later packs are the recompute's)."""
    _COUNTER[1] = 1


def _pack(t):
    if not _COUNTER[1] and isinstance(t, ms.Tensor) and not isinstance(t, ms.Parameter):
        _COUNTER[0] += int(t.nbytes)
    return t


def _unpack(t):
    return t
