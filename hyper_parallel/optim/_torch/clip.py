# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``clip_grad_norm_`` for any mix of gradients: DTensors of any layout on any mesh, and plain tensors.

The global norm of order ``p`` is ``(sum over all distinct gradient elements |g|^p)^(1/p)``. A
``DTensor`` gradient's local ``sum |g|^p`` is summed over exactly the mesh dims on which it is sharded
(FSDP's shard dim, TP's dim, an expert mesh's EP dim) and never over the dims on which it is
replicated (HSDP's replicate dim, TP ``Replicate``): those ranks hold copies. Gradients are grouped
by ``(mesh, sharded dims)``; the groups sharded over one mesh dim share one all-reduce per distinct rank
set (a vector: FSDP, EP and router parts over the same ranks in one collective), the others cost one scalar
all-reduce per sharded mesh dim, in one canonical order on every rank. A plain tensor counts once. With
``pp_group`` (pipeline stages each holding part of the model) the stage totals are summed over that group too.
``inf`` uses MAX. :func:`clip_grad_norm_and_sum_` adds scalars (a step's loss) to the same all-reduces.
"""
from __future__ import annotations

import math
from collections import defaultdict
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import torch
import torch.distributed as dist
from torch._C import DisableTorchFunctionSubclass

from hyper_parallel.core.placement import Replicate, Shard

__all__ = ["clip_grad_norm_", "clip_grad_norm_and_sum_", "get_total_norm"]

_Key = Tuple[Tuple[int, ...], Tuple[int, ...], Tuple[int, ...]]


def _spec_of(p: torch.Tensor):
    return p.__dict__.get("_spec")


def _group_grads(parameters: Iterable[torch.Tensor]) -> Tuple[Dict[_Key, List[torch.Tensor]], Dict[_Key, Any]]:
    """key (mesh ranks, sharded mesh dims) -> local gradients; key -> the mesh (None for plain tensors)."""
    grads: Dict[_Key, List[torch.Tensor]] = defaultdict(list)
    meshes: Dict[_Key, Any] = {}
    with DisableTorchFunctionSubclass():
        for i, p in enumerate(parameters):
            if not isinstance(p, torch.Tensor):
                raise TypeError(f"clip_grad_norm_(parameters): item {i} is a {type(p).__name__}, expected a tensor")
            g = p.grad
            if g is None:
                continue
            spec = _spec_of(p)
            if spec is None:
                key: _Key = ((), (), ())
                mesh = None
            else:
                mesh = spec.mesh
                dims = []
                for d, pl in enumerate(spec.placements):
                    if isinstance(pl, Shard):
                        if mesh.shape[d] > 1:
                            dims.append(d)
                    elif not isinstance(pl, Replicate):
                        raise ValueError(f"clip_grad_norm_: parameter {i} has placement {pl} on mesh dim {d}; "
                                         "gradients of Shard/Replicate parameters only")
                # the shape too: a 1-D mesh over ranks 0..3 and a (2, 2) mesh over them share the rank list,
                # and dim 0 is a different group in each
                key = (tuple(mesh.topology.ranks), tuple(mesh.shape), tuple(dims))
            grads[key].append(g.view_as(g))
            meshes.setdefault(key, mesh)
    return grads, meshes


def _local_part(gs: List[torch.Tensor], norm_type: float, foreach: Optional[bool]) -> torch.Tensor:
    """``sum |g|^p`` (or ``max |g|``) of local gradients, in float64."""
    inf = math.isinf(norm_type)
    by_kind: Dict[Tuple[Any, Any], List[torch.Tensor]] = defaultdict(list)
    for g in gs:
        if g.numel():
            by_kind[(g.device, g.dtype)].append(g)
    parts = []
    for (_, dtype), ts in by_kind.items():
        acc = torch.promote_types(dtype, torch.float32)
        if foreach is not False and len(ts) > 1:
            norms = torch._foreach_norm(ts, norm_type, dtype=acc)  # pylint: disable=protected-access
        else:
            norms = [torch.linalg.vector_norm(t, norm_type, dtype=acc) for t in ts]
        stacked = torch.stack([n.to(torch.float64).cpu() for n in norms])
        parts.append(stacked.max() if inf else stacked.pow(norm_type).sum())
    if not parts:
        return torch.zeros((), dtype=torch.float64)
    stacked = torch.stack(parts)
    return stacked.max() if inf else stacked.sum()


def _all_reduce(value: torch.Tensor, group, inf: bool, device) -> torch.Tensor:
    t = value.reshape(1).to(device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX if inf else dist.ReduceOp.SUM, group=group)
    return t.cpu()[0]


def _resolve_group(pp_group):
    if pp_group is None:
        return None
    if hasattr(pp_group, "whole_group") and hasattr(pp_group, "topology"):  # a DeviceMesh
        return pp_group.whole_group()
    return pp_group


def get_total_norm(parameters: Union[torch.Tensor, Iterable[torch.Tensor]], norm_type: float = 2.0,
                   foreach: Optional[bool] = None, *, pp_group: Any = None) -> torch.Tensor:
    """The global norm of the gradients of ``parameters`` (see the module docstring); a collective over
    every mesh the gradients live on (and ``pp_group``): call it on every rank."""
    grads, meshes = _group_grads([parameters] if isinstance(parameters, torch.Tensor) else parameters)
    return _total(grads, meshes, _check_norm_type(norm_type), foreach, _resolve_group(pp_group))[0]


def _check_norm_type(norm_type: Any) -> float:
    try:
        value = float(norm_type)
    except (TypeError, ValueError):
        value = float("nan")
    if math.isnan(value) or value <= 0:
        raise ValueError(f"clip_grad_norm_(norm_type): expected a positive number or inf, got {norm_type!r}")
    return value


def _group_ranks(group) -> Tuple[int, ...]:
    return tuple(dist.get_process_group_ranks(group))


def _bucketed_all_reduce(buckets: Dict[Tuple[int, ...], Tuple[Any, List[torch.Tensor]]], inf: bool,
                         device) -> Dict[Tuple[int, ...], List[torch.Tensor]]:
    """One all-reduce per distinct rank set (whatever mesh or group object the parts came from), in the global order
    of the rank sets (so that ranks sharing several groups meet in the same order)."""
    out = {}
    for ranks in sorted(buckets):
        group, parts = buckets[ranks]
        t = torch.stack([p.reshape(()) for p in parts]).to(device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX if inf else dist.ReduceOp.SUM, group=group)
        out[ranks] = list(t.cpu().unbind(0))
    return out


def _combine(total: torch.Tensor, part: torch.Tensor, inf: bool) -> torch.Tensor:
    return torch.maximum(total, part) if inf else total + part


def _parts(grads, meshes, norm_type: float, foreach, comm_device):
    """The total of the parts sharded over several mesh dims (reduced dim by dim) and the buckets (rank set ->
    (group, parts)) of those sharded over one dim."""
    inf = math.isinf(norm_type)
    total = torch.zeros((), dtype=torch.float64)
    buckets: Dict[Tuple[int, ...], Tuple[Any, List[torch.Tensor]]] = {}
    for key in sorted(grads):
        part = _local_part(grads[key], norm_type, foreach)
        mesh, dims = meshes[key], key[2]
        if len(dims) == 1:
            group = mesh.get_group(dims[0])
            buckets.setdefault(_group_ranks(group), (group, []))[1].append(part)
            continue
        for d in dims:
            part = _all_reduce(part, mesh.get_group(d), inf, comm_device)
        total = _combine(total, part, inf)
    return total, buckets


def _add_extras(buckets, extra, inf: bool, comm_device):
    """Append each ``(group, value)`` to its rank set's bucket; returns ``([], slots)`` (bucket, index of each), or
    under inf (a MAX all-reduce cannot carry a sum) ``([the values summed by their own all-reduces], [])``."""
    if inf:
        return [float(_all_reduce(torch.tensor(float(v), dtype=torch.float64), g, False, comm_device))
                for g, v in extra], []
    slots = []
    for group, value in extra:
        entry = buckets.setdefault(_group_ranks(group), (group, []))
        entry[1].append(torch.tensor(float(value), dtype=torch.float64))
        slots.append((_group_ranks(group), len(entry[1]) - 1))
    return [], slots


def _total(grads, meshes, norm_type: float, foreach, pp_group, extra=()) -> Tuple[torch.Tensor, List[float]]:
    """The total (``sum |g|^p`` or max) and the ``extra`` ``(group, value)`` pairs summed over their groups. Parts
    sharded over one mesh dim, and the extras, share one all-reduce per rank set (the loss of a step rides on
    the gradient norm's all-reduce); parts sharded over several dims are reduced dim by dim."""
    inf = math.isinf(norm_type)
    device = next((gs[0].device for gs in grads.values() if gs), torch.device("cpu"))
    comm_device = device if dist.is_initialized() and dist.get_backend() != "gloo" else torch.device("cpu")
    total, buckets = _parts(grads, meshes, norm_type, foreach, comm_device)
    norm_parts = {ranks: len(parts) for ranks, (_, parts) in buckets.items()}
    own, slots = _add_extras(buckets, extra, inf, comm_device)
    reduced = _bucketed_all_reduce(buckets, inf, comm_device)
    for ranks, parts in reduced.items():
        for part in parts[:norm_parts.get(ranks, 0)]:
            total = _combine(total, part, inf)
    if pp_group is not None:
        total = _all_reduce(total, pp_group, inf, comm_device)
    dtype = next((gs[0].dtype for gs in grads.values() if gs), torch.float32)
    out_dtype = torch.float64 if dtype == torch.float64 else torch.float32
    sums = own or [float(reduced[ranks][i]) for ranks, i in slots]
    return (total if inf else total.pow(1.0 / norm_type)).to(device=device, dtype=out_dtype), sums


def clip_grad_norm_(parameters: Union[torch.Tensor, Iterable[torch.Tensor]], max_norm: float,
                    norm_type: float = 2.0, error_if_nonfinite: bool = False, foreach: Optional[bool] = None, *,
                    pp_group: Any = None, copies: Iterable[torch.Tensor] = ()) -> torch.Tensor:
    """Clip the gradients of ``parameters`` in place by their global norm; returns that norm.

    Same contract as ``torch.nn.utils.clip_grad_norm_`` (``coef = min(1, max_norm / (norm + 1e-6))``
    multiplies every gradient), for any mix of gradients: ``DTensor`` s with any placements on any
    mesh (TP, FSDP, HSDP, TP x FSDP, experts on their own EP mesh) and plain tensors. The norm is a
    collective over each gradient's sharded mesh dims, so call it on every rank. ``pp_group`` (a
    process group or a ``DeviceMesh``) sums the stage norms of a pipeline over the stages.
    ``foreach`` picks the ``torch._foreach_*`` kernels (default: when more than one gradient shares a
    device and dtype). ``error_if_nonfinite`` raises on a NaN/inf total (on every rank alike).
    It composes with ``FSDPModule.set_gradient_scaling_factor``: it clips the scaled gradients.
    A parameter listed twice counts (and is scaled) once. ``copies``: parameters of ``parameters`` whose
    gradients are copies of a gradient another rank counts (a tied embedding's head on the last pipeline
    stage): scaled, not counted.
    """
    return clip_grad_norm_and_sum_(parameters, max_norm, (), norm_type, error_if_nonfinite, foreach,
                                   pp_group=pp_group, copies=copies)[0]


def clip_grad_norm_and_sum_(parameters: Union[torch.Tensor, Iterable[torch.Tensor]], max_norm: float,
                            sums: Sequence[Tuple[Any, float]], norm_type: float = 2.0,
                            error_if_nonfinite: bool = False, foreach: Optional[bool] = None, *,
                            pp_group: Any = None, copies: Iterable[torch.Tensor] = ()
                            ) -> Tuple[torch.Tensor, List[float]]:
    """:func:`clip_grad_norm_` that also sums each ``(group, value)`` of ``sums`` over its process group, in the
    same all-reduces as the norm (one per rank set: e.g. a training step's loss over the data-parallel ranks rides
    on the norm's all-reduce over the same ranks instead of a collective of its own). Returns ``(norm, [sum of
    each value over its group])``."""
    if isinstance(parameters, torch.Tensor):
        parameters = [parameters]
    parameters = list({id(p): p for p in parameters}.values())  # a parameter shared by two modules: once
    norm_type = _check_norm_type(norm_type)
    if isinstance(max_norm, bool) or not isinstance(max_norm, (int, float)) or not max_norm >= 0:
        raise ValueError(f"clip_grad_norm_(max_norm): expected a number >= 0, got {max_norm!r}")
    skip = {id(p) for p in copies}
    grads, meshes = _group_grads(p for p in parameters if id(p) not in skip)
    total, summed = _total(grads, meshes, norm_type, foreach, _resolve_group(pp_group), sums)
    if skip:  # scaled with the others
        grads, _ = _group_grads(parameters)
    if error_if_nonfinite and not bool(torch.isfinite(total)):
        raise RuntimeError(f"clip_grad_norm_: the total norm of order {norm_type} of the gradients is non-finite "
                           f"({float(total)}), so it cannot be clipped; pass error_if_nonfinite=False to clip anyway")
    _scale(grads, torch.clamp(float(max_norm) / (total + 1e-6), max=1.0), foreach)
    return total, summed


def _scale(grads: Dict[_Key, List[torch.Tensor]], coef: torch.Tensor, foreach: Optional[bool]) -> None:
    """Multiply every gradient by ``coef`` (one ``_foreach_mul_`` per device and dtype)."""
    by_kind: Dict[Tuple[Any, Any], List[torch.Tensor]] = defaultdict(list)
    for gs in grads.values():
        for g in gs:
            by_kind[(g.device, g.dtype)].append(g)
    with torch.no_grad():
        for (dev, _), gs in by_kind.items():
            c = coef.to(dev)
            if foreach is not False and len(gs) > 1:
                torch._foreach_mul_(gs, c)  # pylint: disable=protected-access
            else:
                for g in gs:
                    g.mul_(c)
