# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Tensor parallelism on MindSpore ``nn.Cell`` models: the styles of ``hyper_parallel.tp`` with the same
names and layouts, for ``nn.Dense`` and ``mint.nn.Linear`` cells.

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
from abc import ABC, abstractmethod
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Dict, Optional, Sequence, Tuple, Union

import mindspore as ms
from mindspore import mint, nn

from hyper_parallel.core.placement import Partial, Placement, Replicate, Shard
from hyper_parallel.core.spec import DTensorSpec
from hyper_parallel.platform.mindspore.dtensor import DTensor

if TYPE_CHECKING:
    from hyper_parallel.core.device_mesh import DeviceMesh

__all__ = ["ParallelStyle", "ColwiseParallel", "RowwiseParallel", "parallelize_module", "param_dtensor"]

Layouts = Union[None, Placement, Sequence[Optional[Placement]]]
_SPECS_ATTR = "_hp_param_specs"


def _as_tuple(layouts) -> Tuple[Placement, ...]:
    """``layouts`` (one placement or one per mesh dim) as a tuple of placements."""
    return (layouts,) if isinstance(layouts, Placement) else tuple(layouts)


def _first(layouts: Layouts) -> Optional[Placement]:
    if layouts is None:
        return None
    if isinstance(layouts, Placement):
        return layouts
    layouts = tuple(layouts)
    if len(layouts) != 1:
        raise ValueError(f"TP styles take one layout per 1-D mesh, got {layouts}")
    return layouts[0]


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


def _check(cell: nn.Cell, mesh, style: str) -> None:
    if mesh.ndim != 1:
        raise ValueError(f"{style}: expected a 1-D device mesh (slice it, e.g. mesh['tp']), got {mesh}")
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


def _finish(out: DTensor, mesh, layout: Placement, use_local: bool):
    if out.placements != _as_tuple(layout):
        out = out.redistribute(mesh, list(_as_tuple(layout)))
    return out.to_local() if use_local else out


class ParallelStyle(ABC):
    """Base class: ``apply(cell, device_mesh)`` shards the cell's parameters and rewires its forward."""

    @abstractmethod
    def apply(self, module: nn.Cell, device_mesh: "DeviceMesh") -> nn.Cell:
        """Parallelise ``module`` in place and return it."""


class _LinearStyle(ParallelStyle):  # pylint: disable=abstract-method  # concrete styles implement apply
    default_in: Placement
    default_out: Placement

    def __init__(self, *, input_layouts: Layouts = None, output_layouts: Layouts = None,
                 use_local_output: bool = True) -> None:
        self.input_layout = _first(input_layouts) or self.default_in
        self.output_layout = _first(output_layouts) or self.default_out
        self.use_local_output = use_local_output

    def _layouts(self) -> Tuple[Placement, Placement, bool]:
        return self.input_layout, self.output_layout, self.use_local_output


class ColwiseParallel(_LinearStyle):
    """Column-wise sharding of a linear cell: the output features are split."""

    default_in = Replicate()
    default_out = Shard(-1)

    def apply(self, module: nn.Cell, device_mesh: "DeviceMesh") -> nn.Cell:
        """Shard the weight and bias as ``Shard(0)`` and install the column-parallel ``construct``."""
        _check(module, device_mesh, type(self).__name__)
        _shard_param(module, "weight", device_mesh, Shard(0))
        _shard_param(module, "bias", device_mesh, Shard(0))
        return self.install_construct(module, device_mesh)

    def install_construct(self, module: nn.Cell, device_mesh: "DeviceMesh") -> nn.Cell:
        """Replace ``module``'s ``construct`` with the column-parallel one (parameters already sharded)."""
        in_layout, out_layout, use_local = self._layouts()
        from hyper_parallel.platform import get_platform
        plat = get_platform("mindspore")
        group = device_mesh.get_group(0)

        def construct(cell, x):
            xd = _as_dtensor(x, device_mesh, in_layout).redistribute(device_mesh, [Replicate()])
            local = plat.grad_all_reduce(xd.to_local(), group)  # replicated input feeding sharded work
            y = mint.nn.functional.linear(local, cell.weight, cell.bias)
            shape = tuple(xd.shape[:-1]) + (_global_rows(cell),)
            return _finish(DTensor(y, DTensorSpec(device_mesh, (Shard(len(shape) - 1),), shape)), device_mesh,
                           out_layout, use_local)

        module.construct = types.MethodType(construct, module)
        return module


def _global_rows(cell) -> int:
    return cell.__dict__[_SPECS_ATTR]["weight"].shape[0]


class RowwiseParallel(_LinearStyle):
    """Row-wise sharding of a linear cell: the input features are split; partial sums are reduced."""

    default_in = Shard(-1)
    default_out = Replicate()

    def apply(self, module: nn.Cell, device_mesh: "DeviceMesh") -> nn.Cell:
        """Shard the weight as ``Shard(1)`` (bias replicated) and install the row-parallel ``construct``."""
        _check(module, device_mesh, type(self).__name__)
        _shard_param(module, "weight", device_mesh, Shard(1))
        return self.install_construct(module, device_mesh)

    def install_construct(self, module: nn.Cell, device_mesh: "DeviceMesh") -> nn.Cell:
        """Replace ``module``'s ``construct`` with the row-parallel one (weight already sharded)."""
        in_layout, out_layout, use_local = self._layouts()
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
            out = DTensor(y, DTensorSpec(device_mesh, (Partial("sum"),), shape)).redistribute(device_mesh,
                                                                                               [out_layout])
            if cell.bias is not None and out.placements[0] == Shard(last):
                raise _bias_on_features()
            if cell.bias is not None:  # replicated bias, added once after the reduction
                bias = plat.grad_all_reduce(cell.bias, group) if bias_partial_grad else cell.bias
                out = DTensor(out.to_local() + bias, out.spec)
            return _finish(out, device_mesh, out_layout, use_local)

        module.construct = types.MethodType(construct, module)
        return module


def _bias_on_features() -> ValueError:
    return ValueError("RowwiseParallel(output_layouts=Shard(<feature dim>)) with a bias is not supported on MindSpore "
                      "because the replicated bias would need its own chunking; use Replicate() or Shard(d) on a "
                      "non-feature dim")


def parallelize_module(module: nn.Cell, device_mesh: "DeviceMesh",
                       parallelize_plan: Union[ParallelStyle, Dict[str, ParallelStyle]]) -> nn.Cell:
    """Apply ``parallelize_plan`` to ``module`` in place and return it (``hyper_parallel.tp`` semantics).

    ``parallelize_plan`` is a style (applied to ``module`` itself) or a dict whose keys are fnmatch
    globs over sub-cell names (``"layers.*.fc1"``); a key that matches no sub-cell is an error.
    """
    if isinstance(parallelize_plan, ParallelStyle):
        return parallelize_plan.apply(module, device_mesh)
    if not isinstance(parallelize_plan, dict):
        raise TypeError(f"parallelize_module(parallelize_plan): expected a ParallelStyle or a dict of "
                        f"glob -> ParallelStyle, got {type(parallelize_plan).__name__}")
    cells = dict((name, cell) for name, cell in module.cells_and_names() if name)
    for pattern, style in parallelize_plan.items():
        if not isinstance(style, ParallelStyle):
            raise TypeError(f"parallelize_module: plan[{pattern!r}] must be a ParallelStyle, got "
                            f"{type(style).__name__}")
        hits = [n for n in cells if fnmatchcase(n, pattern)]
        if not hits:
            raise ValueError(f"parallelize_module: plan key {pattern!r} matches no sub-cell of "
                             f"{type(module).__name__} (first names: {list(cells)[:8]})")
        for name in hits:
            style.apply(cells[name], device_mesh)
    return module
