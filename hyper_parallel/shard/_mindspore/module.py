# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``shard_module`` on MindSpore ``nn.Cell`` models, with the plan format of ``hyper_parallel.shard``::

    plan = {
        "parameters": {"fc1.*": (Shard(0),), "fc2.weight": Layout((2,), ("tp",))("None", "tp")},
        "inputs":  {"": (Replicate(),)},        # per positional input of the cell; None leaves one alone
        "outputs": {"": (Replicate(),)},        # per output; DTensor outputs are redistributed
        "use_local_output": [""],               # cells whose DTensor outputs become local tensors
    }

Patterns are fnmatch globs over ``cells_and_names()`` (``""`` is the root cell) and over dotted
parameter names; a pattern that matches nothing and an unknown plan key are errors naming them.

MindSpore differences (see ``tp/_mindspore/styles.py``): a ``Parameter`` cannot be a DTensor, so a
sharded parameter holds this rank's shard and ``tp.param_dtensor(cell, name)`` gives its DTensor
view; and forward hooks cannot replace inputs, so inputs/outputs are laid out by replacing the
cell's ``construct``. A ``nn.Dense``/``mint.nn.Linear`` whose weight is ``Shard(0)`` (bias
``Shard(0)``) computes column-parallel and returns a ``Shard(-1)`` DTensor; one whose weight is
``Shard(1)`` (bias replicated) computes row-parallel and returns a ``Replicate`` DTensor. Code
between cells that sees DTensors calls MindSpore ops through ``platform.mindspore.dispatch``.
Replicated parameters may sit on any cell. Parameters must be identical on every rank before sharding.
"""
from __future__ import annotations

import types
from typing import TYPE_CHECKING, Any, Dict, List, Tuple

import mindspore as ms
from mindspore import nn

from hyper_parallel.core.placement import Partial, Replicate, Shard
from hyper_parallel.platform.mindspore.dtensor import DTensor
from hyper_parallel.shard.plan import check_plan, layouts_of, match, placements_of
from hyper_parallel.tp._mindspore.styles import (_shard_param, check_linear_cell, finish_output, install_colwise,
                                                 install_rowwise)

if TYPE_CHECKING:
    from hyper_parallel.core.device_mesh import DeviceMesh

__all__ = ["shard_module"]


def _param_names(cell: nn.Cell) -> Dict[str, Tuple[str, str]]:
    """Dotted parameter name -> (owning cell name, attribute name)."""
    names = {}
    for cname, sub in cell.cells_and_names():
        for leaf, _ in sub.parameters_and_names(expand=False):
            names[f"{cname}.{leaf}" if cname else leaf] = (cname, leaf)
    return names


def _resolve_parameters(cell: nn.Cell, plan: Dict[str, Any]) -> Dict[str, Dict[str, tuple]]:
    """Owning cell name -> {attribute: placements}, every pattern checked before anything changes."""
    names = _param_names(cell)
    out: Dict[str, Dict[str, tuple]] = {}
    for pattern, spec in plan.items():
        for name in match(list(names), pattern, "parameter"):
            placements = placements_of(spec, f"shard_module parameter {name}")
            if any(isinstance(p, Partial) for p in placements):
                raise ValueError(f"shard_module: parameter {name} cannot be laid out as {placements}: a parameter "
                                 "holds its value, not a pending sum")
            cname, leaf = names[name]
            out.setdefault(cname, {})[leaf] = placements
    return out


def _linear_style(cell: nn.Cell, cname: str, layouts: Dict[str, tuple], mesh):
    """The construct installer (column- or row-parallel) that computes ``cell`` with its planned parameter
    layouts (None: no sharding)."""
    if all(all(isinstance(p, Replicate) for p in pl) for pl in layouts.values()):
        return None
    check_linear_cell(cell, mesh, f"shard_module (cell {cname!r})")
    weight, bias = layouts.get("weight"), layouts.get("bias")
    has_bias = getattr(cell, "bias", None) is not None
    if weight == (Shard(0),) and (bias == (Shard(0),) or not has_bias):
        return lambda c, m: install_colwise(c, m, Replicate(), Shard(-1), False)
    if weight == (Shard(1),) and (bias in (None, (Replicate(),)) or not has_bias):
        return lambda c, m: install_rowwise(c, m, Replicate(), Replicate(), False)
    raise ValueError(f"shard_module: cell {cname!r} ({type(cell).__name__}) with parameter layouts {layouts} is not "
                     "supported on MindSpore; use weight Shard(0) with bias Shard(0) (column-parallel) or weight "
                     "Shard(1) with the bias replicated (row-parallel)")


def _to_layout(x, mesh, placements):
    """DTensors are redistributed; a plain tensor is taken as the full value (identical on every rank)."""
    if placements is None or not isinstance(x, (ms.Tensor, DTensor)):
        return x
    if not isinstance(x, DTensor):
        x = DTensor.from_local(x, mesh, [Replicate()] * mesh.ndim)
    return x if x.placements == tuple(placements) else x.redistribute(mesh, list(placements))


def _wrap_construct(cell: nn.Cell, mesh, inputs: List, outputs: List, use_local: bool) -> None:
    """Replace ``cell.construct`` with one laying out its inputs and outputs around the current one."""
    inner = cell.construct

    def construct(_cell, *args, **kwargs):
        args = tuple(_to_layout(a, mesh, inputs[i]) if i < len(inputs) else a for i, a in enumerate(args))
        out = inner(*args, **kwargs)
        single = not isinstance(out, tuple)
        outs = list((out,) if single else out)
        for i, o in enumerate(outs):
            if isinstance(o, DTensor):
                layout = outputs[i] if i < len(outputs) and outputs[i] is not None else o.placements
                outs[i] = finish_output(o, mesh, layout, use_local)
        return outs[0] if single else tuple(outs)

    cell.construct = types.MethodType(construct, cell)


def _boundaries(names: List[str], plan: Dict[str, Any]) -> Dict[str, list]:
    """Cell name -> [input layouts, output layouts, use_local_output], every pattern checked first."""
    found: Dict[str, list] = {}
    for key, slot in (("inputs", 0), ("outputs", 1)):
        for pattern, seq in plan.get(key, {}).items():
            layouts = layouts_of(seq, f"{key} of {pattern!r}")
            for name in match(names, pattern, key):
                found.setdefault(name, [[], [], False])[slot] = layouts
    for pattern in plan.get("use_local_output", []):
        for name in match(names, pattern, "use_local_output"):
            found.setdefault(name, [[], [], False])[2] = True
    return found


def shard_module(cell: nn.Cell, device_mesh: "DeviceMesh", sharding_plan: Dict[str, Any]) -> nn.Cell:
    """Lay out ``cell``'s parameters and cell boundaries as ``sharding_plan`` says (in place) and return it."""
    check_plan(sharding_plan)
    cells = dict(cell.cells_and_names())
    params = _resolve_parameters(cell, sharding_plan.get("parameters", {}))
    bounds = _boundaries(list(cells), sharding_plan)
    styles = {cname: _linear_style(cells[cname], cname, layouts, device_mesh) for cname, layouts in params.items()}
    for cname, layouts in params.items():
        for leaf, placements in layouts.items():
            _shard_param(cells[cname], leaf, device_mesh, placements)
        if styles[cname] is not None:
            styles[cname](cells[cname], device_mesh)
    for name, (inputs, outputs, use_local) in bounds.items():
        _wrap_construct(cells[name], device_mesh, inputs, outputs, use_local)
    return cell
