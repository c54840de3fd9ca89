# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The MindSpore implementation of the TP styles of ``hyper_parallel.tp.style`` (the same classes, names
and layouts as torch), for ``nn.Dense`` and ``mint.nn.Linear`` cells.

* ``ColwiseParallel``  weight ``Shard(0)`` (+ bias ``Shard(0)``); input ``Replicate`` by default,
                       output ``Shard(-1)``.
* ``RowwiseParallel``  weight ``Shard(1)``, bias ``Replicate`` (added once, after the reduction);
                       input ``Shard(-1)`` by default, output ``Replicate`` (an all-reduce; ``Shard(d)``
                       makes it a reduce-scatter).

Differences forced by MindSpore, same semantics: a ``Parameter`` cannot be a DTensor, so sharded
parameters hold this rank's shard as plain data (standard MindSpore optimizers work on them) and
their layout is recorded on the cell (:func:`param_dtensor` gives the DTensor view, e.g. for
``full_tensor()``); and the cell's ``construct`` is replaced (MindSpore has no forward-hook that may
replace inputs in every mode), computing the local linear on the local shards with the DTensor
redistributions of the inputs and outputs around it. Parameters must be identical on every rank
before sharding (seed first, as for ``distribute_tensor(..., src_data_rank=None)``).
"""
from __future__ import annotations

import types
from typing import TYPE_CHECKING, Dict, Tuple

import mindspore as ms
from mindspore import mint, nn

from hyper_parallel.core.placement import Partial, Placement, Replicate, Shard
from hyper_parallel.core.spec import DTensorSpec
from hyper_parallel.platform.mindspore.dtensor import DTensor
from hyper_parallel.tp.layouts import check_one_dim_mesh, one_layout

if TYPE_CHECKING:
    from hyper_parallel.core.device_mesh import DeviceMesh

__all__ = ["apply_style", "param_dtensor", "install_colwise", "install_rowwise", "check_linear_cell",
           "finish_output"]

_SPECS_ATTR = "_hp_param_specs"


def _as_tuple(layouts) -> Tuple[Placement, ...]:
    """``layouts`` (one placement or one per mesh dim) as a tuple of placements."""
    return (layouts,) if isinstance(layouts, Placement) else tuple(layouts)


def _shard_param(cell: nn.Cell, name: str, mesh, placement) -> None:
    param = getattr(cell, name, None)
    if param is None:
        return
    specs: Dict[str, DTensorSpec] = cell.__dict__.setdefault(_SPECS_ATTR, {})
    if name in specs:
        raise ValueError(f"{type(cell).__name__}.{name} is already sharded ({specs[name].placements}); a cell can be "
                         "parallelized once per mesh")
    spec = DTensorSpec(mesh, _as_tuple(placement), tuple(param.shape))
    local_shape, offset = spec.local_shape_and_offset(mesh.get_coordinate())
    data = param.value()
    for dim, (o, n) in enumerate(zip(offset, local_shape)):
        if n != data.shape[dim]:
            data = mint.narrow(data, dim, o, n)
    setattr(cell, name, ms.Parameter(data.copy(), name=param.name, requires_grad=param.requires_grad))
    specs[name] = spec


def param_dtensor(cell: nn.Cell, name: str) -> DTensor:
    """The DTensor view (local shard + layout) of parameter ``name`` of a parallelized cell."""
    specs = cell.__dict__.get(_SPECS_ATTR, {})
    if name not in specs:
        raise KeyError(f"{type(cell).__name__}.{name} is not a parameter sharded by a TP style "
                       f"(sharded: {sorted(specs)})")
    return DTensor(getattr(cell, name), specs[name])


def check_linear_cell(cell: nn.Cell, mesh, style: str) -> None:
    """A 1-D mesh and a linear cell without a fused activation (what the MindSpore TP computes)."""
    check_one_dim_mesh(mesh, style)
    if not isinstance(cell, (nn.Dense, mint.nn.Linear)):
        raise TypeError(f"{style} on MindSpore supports nn.Dense and mint.nn.Linear cells, got {type(cell).__name__}")
    if getattr(cell, "activation_flag", False):
        raise ValueError(f"{style}: nn.Dense with a fused activation is not supported on MindSpore because the "
                         f"activation would run before the row-parallel reduction; put the activation in its own cell")


def _as_dtensor(x, mesh, layout: Placement) -> DTensor:
    if isinstance(x, DTensor):
        return x
    if not isinstance(x, ms.Tensor):
        raise TypeError(f"TP cell input: expected a mindspore.Tensor or DTensor, got {type(x).__name__}")
    return DTensor.from_local(x, mesh, list(_as_tuple(layout)))


def finish_output(out: DTensor, mesh, layout: Placement, use_local: bool):
    """``out`` redistributed to ``layout`` (a local tensor again when ``use_local``)."""
    if out.placements != _as_tuple(layout):
        out = out.redistribute(mesh, list(_as_tuple(layout)))
    return out.to_local() if use_local else out


def _layouts(style, default_in: Placement, default_out: Placement) -> Tuple[Placement, Placement, bool]:
    name = type(style).__name__
    return (one_layout(style.input_layouts, name) or default_in, one_layout(style.output_layouts, name) or default_out,
            style.use_local_output)


def install_colwise(module: nn.Cell, device_mesh: "DeviceMesh", in_layout: Placement, out_layout: Placement,
                    use_local: bool) -> nn.Cell:
    """Replace ``module``'s ``construct`` with the column-parallel one (parameters already sharded)."""
    from hyper_parallel.platform import get_platform
    plat = get_platform("mindspore")
    group = device_mesh.get_group(0)

    def construct(cell, x):
        xd = _as_dtensor(x, device_mesh, in_layout).redistribute(device_mesh, [Replicate()])
        local = plat.grad_all_reduce(xd.to_local(), group)  # replicated input feeding sharded work
        y = mint.nn.functional.linear(local, cell.weight, cell.bias)
        shape = tuple(xd.shape[:-1]) + (_global_rows(cell),)
        return finish_output(DTensor(y, DTensorSpec(device_mesh, (Shard(len(shape) - 1),), shape)), device_mesh,
                             out_layout, use_local)

    module.construct = types.MethodType(construct, module)
    return module


def _apply_colwise(style, module: nn.Cell, device_mesh: "DeviceMesh") -> nn.Cell:
    """Shard the weight and bias as ``Shard(0)`` and install the column-parallel ``construct``."""
    check_linear_cell(module, device_mesh, type(style).__name__)
    layouts = _layouts(style, *style.default_linear_layouts())
    _shard_param(module, "weight", device_mesh, Shard(0))
    _shard_param(module, "bias", device_mesh, Shard(0))
    return install_colwise(module, device_mesh, *layouts)


def _global_rows(cell) -> int:
    return cell.__dict__[_SPECS_ATTR]["weight"].shape[0]


def install_rowwise(module: nn.Cell, device_mesh: "DeviceMesh", in_layout: Placement, out_layout: Placement,
                    use_local: bool) -> nn.Cell:
    """Replace ``module``'s ``construct`` with the row-parallel one (weight already sharded)."""
    if isinstance(out_layout, Shard) and out_layout.dim == -1 and getattr(module, "bias", None) is not None:
        raise _bias_on_features()
    from hyper_parallel.platform import get_platform
    plat = get_platform("mindspore")
    group = device_mesh.get_group(0)
    bias_partial_grad = not isinstance(out_layout, Replicate)

    def construct(cell, x):
        xd = _as_dtensor(x, device_mesh, in_layout)
        last = len(xd.shape) - 1
        xd = xd.redistribute(device_mesh, [Shard(last)])
        y = mint.nn.functional.linear(xd.to_local(), cell.weight, None)
        shape = tuple(xd.shape[:-1]) + (_global_rows(cell),)
        out = DTensor(y, DTensorSpec(device_mesh, (Partial("sum"),), shape)).redistribute(device_mesh, [out_layout])
        if cell.bias is not None and out.placements[0] == Shard(last):
            raise _bias_on_features()
        if cell.bias is not None:  # replicated bias, added once after the reduction
            bias = plat.grad_all_reduce(cell.bias, group) if bias_partial_grad else cell.bias
            out = DTensor(out.to_local() + bias, out.spec)
        return finish_output(out, device_mesh, out_layout, use_local)

    module.construct = types.MethodType(construct, module)
    return module


def _apply_rowwise(style, module: nn.Cell, device_mesh: "DeviceMesh") -> nn.Cell:
    """Shard the weight as ``Shard(1)`` (bias replicated) and install the row-parallel ``construct``."""
    check_linear_cell(module, device_mesh, type(style).__name__)
    layouts = _layouts(style, *style.default_linear_layouts())
    _shard_param(module, "weight", device_mesh, Shard(1))
    return install_rowwise(module, device_mesh, *layouts)


def _bias_on_features() -> ValueError:
    return ValueError("RowwiseParallel(output_layouts=Shard(<feature dim>)) with a bias is not supported on MindSpore "
                      "because the replicated bias would need its own chunking; use Replicate() or Shard(d) on a "
                      "non-feature dim")


#: the built-in styles (by ``kind``) that the MindSpore TP implements
SUPPORTED = {"colwise": _apply_colwise, "rowwise": _apply_rowwise}


def apply_style(style, module: nn.Cell, device_mesh: "DeviceMesh") -> nn.Cell:
    """Apply built-in ``style`` (a ``hyper_parallel.tp.style`` object, by its ``kind``) to the MindSpore cell
    ``module`` (in place) and return it."""
    fn = SUPPORTED.get(getattr(style, "kind", None))
    if fn is None:
        raise TypeError(f"{type(style).__name__} is not supported on MindSpore because MindSpore forward hooks "
                        "cannot replace a cell's inputs in every mode; the MindSpore TP replaces the construct of "
                        "nn.Dense and mint.nn.Linear cells (ColwiseParallel, RowwiseParallel)")
    return fn(style, module, device_mesh)
