# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The torch ``DTensor``: a ``torch.Tensor`` whose storage *is* the local shard.

Design (see ``docs/design/dtensor.md``):

* A DTensor is the local tensor itself, re-classed, plus an interned ``DTensorSpec``. There is no
  wrapper/inner pair, so autograd runs on the local ops directly and ``to_local`` is an alias.
* ``shape``/``size()``/``numel()``/``stride()`` report the *global* tensor, like PyTorch's DTensor.
* Every torch function/method called on a DTensor reaches ``__torch_function__``, which looks the
  function up in one dict: metadata passthroughs, the built-in methods below, and the op registry
  (``hyper_parallel.core.ops``) all live there. Unknown functions raise a clear error.
* Gradients follow one convention: the local gradient of a DTensor is the shard of the global
  gradient for ``Shard``, the full gradient for ``Replicate``/``Partial(sum)``, and 1/n of it
  for ``Partial(avg)``. Every redistribution step has its explicit adjoint (``collectives.py``).
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence

import torch
from torch._C import DisableTorchFunctionSubclass

from hyper_parallel.core.dtensor_base import (DTensorBase, distribute_request, from_local_spec, grad_partial_size,
                                              redistribute_request, replicated_spec, with_promise)
from hyper_parallel.core.ops.dispatch import dispatch_unregistered
from hyper_parallel.core.placement import Placement, Replicate
from hyper_parallel.core.redistribute import compile_plan, run_redistribute
from hyper_parallel.core.spec import DTensorSpec
from hyper_parallel.platform.torch.collectives import ScaleGrad
from hyper_parallel.platform.torch.platform import PLATFORM

__all__ = ["DTensor", "distribute_tensor", "SkipDTensorDispatch", "DISPATCH_TABLE", "register_function",
           "as_dtensor", "local_alias", "set_cross_mesh_mover"]

#: func -> handler(func, args, kwargs). Filled below and by the op registry.
DISPATCH_TABLE: Dict[Callable, Callable] = {}
_SKIP = [0]  # depth of SkipDTensorDispatch contexts (a list: read on the hot path without a lookup chain)


class SkipDTensorDispatch:
    """Context manager: inside it, torch functions on DTensors run on the local shards and return
    plain local tensors (for gradient hooks and hand-written local code)."""

    def __enter__(self) -> "SkipDTensorDispatch":
        _SKIP[0] += 1
        return self

    def __exit__(self, *exc) -> None:
        _SKIP[0] -= 1


def register_function(*funcs: Callable) -> Callable[[Callable], Callable]:
    """Decorator: route ``funcs`` on DTensors to the decorated handler ``(func, args, kwargs)``."""
    def deco(handler: Callable) -> Callable:
        for f in funcs:
            DISPATCH_TABLE[f] = handler
        return handler
    return deco


def as_dtensor(local: torch.Tensor, spec: DTensorSpec) -> "DTensor":
    """Turn ``local`` — a fresh plain tensor holding this rank's shard of ``spec`` — into a DTensor in place
    (no copy, autograd history kept) and return it. For library code that computes a shard itself (op
    expands, FSDP, checkpoint loading); ``local`` must not be used as a plain tensor afterwards."""
    local.__class__ = DTensor
    local._spec = spec  # pylint: disable=protected-access
    return local


def local_alias(t: torch.Tensor) -> torch.Tensor:
    """A new plain-tensor object aliasing ``t`` — for a DTensor, its local shard (a differentiable
    identity; unlike ``DTensor.to_local`` it never scales a ``grad_partial`` gradient)."""
    with DisableTorchFunctionSubclass():
        return t.view_as(t)


class DTensor(DTensorBase, torch.Tensor):
    """A distributed tensor: the local shard plus (mesh, placements, global shape).

    Create one with :func:`distribute_tensor` (from a full tensor) or :meth:`DTensor.from_local`
    (from this rank's shard); move it with :meth:`redistribute`; read it with :meth:`to_local` or
    :meth:`full_tensor`.
    """

    _spec: DTensorSpec

    # ------------------------------------------------------------------ construction
    @staticmethod
    def from_local(local_tensor: torch.Tensor, device_mesh=None, placements: Optional[Sequence[Placement]] = None,
                   *, run_check: bool = False, shape: Optional[Sequence[int]] = None,
                   stride: Optional[Sequence[int]] = None) -> "DTensor":  # pylint: disable=unused-argument
        """Wrap this rank's shard. The global shape is ``shape`` if given; otherwise it is computed
        exactly with a size all-gather when ``run_check`` (uneven shards), else assumed even."""
        if not isinstance(local_tensor, torch.Tensor) or isinstance(local_tensor, DTensor):
            raise TypeError(f"DTensor.from_local(local_tensor): expected a plain torch.Tensor, got "
                            f"{type(local_tensor).__name__}")
        spec = from_local_spec(tuple(local_tensor.shape), device_mesh, placements, shape, run_check,
                               lambda d, n: _gather_total(device_mesh, d, n))
        # the DTensor's local gradient is by convention the true derivative w.r.t. the local values
        # (for Partial(avg): 1/n of the global gradient), so from_local is an identity alias
        out = local_alias(local_tensor)
        return as_dtensor(out, spec)

    # ------------------------------------------------------------------ properties (global; the rest in DTensorBase)
    @property
    def shape(self) -> torch.Size:  # type: ignore[override]
        """Global shape."""
        return torch.Size(self._spec.shape)

    def size(self, dim: Optional[int] = None):  # type: ignore[override]
        """Global size (of one dim)."""
        if dim is None:
            return torch.Size(self._spec.shape)
        return self._spec.shape[dim]

    numel = DTensorBase.numel
    nelement = DTensorBase.numel
    stride = DTensorBase.stride
    __len__ = DTensorBase.__len__

    def __repr__(self, *, tensor_contents=None) -> str:  # pylint: disable=unused-argument
        return self.describe(repr(local_alias(self)))

    # ------------------------------------------------------------------ conversions
    def to_local(self) -> torch.Tensor:
        """This rank's shard as a plain tensor (an alias; gradients flow back unchanged)."""
        if self._spec.grad_partial and self.requires_grad and torch.is_grad_enabled():
            return ScaleGrad.apply(local_alias(self), 1.0 / grad_partial_size(self._spec))
        return local_alias(self)

    def redistribute(self, device_mesh=None, placements: Optional[Sequence[Placement]] = None, *,
                     async_op: bool = False, grad_partial: bool = False) -> "DTensor":  # pylint: disable=W0613
        """Move to ``placements`` with the cheapest plan (see ``explain_redistribute``).

        ``grad_partial=True`` (sequence parallel): on mesh dims gathered here the result's gradient is
        collected as *partial* contributions and reduce-scattered once by the all-gather's adjoint,
        instead of every column-parallel consumer all-reducing its own (see ``DTensorSpec``).
        ``async_op`` is accepted for API parity; CPU collectives here complete before returning.
        """
        spec = self._spec
        if device_mesh is not None and device_mesh != spec.mesh:  # another rank set: planned by core.cross_mesh
            return _CROSS_MESH["move"](self, device_mesh, placements)
        placements, gp = redistribute_request(spec, placements, grad_partial)
        if placements is None:
            return self
        dst, steps, _ = compile_plan(PLATFORM, spec.without_grad_partial(), placements, self.element_size(), gp)
        with DisableTorchFunctionSubclass():
            local = self.view_as(self)  # plain alias: collectives see local shapes
            if spec.grad_partial:
                local = PLATFORM.scale_grad(local, 1.0 / grad_partial_size(spec))
            out = run_redistribute(local, steps)
        return as_dtensor(out, with_promise(dst, gp))

    def full_tensor(self) -> torch.Tensor:
        """The whole global tensor on every rank, as a plain tensor (differentiable)."""
        full = self.redistribute(placements=(Replicate(),) * self._spec.mesh.ndim)
        return local_alias(full)

    # ------------------------------------------------------------------ torch DCP (_Checkpointable protocol)
    def __create_write_items__(self, fqn: str, obj) -> list:  # pylint: disable=unused-argument
        """torch DCP: the write item of this rank's shard (``hyper_parallel.platform.torch.checkpointable``)."""
        from hyper_parallel.platform.torch.checkpointable import create_write_items
        return create_write_items(self, fqn)

    def __create_chunk_list__(self) -> list:
        """torch DCP: the box of the global tensor this rank holds."""
        from hyper_parallel.platform.torch.checkpointable import create_chunk_list
        return create_chunk_list(self)

    def __get_tensor_shard__(self, index) -> torch.Tensor:
        """torch DCP: this rank's shard as a plain tensor sharing the storage."""
        from hyper_parallel.platform.torch.checkpointable import get_tensor_shard
        return get_tensor_shard(self, index)

    # ------------------------------------------------------------------ dispatch
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if _SKIP[0]:
            return _run_local(func, args, kwargs)
        handler = DISPATCH_TABLE.get(func)
        if handler is not None:
            return handler(func, args, kwargs or {})
        return _dispatch_miss(func, types, args, kwargs or {})


#: the cross-mesh mover (``cross_mesh.redistribute_across_meshes``), registered by that module when it is
#: imported (the package ``hyper_parallel.platform.torch`` imports it), so this module never imports it
_CROSS_MESH: Dict[str, Callable] = {}


def set_cross_mesh_mover(mover: Callable) -> None:
    """Install ``mover(dtensor, device_mesh, placements)`` for redistributions onto another mesh."""
    _CROSS_MESH["move"] = mover


#: what loads the op registry into DISPATCH_TABLE on the first miss; set by ``dispatch.py`` when it is
#: imported (the package ``hyper_parallel.platform.torch`` imports it), so this module never imports it
_REGISTRY_LOADER: List[Optional[Callable[[], None]]] = [None]


def set_registry_loader(loader: Callable[[], None]) -> None:
    """Install the function that fills :data:`DISPATCH_TABLE` from the op registry on the first miss."""
    _REGISTRY_LOADER[0] = loader


def _dispatch_miss(func, types, args, kwargs):
    """Load the op registry on first use, then retry; unknown functions get a clear error."""
    loader = _REGISTRY_LOADER[0]
    if loader is not None:
        _REGISTRY_LOADER[0] = None
        loader()
        handler = DISPATCH_TABLE.get(func)
        if handler is not None:
            return handler(func, args, kwargs)
    return dispatch_unregistered(func, types, args, kwargs)


def _gather_total(mesh, mesh_dim: int, size: int) -> int:
    """Sum of the ranks' ``size`` over ``mesh_dim`` (exact global sizes of uneven shards)."""
    mine = torch.tensor([size], dtype=torch.int64)
    n = mesh.shape[mesh_dim]
    sizes = PLATFORM.all_gather(mine, mesh.get_group(mesh_dim), 0, [1] * n, mesh.get_coordinate()[mesh_dim])
    return int(sizes.sum())


def _run_local(func, args, kwargs):
    with DisableTorchFunctionSubclass():
        out = func(*args, **(kwargs or {}))
    return _unwrap_result(out)


def _unwrap_result(out):
    if isinstance(out, DTensor):
        return local_alias(out)
    if isinstance(out, (tuple, list)):
        return type(out)(_unwrap_result(o) for o in out)
    return out


# ---------------------------------------------------------------------- built-in handlers
def _self_spec_result(func, args, kwargs):
    """Run ``func`` on the local data; tensor results keep the first argument's spec."""
    with DisableTorchFunctionSubclass():
        out = func(*args, **kwargs)
    if type(out) is torch.Tensor:  # pylint: disable=unidiomatic-typecheck
        return as_dtensor(out, args[0]._spec)
    return out


def _passthrough(func, args, kwargs):
    with DisableTorchFunctionSubclass():
        return func(*args, **kwargs)


_T = torch.Tensor
for _f in (_T.dtype.__get__, _T.device.__get__, _T.layout.__get__, _T.requires_grad.__get__, _T.is_leaf.__get__,
           _T.grad_fn.__get__, _T.is_cuda.__get__, _T.is_cpu.__get__, _T.is_sparse.__get__, _T.is_meta.__get__,
           _T.is_quantized.__get__, _T.ndim.__get__, _T.output_nr.__get__, _T._version.__get__,
           _T.itemsize.__get__, _T.requires_grad.__set__, _T.grad.__set__, _T.data.__set__, _T.__hash__,
           _T.dim, _T.ndimension, _T.element_size, _T.is_contiguous, _T.is_floating_point, _T.is_complex,
           _T.get_device, _T.data_ptr, _T.retain_grad, _T.register_hook, _T.backward, _T.is_shared,
           _T.untyped_storage, _T.__format__, _T.retains_grad.__get__, _T.register_post_accumulate_grad_hook,
           _T.is_inference, _T.__dir__, _T.__setstate__, _T._is_view, _T.is_set_to, _T.storage_offset,
           _T.requires_grad_):
    DISPATCH_TABLE[_f] = _passthrough
for _f in (torch.is_complex, torch.is_floating_point, torch.is_tensor, torch.is_storage, torch.is_same_size,
           torch.autograd.grad, torch.autograd.backward):
    DISPATCH_TABLE[_f] = _passthrough
DISPATCH_TABLE[torch.numel] = lambda func, args, kwargs: args[0].numel()
for _f in (_T.grad.__get__, _T.data.__get__, _T.detach, _T.detach_):
    DISPATCH_TABLE[_f] = _self_spec_result
DISPATCH_TABLE[_T.__repr__] = lambda func, args, kwargs: repr(args[0])


def distribute_tensor(tensor: torch.Tensor, device_mesh, placements: Optional[Sequence[Placement]] = None, *,
                      src_data_rank: Optional[int] = 0) -> DTensor:
    """Shard a full tensor over ``device_mesh`` with ``placements`` (default: all Replicate).

    The full tensor is taken from mesh rank ``src_data_rank`` (broadcast first) so every rank
    agrees; pass ``src_data_rank=None`` when every rank already holds identical data. The result
    is a leaf with ``requires_grad`` copied from ``tensor``.
    """
    if not isinstance(tensor, torch.Tensor) or isinstance(tensor, DTensor):
        raise TypeError(f"distribute_tensor(tensor): expected a plain torch.Tensor, got {type(tensor).__name__}")
    placements = distribute_request(tensor.dim(), device_mesh, placements, src_data_rank)
    with torch.no_grad():
        full = tensor.detach()
        copied = False
        if src_data_rank is not None and device_mesh.size() > 1:
            full = full.contiguous().clone()
            copied = True
            PLATFORM.broadcast(full, device_mesh.topology.ranks[src_data_rank], device_mesh.whole_group())
        dst, steps, _ = compile_plan(PLATFORM, replicated_spec(device_mesh, tensor.shape), placements,
                                     tensor.element_size())
        local = run_redistribute(full, steps)
        if local is full and not copied:
            local = full.clone()
        elif not local.is_contiguous():
            local = local.contiguous()
    local.requires_grad_(tensor.requires_grad)
    return as_dtensor(local, dst)


PLATFORM.dtensor_type = DTensor
PLATFORM.distribute_tensor = distribute_tensor
PLATFORM.wrap_local = as_dtensor
