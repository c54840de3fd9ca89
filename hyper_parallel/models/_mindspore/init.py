# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Lazy construction and placement-invariant initialisation of MindSpore models (no torch).

``with init_empty_weights(): model = spec.model_cls(config)`` builds the cells with MindSpore's lazy
parameters (``mindspore.nn.utils.no_init_parameters``: shapes and names only, no data). Apply TP / EP (their
sharded parameters record their global ``DTensorSpec`` in the cell's ``_hp_param_specs``), then
``init_parameters(model, seed=)`` gives each parameter its value: ones for norm weights, Normal(0, ``std``)
otherwise, from the counter-based stream of ``(seed, parameter name)`` indexed by the global element
(``hyper_parallel.platform.mindspore.random``), generating only this rank's block. The values equal the torch
side's ``hyper_parallel.models.init_parameters(model, seed=)`` bit for bit, on every layout.
"""
from __future__ import annotations

import contextlib
from typing import Any, Dict, Iterator, Mapping

import mindspore as ms
import numpy as np
from mindspore import nn

from hyper_parallel.models.param_seed import parameter_seed
from hyper_parallel.platform.mindspore.random import shard_normal

__all__ = ["init_empty_weights", "init_parameters", "load_numpy", "parameter_values", "is_empty_init"]

_SPECS_ATTR = "_hp_param_specs"
_EMPTY = [0]


@contextlib.contextmanager
def init_empty_weights() -> Iterator[None]:
    """Build MindSpore cells without allocating their parameters (``mindspore.nn.utils.no_init_parameters``; our
    models skip their own init inside, see :func:`is_empty_init`); :func:`init_parameters` gives them their
    values."""
    from mindspore.nn.utils import no_init_parameters  # pylint: disable=import-outside-toplevel
    _EMPTY[0] += 1
    try:
        with no_init_parameters():
            yield
    finally:
        _EMPTY[0] -= 1


def is_empty_init() -> bool:
    """True inside :func:`init_empty_weights` (a model's constructor leaves its parameters lazy)."""
    return _EMPTY[0] > 0


def _is_norm(cell: nn.Cell) -> bool:
    return type(cell).__name__.endswith("RMSNorm") or isinstance(cell, nn.LayerNorm)


def parameter_values(name: str, kind: str, global_shape, local_shape=None, offset=None, *, seed: int = 0,
                     std: float = 0.02) -> np.ndarray:
    """The block ``local_shape`` at ``offset`` (default: the whole tensor) of parameter ``name``'s initial value
    (``kind``: ``"normal"``, ``"ones"`` or ``"zeros"``)."""
    global_shape = tuple(int(d) for d in global_shape)
    local_shape = global_shape if local_shape is None else tuple(int(d) for d in local_shape)
    if kind in ("ones", "zeros"):
        return getattr(np, kind)(local_shape, np.float32)
    if kind != "normal":
        raise ValueError(f"init_parameters: {name}: init kind {kind!r}; expected 'normal', 'ones' or 'zeros'")
    offset = (0,) * len(global_shape) if offset is None else tuple(offset)
    return shard_normal(parameter_seed(seed, name), global_shape, local_shape, offset, std)


def _block(spec: Any, shape) -> tuple:
    """(global shape, local shape, offset) of a parameter with ``spec`` (None: the whole, unsharded tensor)."""
    if spec is None:
        return tuple(shape), tuple(shape), None
    local, offset = spec.local_shape_and_offset(spec.mesh.get_coordinate())
    return tuple(spec.shape), tuple(local), tuple(offset)


def init_parameters(model: nn.Cell, *, seed: int = 0, std: float = 0.02) -> nn.Cell:
    """Give every parameter of ``model`` its initial value (see the module docstring): a cell's
    ``param_init_kinds = {name: "zeros" | "ones" | "normal"}`` overrides the default; tied parameters are set
    once; a parameter sharded by TP / EP (``_hp_param_specs``) gets only its local block. Returns ``model``."""
    done = set()
    for cell_name, cell in model.cells_and_names():
        specs = cell.__dict__.get(_SPECS_ATTR, {})
        for leaf, param in cell.parameters_and_names(expand=False):
            if id(param) in done:
                continue
            done.add(id(param))
            fqn = f"{cell_name}.{leaf}" if cell_name else leaf
            kind = getattr(cell, "param_init_kinds", {}).get(leaf) or ("ones" if _is_norm(cell) else "normal")
            global_shape, local, offset = _block(specs.get(leaf), param.shape)
            value = parameter_values(fqn, kind, global_shape, local, offset, seed=seed, std=std)
            param.set_data(ms.Tensor(value))
    return model


def _buffers(model: nn.Cell) -> Dict[str, Any]:
    """``{name: (cell, attribute)}`` of the non-parameter state the torch model keeps in its state dict (the
    MoE expert biases)."""
    out = {}
    for cell_name, cell in model.cells_and_names():
        if hasattr(cell, "expert_bias") and not isinstance(getattr(cell, "expert_bias"), ms.Parameter):
            out[f"{cell_name}.expert_bias" if cell_name else "expert_bias"] = cell
    return out


def load_numpy(model: nn.Cell, weights: Mapping[str, Any]) -> None:
    """Set every parameter (and expert bias) of ``model`` from full, unsharded ``{name: array}`` (a torch state
    dict as NumPy, or ``adapter.from_hf`` of a Hugging Face state dict with NumPy values); names of tied
    parameters (``model.tied_names()``) may be present; a missing or extra name, or a shape mismatch, is an
    error naming it."""
    what = f"{type(model).__name__}.load_numpy"
    own = dict(model.parameters_and_names())
    buffers = _buffers(model)
    aliases = getattr(model, "tied_names", dict)()
    given = {k: v for k, v in weights.items() if k not in aliases}
    missing = sorted(set(own) - set(given))
    extra = sorted(set(given) - set(own) - set(buffers))
    if missing or extra:
        raise ValueError(f"{what}: missing {missing}, unexpected {extra}")
    for name, param in own.items():
        value = np.asarray(given[name], dtype=np.float32)
        if tuple(value.shape) != tuple(param.shape):
            raise ValueError(f"{what}: {name} has shape {value.shape}, expected {tuple(param.shape)}")
        param.set_data(ms.Tensor(value))
    for name, cell in buffers.items():
        if name in given:
            cell.expert_bias = ms.Tensor(np.asarray(given[name], dtype=np.float32))
