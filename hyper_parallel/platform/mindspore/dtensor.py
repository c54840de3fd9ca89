# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The MindSpore ``DTensor``: a MindSpore local shard plus the canonical ``DTensorSpec``.

Same public API as the torch DTensor (``from_local``, ``distribute_tensor``, ``to_local``,
``full_tensor``, ``redistribute``, ``placements``, ``device_mesh``, ``spec``, global ``shape``),
same planner (``core/redistribute_plan.py``) and executor (``core/redistribute.py``).

MindSpore has no ``__torch_function__``-style protocol, so a DTensor here is a small wrapper (not a
``mindspore.Tensor`` subclass: a subclass would let ``mint.add(dt, dt)`` silently compute on local
shards). MindSpore functions reach the op registry through :mod:`.dispatch` (``dispatch.mint.add(x, y)``,
``dispatch.call(mint.add, x, y)``) and through the Python operators of this class; passing a DTensor
straight to a MindSpore function raises MindSpore's own type error instead of a silent wrong result.

Autograd is MindSpore's functional one: differentiate a function of *local* tensors (or
``Parameter`` shards) with ``mindspore.grad``/``value_and_grad``; every redistribution step inside
has its explicit adjoint (``collectives.py``), following the gradient convention of ``base.py``.
"""
from __future__ import annotations

from typing import Callable, List, Optional, Sequence

import mindspore as ms

from hyper_parallel.core.dtensor_base import (DTensorBase, distribute_request, from_local_spec, grad_partial_size,
                                              redistribute_request, replicated_spec, with_promise)
from hyper_parallel.core.placement import Placement, Replicate
from hyper_parallel.core.redistribute import compile_plan, run_redistribute
from hyper_parallel.core.spec import DTensorSpec
from hyper_parallel.platform.mindspore.platform import PLATFORM

__all__ = ["DTensor", "distribute_tensor"]


class DTensor(DTensorBase):
    """A distributed MindSpore tensor: this rank's shard plus (mesh, placements, global shape)."""

    __slots__ = ("_local", "_spec", "__weakref__")

    def __init__(self, local: ms.Tensor, spec: DTensorSpec) -> None:
        """Internal: wrap ``local`` with ``spec`` (use :meth:`from_local` / :func:`distribute_tensor`)."""
        self._local = local
        self._spec = spec

    # ------------------------------------------------------------------ construction
    @staticmethod
    def from_local(local_tensor: ms.Tensor, device_mesh=None, placements: Optional[Sequence[Placement]] = None, *,
                   run_check: bool = False, shape: Optional[Sequence[int]] = None,
                   stride: Optional[Sequence[int]] = None) -> "DTensor":  # pylint: disable=unused-argument
        """Wrap this rank's shard. The global shape is ``shape`` if given; otherwise it is computed
        exactly with a size all-gather when ``run_check`` (uneven shards), else assumed even."""
        if not isinstance(local_tensor, ms.Tensor):
            raise TypeError(f"DTensor.from_local(local_tensor): expected a mindspore.Tensor, got "
                            f"{type(local_tensor).__name__}")
        spec = from_local_spec(tuple(local_tensor.shape), device_mesh, placements, shape, run_check,
                               lambda d, n: _gather_total(device_mesh, d, n))
        return DTensor(local_tensor, spec)

    # ------------------------------------------------------------------ properties (global; the rest in DTensorBase)
    @property
    def shape(self) -> tuple:
        """Global shape."""
        return self._spec.shape

    @property
    def ndim(self) -> int:
        """Rank of the global tensor."""
        return self._spec.ndim

    @property
    def dtype(self):
        """Element type (of the local shard, the same on every rank)."""
        return self._local.dtype

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return self._local.itemsize

    def dim(self) -> int:
        """Rank of the global tensor."""
        return self._spec.ndim

    def size(self, dim: Optional[int] = None):
        """Global size (of one dim)."""
        return self._spec.shape if dim is None else self._spec.shape[dim]

    def __repr__(self) -> str:
        return self.describe(repr(self._local))

    # ------------------------------------------------------------------ conversions
    def to_local(self) -> ms.Tensor:
        """This rank's shard as a plain MindSpore tensor (gradients flow back unchanged, scaled by 1/n on the
        mesh dims of a ``grad_partial`` promise, as on torch)."""
        if self._spec.grad_partial:
            return PLATFORM.scale_grad(self._local, 1.0 / grad_partial_size(self._spec))
        return self._local

    def redistribute(self, device_mesh=None, placements: Optional[Sequence[Placement]] = None, *,
                     async_op: bool = False, grad_partial: bool = False) -> "DTensor":  # pylint: disable=unused-argument
        """Move to ``placements`` with the cheapest plan (see ``explain_redistribute``); differentiable.

        ``grad_partial=True`` promises that the consumers produce *partial* gradients on mesh dims gathered
        here, so the all-gather's adjoint is a reduce-scatter instead of a slice; the promise travels in
        the result's spec, so the dispatcher skips the consumers' own gradient all-reduce (as on torch).
        """
        spec = self._spec
        if device_mesh is not None and device_mesh != spec.mesh:
            raise ValueError(f"redistribute(device_mesh): cross-mesh moves are not supported ({spec.mesh} -> "
                             f"{device_mesh})")
        placements, gp = redistribute_request(spec, placements, grad_partial)
        if placements is None:
            return self
        dst, steps, _ = compile_plan(PLATFORM, spec.without_grad_partial(), placements, self._local.itemsize, gp)
        local = self._local
        if spec.grad_partial:
            local = PLATFORM.scale_grad(local, 1.0 / grad_partial_size(spec))
        return DTensor(run_redistribute(local, steps), with_promise(dst, gp))

    def full_tensor(self) -> ms.Tensor:
        """The whole global tensor on every rank, as a plain MindSpore tensor (differentiable)."""
        return self.redistribute(placements=(Replicate(),) * self._spec.mesh.ndim)._local

    # ------------------------------------------------------------------ Python operators -> op registry
    def _op(self, name: str, *args):
        return _OP_CALLER[0](name, *args)

    def __add__(self, other):
        return self._op("mindspore.mint.add", self, other)

    def __radd__(self, other):
        return self._op("mindspore.mint.add", self, other)

    def __sub__(self, other):
        return self._op("mindspore.mint.sub", self, other)

    def __rsub__(self, other):
        return self._op("mindspore.mint.sub", other, self)

    def __mul__(self, other):
        return self._op("mindspore.mint.mul", self, other)

    def __rmul__(self, other):
        return self._op("mindspore.mint.mul", self, other)

    def __truediv__(self, other):
        return self._op("mindspore.mint.div", self, other)

    def __rtruediv__(self, other):
        return self._op("mindspore.mint.div", other, self)

    def __pow__(self, other):
        return self._op("mindspore.mint.pow", self, other)

    def __neg__(self):
        return self._op("mindspore.mint.neg", self)

    def __abs__(self):
        return self._op("mindspore.mint.abs", self)

    def __gt__(self, other):
        return self._op("mindspore.mint.gt", self, other)

    def __ge__(self, other):
        return self._op("mindspore.mint.ge", self, other)

    def __lt__(self, other):
        return self._op("mindspore.mint.lt", self, other)

    def __le__(self, other):
        return self._op("mindspore.mint.le", self, other)

    __hash__ = object.__hash__


def _no_dispatcher(name: str, *args):
    raise RuntimeError(f"{name} on a MindSpore DTensor: the dispatcher is not loaded (import "
                       "hyper_parallel.platform.mindspore)")


#: how Python operators reach the op registry; set by ``dispatch.py`` when it is imported (the package
#: ``hyper_parallel.platform.mindspore`` imports it), so this module never imports the dispatcher
_OP_CALLER: List[Callable] = [_no_dispatcher]


def set_op_caller(caller: Callable) -> None:
    """Install ``caller(name, *args)``, which dispatches registry op ``name`` (the Python operators use it)."""
    _OP_CALLER[0] = caller


def _gather_total(mesh, mesh_dim: int, size: int) -> int:
    """Sum of the ranks' ``size`` over ``mesh_dim`` (exact global sizes of uneven shards)."""
    mine = ms.Tensor([size], ms.int32)
    n = mesh.shape[mesh_dim]
    sizes = PLATFORM.all_gather(mine, mesh.get_group(mesh_dim), 0, [1] * n, mesh.get_coordinate()[mesh_dim])
    return int(sizes.sum())


def distribute_tensor(tensor: ms.Tensor, device_mesh, placements: Optional[Sequence[Placement]] = None, *,
                      src_data_rank: Optional[int] = 0) -> DTensor:
    """Shard a full MindSpore tensor over ``device_mesh`` with ``placements`` (default: all Replicate).

    The full tensor is taken from mesh rank ``src_data_rank`` (broadcast first) so every rank
    agrees; pass ``src_data_rank=None`` when every rank already holds identical data.
    """
    if not isinstance(tensor, ms.Tensor):
        raise TypeError(f"distribute_tensor(tensor): expected a mindspore.Tensor, got {type(tensor).__name__}")
    placements = distribute_request(tensor.ndim, device_mesh, placements, src_data_rank)
    full = ms.ops.stop_gradient(tensor).copy()
    if src_data_rank is not None and device_mesh.size() > 1:
        PLATFORM.broadcast(full, device_mesh.topology.ranks[src_data_rank], device_mesh.whole_group())
    dst, steps, _ = compile_plan(PLATFORM, replicated_spec(device_mesh, tensor.shape), placements, tensor.itemsize)
    return DTensor(run_redistribute(full, steps), dst)


PLATFORM.dtensor_type = DTensor
PLATFORM.distribute_tensor = distribute_tensor
PLATFORM.wrap_local = DTensor
