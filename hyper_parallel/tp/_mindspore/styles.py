# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The MindSpore implementation of the TP styles of ``hyper_parallel.tp.style`` (the same classes, names
and layouts as torch): Colwise/Rowwise on ``nn.Dense``, ``mint.nn.Linear``, ``nn.Embedding`` and
``mint.nn.Embedding`` (Rowwise = vocabulary-parallel), SequenceParallel on any cell with replicated
parameters (norms), PrepareModuleInput/Output on any cell.

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
from mindspore import mint, nn, ops

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


_EMBEDDINGS = (nn.Embedding, mint.nn.Embedding)


def _embedding_weight_name(cell: nn.Cell) -> str:
    """``embedding_table`` (``nn.Embedding``) or ``weight`` (``mint.nn.Embedding``)."""
    return "embedding_table" if isinstance(cell, nn.Embedding) else "weight"


def _check_embedding_cell(cell: nn.Cell, mesh, style: str) -> None:
    check_one_dim_mesh(mesh, style)
    if getattr(cell, "max_norm", None) is not None:
        raise ValueError(f"{style}: an Embedding with max_norm is not supported on MindSpore because the renorm would "
                         "see only this rank's rows")
    if isinstance(cell, nn.Embedding) and cell.use_one_hot:
        raise ValueError(f"{style}: nn.Embedding(use_one_hot=True) is not supported on MindSpore; use the default "
                         "lookup")


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
    """Shard the weight and bias as ``Shard(0)`` and install the column-parallel ``construct`` (an Embedding:
    weight ``Shard(1)``, output ``Shard(-1)``)."""
    if isinstance(module, _EMBEDDINGS):
        return _apply_embedding(style, module, device_mesh, Shard(1))
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
    """Shard the weight as ``Shard(1)`` (bias replicated) and install the row-parallel ``construct`` (an
    Embedding: vocabulary-parallel, weight ``Shard(0)``, output ``Replicate`` or ``Shard(d)``)."""
    if isinstance(module, _EMBEDDINGS):
        return _apply_embedding(style, module, device_mesh, Shard(0))
    check_linear_cell(module, device_mesh, type(style).__name__)
    layouts = _layouts(style, *style.default_linear_layouts())
    _shard_param(module, "weight", device_mesh, Shard(1))
    return install_rowwise(module, device_mesh, *layouts)


def _bias_on_features() -> ValueError:
    return ValueError("RowwiseParallel(output_layouts=Shard(<feature dim>)) with a bias is not supported on MindSpore "
                      "because the replicated bias would need its own chunking; use Replicate() or Shard(d) on a "
                      "non-feature dim")


# ---------------------------------------------------------------------- Embedding (column- and vocab-parallel)
def _lookup(weight, ids, padding_idx):
    """``weight[ids]`` (``ops.gather``: the mint Embedding kernel does not exist on CPU); rows looked up by
    ``padding_idx`` get no gradient, as in torch."""
    out = ops.gather(weight, ids, 0)
    if padding_idx is None:
        return out
    pad = (ids == padding_idx).astype(out.dtype).unsqueeze(-1)
    return out * (1 - pad) + ops.stop_gradient(out) * pad


def _vocab_lookup(ids, weight, lo: int, rows: int, padding_idx):
    """Rows of this rank's vocabulary slice ``[lo, lo + rows)``; other ids give zero rows."""
    outside = mint.logical_or(ids < lo, ids >= lo + rows)
    if rows == 0:  # an empty shard: zeros that still belong to the graph
        return weight.sum() * 0.0 + mint.zeros(tuple(ids.shape) + (weight.shape[1],), dtype=weight.dtype)
    local_pad = padding_idx - lo if padding_idx is not None and lo <= padding_idx < lo + rows else None
    local_ids = mint.where(outside, ops.zeros_like(ids), ids - lo)
    out = _lookup(weight, local_ids, local_pad)
    return out * mint.logical_not(outside).astype(out.dtype).unsqueeze(-1)


def _apply_embedding(style, module: nn.Cell, device_mesh: "DeviceMesh", weight_pl: Shard) -> nn.Cell:
    name = type(style).__name__
    _check_embedding_cell(module, device_mesh, name)
    in_layout = one_layout(style.input_layouts, name) or style.default_embedding_layouts()[0]
    out_layout = one_layout(style.output_layouts, name) or style.default_embedding_layouts()[1]
    use_local = style.use_local_output
    wname = _embedding_weight_name(module)
    _shard_param(module, wname, device_mesh, weight_pl)
    spec: DTensorSpec = module.__dict__[_SPECS_ATTR][wname]
    vocab, dim = spec.shape
    (rows, _), (lo, _) = spec.local_shape_and_offset(device_mesh.get_coordinate())
    pad = getattr(module, "padding_idx", None)
    pad = pad + vocab if pad is not None and pad < 0 else pad
    def construct(cell, ids):
        ids_d = _as_dtensor(ids, device_mesh, in_layout).redistribute(device_mesh, [Replicate()])
        weight = getattr(cell, wname)
        shape = tuple(ids_d.shape) + (dim,)
        if weight_pl.dim == 1:  # column-parallel: each rank looks up its embedding columns
            local = _lookup(weight, ids_d.to_local(), pad)
            out = DTensor(local, DTensorSpec(device_mesh, (Shard(len(shape) - 1),), shape))
        else:  # vocabulary-parallel: partial rows, summed by the output redistribution
            local = _vocab_lookup(ids_d.to_local(), weight, lo, rows, pad)
            out = DTensor(local, DTensorSpec(device_mesh, (Partial("sum"),), shape))
        return finish_output(out, device_mesh, out_layout, use_local)

    module.construct = types.MethodType(construct, module)
    return module


# ---------------------------------------------------------------------- SequenceParallel, PrepareModule*
def _layout_arg(x, mesh, given, desired, use_local: bool, grad_partial: bool = False):
    """``x`` laid out from ``given`` (a plain tensor's layout) to ``desired``; None entries leave it alone."""
    if given is None or not isinstance(x, (ms.Tensor, DTensor)):
        return x
    d = x if isinstance(x, DTensor) else DTensor.from_local(x, mesh, [given])
    if desired is not None and d.placements != (desired,):
        d = d.redistribute(mesh, [desired], grad_partial=grad_partial)
    return d.to_local() if use_local else d


def _apply_prepare_input(style, module: nn.Cell, device_mesh: "DeviceMesh") -> nn.Cell:
    check_one_dim_mesh(device_mesh, "PrepareModuleInput")
    inner = module.construct
    given, desired = tuple(style.input_layouts), tuple(style.desired)
    kw_in, kw_desired = dict(style.kw_in), dict(style.kw_desired)

    def construct(_cell, *args, **kwargs):
        args = tuple(_layout_arg(a, device_mesh, given[i], desired[i], style.use_local_output,
                                 style.partial_grad_on_gather) if i < len(given) else a for i, a in enumerate(args))
        kwargs = {k: _layout_arg(v, device_mesh, kw_in.get(k), kw_desired.get(k), style.use_local_output,
                                 style.partial_grad_on_gather) for k, v in kwargs.items()}
        return inner(*args, **kwargs)

    module.construct = types.MethodType(construct, module)
    return module


def _apply_prepare_output(style, module: nn.Cell, device_mesh: "DeviceMesh") -> nn.Cell:
    check_one_dim_mesh(device_mesh, "PrepareModuleOutput")
    inner = module.construct
    given, desired = tuple(style.output_layouts), tuple(style.desired)

    def construct(_cell, *args, **kwargs):
        out = inner(*args, **kwargs)
        single = not isinstance(out, tuple)
        outs = [_layout_arg(o, device_mesh, given[i], desired[i], style.use_local_output) if i < len(given) else o
                for i, o in enumerate((out,) if single else out)]
        return outs[0] if single else tuple(outs)

    module.construct = types.MethodType(construct, module)
    return module


def _apply_sequence(style, module: nn.Cell, device_mesh: "DeviceMesh") -> nn.Cell:
    """Replicated parameters (their gradients all-reduced over the TP group: each rank sees its part of
    the sequence), input and output ``Shard(sequence_dim)``."""
    check_one_dim_mesh(device_mesh, "SequenceParallel")
    from hyper_parallel.platform import get_platform
    plat = get_platform("mindspore")
    group = device_mesh.get_group(0)
    inner = module.construct
    names = [n for n, _ in module.parameters_and_names(expand=False)]
    seq = style.sequence_dim

    def construct(cell, x, *args, **kwargs):
        xd = x if isinstance(x, DTensor) else DTensor.from_local(x, device_mesh, [Shard(seq % len(x.shape))])
        pl = Shard(seq % len(xd.shape))
        if xd.placements != (pl,):
            xd = xd.redistribute(device_mesh, [pl])
        # shadow each Parameter with itself plus a gradient all-reduce (parameter hook migration); under
        # fully_shard the value shadowed is the gathered one fully_shard installed, restored afterwards
        saved = {n: cell.__dict__[n] for n in names if n in cell.__dict__}
        for n in names:
            cell.__dict__[n] = plat.grad_all_reduce(saved.get(n, cell._params[n]), group)  # noqa  # pylint: disable=W0212
        try:
            y = inner(xd.to_local(), *args, **kwargs)
        finally:
            for n in names:
                if n in saved:
                    cell.__dict__[n] = saved[n]
                else:
                    cell.__dict__.pop(n, None)
        out = DTensor(y, DTensorSpec(device_mesh, (pl,), tuple(xd.shape[:-1]) + (y.shape[-1],)))
        return out.to_local() if style.use_local_output else out

    module.construct = types.MethodType(construct, module)
    return module


#: the built-in styles (by ``kind``) that the MindSpore TP implements
SUPPORTED = {"colwise": _apply_colwise, "rowwise": _apply_rowwise, "sequence": _apply_sequence,
             "prepare_input": _apply_prepare_input, "prepare_output": _apply_prepare_output}


def apply_style(style, module: nn.Cell, device_mesh: "DeviceMesh") -> nn.Cell:
    """Apply built-in ``style`` (a ``hyper_parallel.tp.style`` object, by its ``kind``) to the MindSpore cell
    ``module`` (in place) and return it."""
    if getattr(style, "overlap", None) is not None:
        raise ValueError(f"{type(style).__name__}(overlap={style.overlap!r}) is torch-only: the MC2 ops "
                         "(hyper_parallel.kernels.all_gather_matmul / matmul_reduce_scatter) have no MindSpore "
                         "implementation; drop overlap= on MindSpore")
    fn = SUPPORTED.get(getattr(style, "kind", None))
    if fn is None:
        raise TypeError(f"{type(style).__name__} is not a built-in TP style; on MindSpore the built-in ones are "
                        "ColwiseParallel, RowwiseParallel, SequenceParallel, PrepareModuleInput, PrepareModuleOutput "
                        "and PrepareModuleInputOutput (a custom ParallelStyle implements apply() itself)")
    return fn(style, module, device_mesh)
