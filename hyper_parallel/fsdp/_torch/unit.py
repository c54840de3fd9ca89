# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""One FSDP unit: its flat shard buffers, the all-gather / reduce-scatter and the parameter swap.

A unit owns the parameters of one ``fully_shard`` call. They are grouped by dtype into *buckets*;
each bucket keeps

* ``sharded``    – the flat padded buffer of this rank's shards (``FlatLayout.total`` elements);
                   the sharded parameters are ``DTensor`` views into it,
* ``unsharded``  – the parameter-major unsharded buffer (``world * total`` elements, compute dtype);
                   the unsharded parameters (plain leaves, or TP ``DTensor`` leaves) are views into it
                   and its storage is freed (``resize_(0)``) while resharded,
* the reduced gradient shard – one flat tensor per reduction; the sharded gradients are views into it.

Unsharding is one ``all_gather_into_tensor`` into a rank-major buffer plus one
``split_with_sizes_copy`` into the unsharded buffer; reducing is one ``_chunk_cat`` of the
unsharded gradients plus one ``reduce_scatter_tensor`` (and one ``all_reduce`` across replicas for
HSDP). Copies into the unsharded buffer go through a ``.data`` alias, so the version counters that
autograd saved for the unsharded parameters do not move.
"""
from __future__ import annotations

import weakref
from typing import List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist
from torch._C import DisableTorchFunctionSubclass

from hyper_parallel.core import process_group as _pg
from hyper_parallel.core.spec import DTensorSpec
from hyper_parallel.fsdp.api import FlatLayout, MixedPrecisionPolicy, dtype_groups, resolve_reduce_dtype
from hyper_parallel.platform.base import CollectiveError
from hyper_parallel.platform.torch.dtensor import DTensor, as_dtensor

__all__ = ["ParamInfo", "MeshInfo", "Bucket", "FSDPUnit", "SHARDED", "UNSHARDED", "POST_FORWARD"]

SHARDED, UNSHARDED, POST_FORWARD = "sharded", "unsharded", "post_forward"
# pylint: disable=invalid-name
def _ALL_GATHER(*args, **kwargs):  # looked up per call, so a wrapper of torch.distributed sees it
    return (getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor)(*args, **kwargs)
def _REDUCE_SCATTER(*args, **kwargs):  # looked up per call, so a wrapper of torch.distributed sees it
    return (getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor)(*args, **kwargs)
# pylint: enable=invalid-name


def _ranks(group) -> tuple:
    return tuple(dist.get_process_group_ranks(group))


def _collective(name: str, group, fn, *args, **kwargs):
    try:
        return fn(*args, group=group, **kwargs)
    except RuntimeError as exc:
        raise CollectiveError(f"fully_shard {name} over ranks {_ranks(group)} failed; a peer rank may have died "
                              f"or diverged: {exc}") from exc


def _wait(name: str, group, work) -> None:
    if work is None:
        return
    try:
        work.wait()
    except RuntimeError as exc:
        raise CollectiveError(f"fully_shard {name} over ranks {_ranks(group)} failed; a peer rank may have died "
                              f"or diverged: {exc}") from exc


class ParamInfo:
    """One managed parameter: where it is registered, its global spec and its TP spec (if any)."""

    __slots__ = ("locations", "fqn", "shape", "dtype", "requires_grad", "tp_spec", "spec", "sharded",
                 "local", "unsharded", "full_view", "unit", "pending_init")

    def __init__(self, locations: List[Tuple[torch.nn.Module, str]], fqn: str, param: torch.Tensor) -> None:
        self.locations = locations
        self.fqn = fqn
        spec = param._spec if isinstance(param, DTensor) else None  # pylint: disable=protected-access
        self.tp_spec: Optional[DTensorSpec] = spec
        with DisableTorchFunctionSubclass():
            self.shape = tuple(param.view_as(param).shape)  # the shape FSDP shards (TP-local for TP params)
            self.dtype = param.dtype
            self.requires_grad = param.requires_grad
        self.spec: Optional[DTensorSpec] = None
        self.sharded: Optional[torch.nn.Parameter] = None
        self.local: Optional[torch.Tensor] = None
        self.unsharded: Optional[torch.nn.Parameter] = None
        self.full_view: Optional[torch.Tensor] = None
        self.unit: Optional["FSDPUnit"] = None
        self.pending_init = False  # built from a meta-device parameter: its shard awaits its values

    def mark_written(self) -> None:
        """The shard received its values (after a meta-device build): the unit may run forward."""
        if self.pending_init:
            self.pending_init = False
            self.unit.pending_init -= 1


def _reduce_mode(group) -> str:
    """``all_reduce`` on gloo, ``reduce_scatter`` elsewhere; ``$HYPER_PARALLEL_FSDP_REDUCE`` overrides."""
    import os
    mode = os.environ.get("HYPER_PARALLEL_FSDP_REDUCE", "").strip()
    if not mode:
        return "all_reduce" if dist.get_backend(group) == "gloo" else "reduce_scatter"
    if mode not in ("all_reduce", "reduce_scatter"):
        raise ValueError(f"HYPER_PARALLEL_FSDP_REDUCE={mode!r}: expected 'all_reduce' or 'reduce_scatter'")
    return mode


#: every live MeshInfo: ``destroy_process_group()`` makes them drop their groups (a model still alive then
#: would otherwise keep gloo's groups and worker threads until interpreter exit, where tearing them down can
#: abort the process: "terminate called without an active exception")
_LIVE: "weakref.WeakSet[MeshInfo]" = weakref.WeakSet()


def _release_groups() -> None:
    for info in list(_LIVE):
        info.shard_group = info.rep_group = info.reduce_group = info.pf_group = None
    _LIVE.clear()


_pg.ON_DESTROY.append(_release_groups)


class MeshInfo:
    """The groups of a unit: shard group (FSDP dim), replicate group (HSDP) and post-forward group."""

    def __init__(self, mesh, post_forward_k: int) -> None:
        if mesh.ndim not in (1, 2):
            raise ValueError(f"fully_shard(mesh): expected a 1-D (FSDP) or 2-D (replicate, shard) HSDP mesh, "
                             f"got {mesh}")
        coord = mesh.get_coordinate()
        if coord is None:
            raise ValueError(f"fully_shard(mesh): this rank is not part of {mesh}")
        self.mesh = mesh
        self.shard_dim = mesh.ndim - 1
        self.shard_group = mesh.get_group(self.shard_dim)
        self.shard_size = mesh.shape[self.shard_dim]
        self.shard_index = coord[self.shard_dim]
        self.rep_group = mesh.get_group(0) if mesh.ndim == 2 else None
        self.rep_size = mesh.shape[0] if mesh.ndim == 2 else 1
        self.dp_size = self.shard_size * self.rep_size
        # gloo's reduce-scatter is slower than its ring all-reduce of the same bytes: on gloo a unit's
        # gradients are all-reduced over every data-parallel rank (both HSDP dims at once) and sliced
        self.reduce_by_all_reduce = _reduce_mode(self.shard_group) == "all_reduce" and self.dp_size > 1
        self.reduce_group = mesh.whole_group() if mesh.ndim == 2 else self.shard_group
        if self.shard_size > 1 and dist.get_rank(self.shard_group) != self.shard_index:
            raise ValueError(f"fully_shard(mesh): the shard group of {mesh} is not in mesh order (group rank "
                             f"{dist.get_rank(self.shard_group)} vs coordinate {self.shard_index})")
        self.pf_k = post_forward_k
        self.pf_group = None
        self.pf_position = 0
        if 1 < post_forward_k < self.shard_size:
            self._make_post_forward_groups(post_forward_k)
        _LIVE.add(self)

    def _make_post_forward_groups(self, k: int) -> None:
        from hyper_parallel.core.process_group import get_or_create_group
        me = dist.get_rank()
        for ranks in self.mesh.topology.groups_along(self.shard_dim):  # every rank creates every group
            for start in range(0, len(ranks), k):
                sub = ranks[start:start + k]
                group = get_or_create_group(sub)
                if me in sub:
                    self.pf_group = group
                    self.pf_position = sub.index(me)
        if dist.get_rank(self.pf_group) != self.pf_position:
            raise ValueError(f"fully_shard(reshard_after_forward={k}): the {k}-rank groups of {self.mesh} are not "
                             f"in mesh order")


class Bucket:  # pylint: disable=too-many-instance-attributes
    """The parameters of one dtype in a unit, with their flat buffers."""

    def __init__(self, infos: Sequence[ParamInfo], mi: MeshInfo, mp: MixedPrecisionPolicy, device: torch.device,
                 offload: bool, pin: bool) -> None:
        self.infos = list(infos)
        self.mi = mi
        self.dtype = infos[0].dtype
        floating = self.dtype.is_floating_point
        self.param_dtype = mp.param_dtype if (mp.param_dtype is not None and floating) else self.dtype
        self.reduce_dtype = resolve_reduce_dtype(mp, self.param_dtype) if floating else self.dtype
        self.device = device
        self.offload = offload
        self.storage_device = torch.device("cpu") if offload else device
        self.pin = pin and offload and device.type != "cpu"
        self.layout = FlatLayout([i.shape for i in infos], mi.shard_size)
        # one parameter alone: the rank-major gathered buffer *is* the (padded) unsharded parameter,
        # so the all-gather writes straight into it and its gradient needs no packing
        self.direct = len(self.infos) == 1
        self.sharded = torch.zeros(self.layout.total, dtype=self.dtype, device=self.storage_device,
                                   pin_memory=self.pin)
        n = mi.shard_size * self.layout.total
        self.unsharded = torch.empty(n, dtype=self.param_dtype, device=device)
        self._write = self.unsharded.data  # same storage, own version counter
        self._out_views = []
        for i in range(len(infos)):
            off, length = self.layout.unsharded_range(i)
            self._out_views.append(self._write[off:off + length].view(mi.shard_size, self.layout.slots[i]))
        self.unsharded_nbytes = self.unsharded.untyped_storage().nbytes()
        self.pf_shard: Optional[torch.Tensor] = None
        self.acc: Optional[List[Optional[torch.Tensor]]] = None

    # ------------------------------------------------------------------ building
    def shard_from(self, fulls: Sequence[torch.Tensor]) -> None:
        """Fill the sharded buffer from each parameter's full (TP-local) value and build the views
        (``info.local`` into the sharded buffer, ``info.full_view`` into the unsharded one)."""
        idx = self.mi.shard_index
        lay = self.layout
        with torch.no_grad(), DisableTorchFunctionSubclass():
            for i, (info, full) in enumerate(zip(self.infos, fulls)):
                rows = lay.local_shape(i, idx)[0]
                start = min(idx * lay.rows[i], info.shape[0])
                off = lay.offsets[i]
                local = self.sharded[off:off + rows * lay.inner[i]].view((rows,) + info.shape[1:])
                if full.is_meta:  # meta-device model: the shard is filled later (write_local_shard)
                    info.pending_init = True
                else:
                    local.copy_(full.detach().narrow(0, start, rows))
                info.local = local
                uoff = lay.unsharded_range(i)[0]
                info.full_view = self.unsharded[uoff:uoff + lay.full_numel(i)].view(info.shape)

    # ------------------------------------------------------------------ storage
    def alloc_unsharded(self) -> None:
        """Give the unsharded buffer its storage back (no-op when it has it)."""
        storage = self.unsharded.untyped_storage()
        if storage.nbytes() != self.unsharded_nbytes:
            storage.resize_(self.unsharded_nbytes)

    def free_unsharded(self) -> None:
        """Release the unsharded buffer's memory; the views keep their metadata."""
        storage = self.unsharded.untyped_storage()
        if storage.nbytes():
            storage.resize_(0)

    # ------------------------------------------------------------------ all-gather
    def start_all_gather(self, from_post_forward: bool, async_op: bool):
        """Issue the all-gather of this bucket; returns ``(work, output, input)``."""
        mi = self.mi
        if from_post_forward:
            src, group, size = self.pf_shard, mi.pf_group, mi.pf_k
        else:
            src, group, size = self.sharded, mi.shard_group, mi.shard_size
            if src.device != self.device:
                src = src.to(self.device, non_blocking=True)
            if src.dtype != self.param_dtype:
                src = src.to(self.param_dtype)
        if size == 1:
            return None, src, src
        if self.direct:
            self.alloc_unsharded()
            out = self._write
        else:
            out = torch.empty(src.numel() * size, dtype=src.dtype, device=src.device)
        work = _collective("all_gather", group, _ALL_GATHER, out, src, async_op=async_op)
        return work, out, src

    def copy_out(self, gathered: torch.Tensor, keep_post_forward: bool) -> None:
        """Scatter the rank-major gathered buffer into the parameter-major unsharded buffer."""
        self.alloc_unsharded()
        n = self.mi.shard_size
        if self.layout.total and gathered is not self._write:
            torch.split_with_sizes_copy(gathered.view(n, self.layout.total), list(self.layout.slots), dim=1,
                                        out=self._out_views)
        if keep_post_forward:
            off, length = self.layout.post_forward_range(self.mi.pf_k, self.mi.pf_position)
            self.pf_shard = gathered[off:off + length].clone()

    # ------------------------------------------------------------------ gradients
    def take_grads(self) -> Tuple[List[Optional[torch.Tensor]], bool]:
        """The unsharded gradients (plus the no-sync accumulation), cleared from the parameters."""
        grads: List[Optional[torch.Tensor]] = []
        any_grad = False
        acc = self.acc
        for i, info in enumerate(self.infos):
            p = info.unsharded
            g = p.grad
            if g is not None:
                p.grad = None
                if type(g) is not torch.Tensor:  # pylint: disable=unidiomatic-typecheck
                    g = g.view_as(g)  # a TP DTensor gradient: its local data
            if acc is not None and acc[i] is not None:
                g = acc[i] if g is None else acc[i].add_(g)
            any_grad |= g is not None
            grads.append(g)
        self.acc = None
        return grads, any_grad

    def accumulate_unsynced(self, grads: List[Optional[torch.Tensor]]) -> None:
        """Keep this backward's gradients, in the reduce dtype, for the next synchronised backward."""
        self.acc = [None if g is None else (g if g.dtype == self.reduce_dtype else g.to(self.reduce_dtype))
                    for g in grads]

    def _pack(self, grads: List[Optional[torch.Tensor]]) -> torch.Tensor:
        """The gradients rank-major and padded, ``(shard_size, total)`` in the reduce dtype.

        A direct bucket's evenly split, contiguous gradient already has that layout: no copy."""
        mi = self.mi
        rd = self.reduce_dtype
        if self.direct:
            g = grads[0]
            if (g is not None and g.dtype == rd and g.is_contiguous()
                    and g.numel() == mi.shard_size * self.layout.total):
                return g.view(mi.shard_size, self.layout.total)
        parts = []
        for info, g in zip(self.infos, grads):
            if g is None:
                g = torch.zeros(info.shape, dtype=rd, device=self.device)
            elif g.dtype != rd:
                g = g.to(rd)
            parts.append(g)
        packed = torch.empty((mi.shard_size, self.layout.total), dtype=rd, device=self.device)
        if self.layout.total:
            torch._chunk_cat(parts, 0, mi.shard_size, out=packed)  # pylint: disable=protected-access
        return packed

    def start_reduce_scatter(self, grads: List[Optional[torch.Tensor]]):
        """Pack the gradients and issue their reduction; returns ``(work, out, mode)`` for ``finish_reduce``."""
        mi = self.mi
        packed = self._pack(grads)
        if mi.reduce_by_all_reduce:
            work = _collective("all_reduce", mi.reduce_group, dist.all_reduce, packed, async_op=True)
            return work, packed, "all_reduce"
        if mi.shard_size == 1:
            return None, packed.view(-1), "reduce_scatter"
        out = torch.empty(self.layout.total, dtype=packed.dtype, device=self.device)
        work = _collective("reduce_scatter", mi.shard_group, _REDUCE_SCATTER, out, packed.view(-1),
                           async_op=True)
        return work, out, "reduce_scatter"

    def finish_reduce(self, work, out: torch.Tensor, mode: str, scale: float) -> None:
        """Wait for the reduction, reduce across replicas (HSDP), scale and assign the sharded grads."""
        mi = self.mi
        if mode == "all_reduce":
            _wait("all_reduce", mi.reduce_group, work)
            mine = out.view(mi.shard_size, self.layout.total)[mi.shard_index]
            out = torch.mul(mine, scale) if scale != 1.0 else mine.clone()  # frees the packed gradients
        else:
            _wait("reduce_scatter", mi.shard_group, work)
            if mi.rep_group is not None and mi.rep_size > 1:
                _collective("all_reduce", mi.rep_group, dist.all_reduce, out)
            if scale != 1.0:
                out.mul_(scale)
        if out.dtype != self.dtype or out.device != self.storage_device:
            flat = torch.empty(out.numel(), dtype=self.dtype, device=self.storage_device, pin_memory=self.pin)
            # asynchronous device-to-host copy only when nothing reads it before the final stream sync
            flat.copy_(out, non_blocking=self.pin and not self.has_sharded_grads())
            out = flat
        self._assign(out)

    def _assign(self, flat: torch.Tensor) -> None:
        """New gradients become ``DTensor`` views into ``flat`` (no copy); existing ones (accumulation
        across backward passes) get it added in place. No reference to ``flat`` is kept here, so
        ``zero_grad(set_to_none=True)`` really frees the gradients."""
        lay = self.layout
        idx = self.mi.shard_index
        for i, info in enumerate(self.infos):
            if not info.requires_grad:
                continue
            off = lay.offsets[i]
            local = flat[off:off + lay.local_numel(i, idx)].view(lay.local_shape(i, idx))
            old = info.sharded.grad
            if old is not None:
                old.add_(local)
            else:
                info.sharded.grad = as_dtensor(local, info.spec)

    def has_sharded_grads(self) -> bool:
        """True when some sharded parameter of the bucket holds a gradient."""
        return any(info.sharded.grad is not None for info in self.infos)


def direct_min_numel(device: torch.device) -> int:
    """Parameters with at least this many elements get a bucket of their own (zero-copy gather and
    reduce, one more collective). On CPU a copy of a large parameter costs far more than a gloo
    collective's latency; on accelerators copies are cheap, so one bucket per dtype (0 = off).
    Override with ``$HYPER_PARALLEL_FSDP_DIRECT_NUMEL``."""
    import os
    raw = os.environ.get("HYPER_PARALLEL_FSDP_DIRECT_NUMEL")
    if raw is not None and raw.strip():
        try:
            return int(raw)
        except ValueError as err:
            raise ValueError(f"HYPER_PARALLEL_FSDP_DIRECT_NUMEL={raw!r} is not an integer") from err
    return 1 << 18 if device.type == "cpu" else 0


def _bucket_indices(infos: Sequence[ParamInfo], min_numel: int) -> List[Tuple[int, ...]]:
    """Per dtype: the large parameters alone (when ``min_numel``), the rest together."""
    out: List[Tuple[int, ...]] = []
    for _, idx in dtype_groups([i.dtype for i in infos]):
        small = []
        for i in idx:
            numel = 1
            for s in infos[i].shape:
                numel *= s
            if min_numel and numel >= min_numel:
                out.append((i,))
            else:
                small.append(i)
        if small:
            out.append(tuple(small))
    return out


class FSDPUnit:  # pylint: disable=too-many-instance-attributes
    """The managed parameters of one ``fully_shard`` call and their unshard/reshard/reduce life cycle."""

    def __init__(self, module: torch.nn.Module, infos: List[ParamInfo], mi: MeshInfo, mp: MixedPrecisionPolicy,
                 device: torch.device, offload: bool, pin: bool) -> None:
        self.module = module
        self.infos = infos
        for info in infos:
            info.unit = self
        self.mi = mi
        self.buckets = [Bucket([infos[i] for i in idx], mi, mp, device, offload, pin)
                        for idx in _bucket_indices(infos, direct_min_numel(device))]
        self.state = SHARDED
        self.pending_init = 0  # parameters built from meta tensors whose shard was not written yet
        self.pf_k = mi.pf_k
        self.requires_grad_sync = True
        self.is_last_backward = True
        self.reshard_after_backward = True
        self.scale = 1.0
        self.forward_prefetch: Optional[List["FSDPUnit"]] = None
        self.backward_prefetch: Optional[List["FSDPUnit"]] = None
        self.needs_post_backward = False
        self.in_backward = False
        self.swapped_in = False
        self._ag: Optional[list] = None
        self._ag_post_forward_keep = False
        self._grad_count = 0
        self._expected = sum(1 for i in infos if i.requires_grad)

    # ------------------------------------------------------------------ unshard / reshard
    def unshard(self, async_op: bool = False) -> None:
        """All-gather the unit (asynchronously when ``async_op``; ``wait_unshard`` completes it)."""
        if self.state == UNSHARDED:
            return
        if self._ag is None:
            from_pf = self.state == POST_FORWARD
            self._ag_post_forward_keep = (not from_pf and not self.in_backward and 1 < self.pf_k < self.mi.shard_size)
            with DisableTorchFunctionSubclass():
                self._ag = [b.start_all_gather(from_pf, async_op=True) for b in self.buckets]
        if not async_op:
            self.wait_unshard()

    def wait_unshard(self) -> None:
        """Wait for an issued all-gather and copy it into the unsharded parameters."""
        pending = self._ag
        if pending is None:
            return
        self._ag = None
        group = self.mi.pf_group if self.state == POST_FORWARD else self.mi.shard_group
        with torch.no_grad(), DisableTorchFunctionSubclass():
            for bucket, (work, out, _) in zip(self.buckets, pending):
                _wait("all_gather", group, work)
                bucket.copy_out(out, self._ag_post_forward_keep)
                if self.state == POST_FORWARD:
                    bucket.pf_shard = None
        self.state = UNSHARDED

    def reshard(self, to_post_forward: bool = False) -> None:
        """Free the unsharded buffers (keeping the ``1/k`` post-forward shard when ``to_post_forward``)."""
        if self._ag is not None:
            self.wait_unshard()
        if self.state != UNSHARDED:
            return
        if to_post_forward and any(b.pf_shard is None for b in self.buckets):
            to_post_forward = False  # unsharded without keeping the 1/k shard (e.g. by FSDPModule.unshard)
        for b in self.buckets:
            b.free_unsharded()
            if not to_post_forward:
                b.pf_shard = None
        self.state = POST_FORWARD if to_post_forward else SHARDED

    def post_forward_reshard(self, is_root: bool) -> None:
        """Reshard after forward as configured (the root keeps its parameters for backward)."""
        if is_root or self.pf_k == 1:
            return
        self.reshard(to_post_forward=self.pf_k < self.mi.shard_size)

    # ------------------------------------------------------------------ module registration
    def swap_in(self) -> None:
        """Register the unsharded parameters on the modules (forward runs on plain tensors)."""
        for info in self.infos:
            for mod, name in info.locations:
                mod._parameters[name] = info.unsharded  # pylint: disable=protected-access
        self.swapped_in = True

    def swap_out(self) -> None:
        """Register the sharded DTensor parameters again."""
        for info in self.infos:
            for mod, name in info.locations:
                mod._parameters[name] = info.sharded  # pylint: disable=protected-access
        self.swapped_in = False

    # ------------------------------------------------------------------ gradients
    def on_grad_ready(self) -> Optional[bool]:
        """Count one accumulated unsharded gradient; True when the unit's last one arrived."""
        self._grad_count += 1
        return self._grad_count >= self._expected and self.needs_post_backward

    def post_backward(self) -> list:
        """Reduce-scatter the unit's gradients (or keep them when not syncing) and reshard.

        Returns the pending reductions ``(bucket, work, out, mode)`` for the root to finish."""
        self.needs_post_backward = False
        self._grad_count = 0
        pending = []
        with torch.no_grad(), DisableTorchFunctionSubclass():
            for b in self.buckets:
                grads, any_grad = b.take_grads()
                if not any_grad:
                    continue
                if not self.requires_grad_sync:
                    b.accumulate_unsynced(grads)
                    continue
                work, out, mode = b.start_reduce_scatter(grads)
                pending.append((b, work, out, mode))
        if self.swapped_in:  # a recomputation (activation checkpointing) may stop before post-forward
            self.swap_out()
        if self.reshard_after_backward:
            self.reshard()
        return pending

    def grad_scale(self) -> float:
        """Factor applied to the summed gradient: the data-parallel average times the scaling factor."""
        return self.scale / self.mi.dp_size
