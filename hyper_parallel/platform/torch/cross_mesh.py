# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Executor of cross-mesh redistribute plans (torch): block copies over point-to-point, with the adjoint.

Every rank of the source or the destination mesh calls :func:`redistribute_across_meshes` at the same
point: a source member with its DTensor, a rank only in the destination mesh with ``None`` and the
source spec (known from the pipeline's metadata exchange, for instance). Each rank posts, per peer in
ascending rank order, one ``batch_isend_irecv`` with its blocks, then assembles its destination shard.
Backward runs the copy in the other direction; a rank that only holds the source gets an empty
placeholder output, through which its backward is reached (the pipeline runtime does that).
"""
from __future__ import annotations

from collections import defaultdict
from typing import Optional, Sequence

import torch
import torch.distributed as dist
from torch._C import DisableTorchFunctionSubclass

from hyper_parallel.core.cross_mesh import CrossMeshPlan, mesh_ranks, plan_cross_mesh
from hyper_parallel.core.placement import Partial, Placement, Replicate
from hyper_parallel.core.redistribute import compile_plan, run_redistribute
from hyper_parallel.core.spec import DTensorSpec
from hyper_parallel.platform.base import P2POp
from hyper_parallel.platform.torch.dtensor import as_dtensor, set_cross_mesh_mover
from hyper_parallel.platform.torch.platform import PLATFORM

__all__ = ["redistribute_across_meshes", "run_copy"]

_TAG = 1 << 26


def _slices(offset, shape, base):
    return tuple(slice(o - b, o - b + s) for o, s, b in zip(offset, shape, base))


def run_copy(local: Optional[torch.Tensor], src: DTensorSpec, dst: DTensorSpec, pieces, dtype, me: int
             ) -> Optional[torch.Tensor]:
    """Move ``pieces`` (global blocks) from the ``src`` layout to the ``dst`` layout; returns this rank's
    destination shard (None when this rank is not in the destination mesh)."""
    src_coord = src.mesh.topology.coordinate_of(me)
    dst_coord = dst.mesh.topology.coordinate_of(me)
    src_off = src.local_shape_and_offset(src_coord)[1] if src_coord is not None else None
    out, doff = None, None
    if dst_coord is not None:
        dshape, doff = dst.local_shape_and_offset(dst_coord)
        out = torch.empty(dshape, dtype=dtype, device=local.device if local is not None else "cpu")
    ops = defaultdict(list)
    recvs = []
    for k, p in enumerate(pieces):
        if p.src == me and p.dst == me:
            out[_slices(p.offset, p.shape, doff)] = local[_slices(p.offset, p.shape, src_off)]
        elif p.src == me:
            ops[p.dst].append(P2POp("send", local[_slices(p.offset, p.shape, src_off)].contiguous(), p.dst, None,
                                    _TAG + k))
        elif p.dst == me:
            buf = torch.empty(p.shape, dtype=dtype, device=out.device)
            ops[p.src].append(P2POp("recv", buf, p.src, None, _TAG + k))
            recvs.append((p, buf))
    plat = PLATFORM
    handles = [h for peer in sorted(ops) for h in plat.batch_isend_irecv(ops[peer])]
    for h in handles:
        h.wait()
    for p, buf in recvs:
        out[_slices(p.offset, p.shape, doff)] = buf
    return out


class _CrossCopy(torch.autograd.Function):
    """The copy of a plan; adjoint: the copy back (destination gradient -> source layout)."""

    @staticmethod
    def forward(ctx, local, src, dst, pieces, back, dtype, me):  # pylint: disable=arguments-differ
        """Forward on local tensors (``local`` is a 0-element placeholder on destination-only ranks)."""
        ctx.args = (src, dst, back, dtype, me)
        with torch.no_grad():
            out = run_copy(local if src.mesh.topology.coordinate_of(me) is not None else None, src, dst, pieces,
                           dtype, me)
        return out if out is not None else local.new_empty((0,))

    @staticmethod
    def backward(ctx, grad):  # pylint: disable=arguments-differ
        """The explicit adjoint (see the class docstring)."""
        _src, dst, back, dtype, me = ctx.args
        has_dst = dst.mesh.topology.coordinate_of(me) is not None
        g = run_copy(grad.contiguous() if has_dst else None, back.src, back.dst, back.pieces, dtype, me)
        if g is None:
            g = torch.zeros((0,), dtype=dtype)
        return g, None, None, None, None, None, None


def _grad_spec(spec: DTensorSpec) -> DTensorSpec:
    pl = tuple(Replicate() if isinstance(p, Partial) else p for p in spec.placements)
    return DTensorSpec(spec.mesh, pl, spec.shape, validated=True)


def redistribute_across_meshes(x, device_mesh, placements: Sequence[Placement], *,
                               src_spec: Optional[DTensorSpec] = None, dtype: Optional[torch.dtype] = None):
    """Move DTensor ``x`` to ``placements`` on ``device_mesh`` (a mesh with another rank set; see the module
    docstring). A rank outside the source mesh passes ``x=None`` with ``src_spec`` (and ``dtype``).
    Returns the DTensor on destination members, an empty placeholder tensor on source-only ranks."""
    me = dist.get_rank()
    if x is not None:
        src_spec, dtype = x.spec.without_grad_partial(), x.dtype
    elif src_spec is None or dtype is None:
        raise ValueError("redistribute_across_meshes: a rank without the source DTensor must pass src_spec and dtype")
    if me not in mesh_ranks(src_spec.mesh) and me not in mesh_ranks(device_mesh):
        raise ValueError(f"redistribute_across_meshes: rank {me} is in neither mesh")
    itemsize = torch.empty((), dtype=dtype).element_size()
    plan: CrossMeshPlan = plan_cross_mesh(src_spec, device_mesh, placements, itemsize)
    mid = plan.pre.dst if plan.pre is not None else src_spec
    if x is not None:
        with DisableTorchFunctionSubclass():
            local = x.view_as(x)
        if plan.pre is not None:
            _, steps, _ = compile_plan(PLATFORM, src_spec, plan.pre.dst.placements, itemsize)
            with DisableTorchFunctionSubclass():
                local = run_redistribute(local, steps)
    else:  # requires grad so that this rank's half of the adjoint (sending its gradient blocks) runs too
        local = torch.zeros((0,), dtype=dtype, requires_grad=torch.is_grad_enabled() and dtype.is_floating_point)
    back = plan_cross_mesh(_grad_spec(plan.dst), mid.mesh, _grad_spec(mid).placements, itemsize)
    out = _CrossCopy.apply(local, mid, plan.dst, plan.pieces, back, dtype, me)
    if me in mesh_ranks(device_mesh):
        return as_dtensor(out, plan.dst)
    return out


set_cross_mesh_mover(redistribute_across_meshes)
