# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``fully_shard`` and ``FSDPModule``: hooks, root lazy init, prefetch and the backward driver.

Life cycle of one training step (per unit; the root unit is the outermost ``fully_shard`` module):

* pre-forward: the root resets the step; the unit waits for (or issues) its all-gather, registers
  its unsharded parameters on the modules and issues the explicit forward prefetches;
* post-forward: the sharded ``DTensor`` parameters are registered again, the unit reshards as
  configured (the root keeps its parameters: backward needs them first) and a multi-grad hook on
  the outputs marks the unit's pre-backward;
* pre-backward: the first one queues the root's final callback; the unit is marked as owing a
  post-backward (every backward of several forwards in flight reduces its own gradients), unshards and
  prefetches the next unit in backward order (the previous one in forward order, or the explicit list);
* post-backward (the unit's last unsharded gradient accumulated): one reduce-scatter per bucket is
  issued asynchronously and the unit reshards; older reductions are finished meanwhile;
* final callback: leftover units are reduced, every reduction is finished (HSDP all-reduce, scale,
  cast, ``DTensor`` gradients assigned) and every unit is resharded.
"""
from __future__ import annotations

import functools
from typing import Any, Dict, Iterable, List, Optional

import torch
import torch.distributed as dist
from torch import nn
from torch._C import DisableTorchFunctionSubclass
from torch.utils._pytree import tree_flatten, tree_map

from hyper_parallel.core.spec import DTensorSpec
from hyper_parallel.fsdp.api import MixedPrecisionPolicy, OffloadPolicy, CPUOffloadPolicy, post_forward_group_size
from hyper_parallel.fsdp.units import (STATE_ATTR, check_fully_shard_args, check_shardable, collect_unit_params,
                                       fsdp_class, prefetch_units, require_unit, sharded_param_spec)
from hyper_parallel.fsdp._torch.unit import SHARDED, UNSHARDED, FSDPUnit, MeshInfo, ParamInfo
from hyper_parallel.platform.torch.recompute import parameter_communication
from hyper_parallel.platform.torch.dtensor import DTensor, as_dtensor

__all__ = ["fully_shard", "FSDPModule", "UnshardHandle", "write_local_shard"]

_STATE_ATTR = STATE_ATTR
_DEFAULT_MESH: Dict[str, Any] = {}


# ---------------------------------------------------------------------- state
class FSDPState:  # pylint: disable=too-many-instance-attributes
    """Per-module FSDP state; the root's instance also drives the step."""

    def __init__(self, module: nn.Module, unit: Optional[FSDPUnit], mp: MixedPrecisionPolicy) -> None:
        self.module = module
        self.unit = unit
        self.mp = mp
        self.root: Optional["FSDPState"] = None
        self.is_root = False
        self.states: List["FSDPState"] = []
        self.units: List[FSDPUnit] = []
        self.order: List[FSDPUnit] = []
        self.prev_order: List[FSDPUnit] = []
        self.post_order: List[FSDPUnit] = []
        self.deferred: Optional[FSDPUnit] = None
        self.pending: list = []
        self.in_backward = False
        self.sync_device: Optional[str] = None

    # ------------------------------------------------------------------ root
    def lazy_init(self) -> None:
        """Make this module the root of every FSDP module below it (first forward only)."""
        if self.root is not None:
            return
        states = [m.__dict__[_STATE_ATTR] for m in self.module.modules() if _STATE_ATTR in m.__dict__]
        for s in states:
            s.root = self
            s.is_root = s is self
        self.states = states
        self.units = [s.unit for s in states if s.unit is not None]
        offloaded = {b.device.type for u in self.units for b in u.buckets if b.offload and b.device.type != "cpu"}
        self.sync_device = next(iter(offloaded), None)  # accelerator whose host copies the final callback awaits
        if self.unit is not None:
            self.unit.pf_k = 1  # the root keeps its parameters after forward: backward starts with them

    def root_pre_forward(self) -> None:
        """Start a step: finish a backward that never completed, restore parameter classes, reset order."""
        if self.in_backward:
            self.final_callback()
        for unit in self.units:
            for info in unit.infos:
                _ensure_dtensor(info.sharded)
        if self.order:
            self.prev_order = self.order
        self.order = []
        self.post_order = []

    def defer_reshard(self, unit: Optional[FSDPUnit]) -> None:
        """Post-forward reshard of the previous unit happens when the next one starts, so the unit
        that runs last in forward stays gathered for the start of backward (no re-gather)."""
        old, self.deferred = self.deferred, unit
        if old is not None and old is not unit:
            old.post_forward_reshard(old is self.unit)

    def begin_backward(self) -> None:
        """First pre-backward of a step: queue the final callback."""
        self.in_backward = True
        for unit in self.units:
            unit.in_backward = True
        engine = torch.autograd.Variable._execution_engine  # pylint: disable=protected-access
        engine.queue_callback(self.final_callback)

    def run_post_backward(self, unit: FSDPUnit) -> None:
        """Issue ``unit``'s reductions, then finish every older one (keeps at most one unit in flight)."""
        scale = unit.grad_scale()
        new = [(b, work, out, mode, scale) for b, work, out, mode in unit.post_backward()]
        older, self.pending = self.pending, new
        self._finish(older)

    def _finish(self, pending: Iterable) -> None:
        with torch.no_grad(), DisableTorchFunctionSubclass():
            for bucket, work, out, mode, scale in pending:
                bucket.finish_reduce(work, out, mode, scale)

    def final_callback(self) -> None:
        """End of backward: reduce leftover units, finish all reductions, reshard everything (units told
        ``set_is_last_backward(False)`` keep their gradients and unsharded parameters for a later backward)."""
        for unit in reversed(self.post_order):
            if unit.needs_post_backward and unit.is_last_backward:
                self.run_post_backward(unit)
        for unit in self.units:
            if unit.needs_post_backward and unit.is_last_backward:
                self.run_post_backward(unit)
        pending, self.pending = self.pending, []
        self._finish(pending)
        self.deferred = None
        for unit in self.units:
            unit.in_backward = False
            unit.needs_post_backward = False
            unit._grad_count = 0  # pylint: disable=protected-access
            if not unit.is_last_backward:
                continue
            if unit.swapped_in:  # e.g. a checkpointed recomputation that stopped before post-forward
                unit.swap_out()
            if unit.reshard_after_backward:
                unit.reshard()
        if self.sync_device is not None:
            getattr(torch, self.sync_device).current_stream().synchronize()
        self.in_backward = False


def _ensure_dtensor(p: torch.Tensor) -> None:
    """Undo the optimizer's temporary plain-tensor view of a sharded parameter (see ``optim``)."""
    if type(p) is not DTensor:  # pylint: disable=unidiomatic-typecheck
        p.__class__ = DTensor
        g = p.grad
        if g is not None and type(g) is torch.Tensor and "_spec" in g.__dict__:  # pylint: disable=unidiomatic-typecheck
            g.__class__ = DTensor


# ---------------------------------------------------------------------- hooks
def _cast(tree: Any, dtype) -> Any:
    def one(x):
        if isinstance(x, torch.Tensor) and x.is_floating_point() and x.dtype != dtype:
            return x.to(dtype)
        return x
    return tree_map(one, tree)


def _pre_forward(module: nn.Module, args, kwargs):
    state: FSDPState = module.__dict__[_STATE_ATTR]
    state.lazy_init()
    root = state.root
    if state.is_root:
        root.root_pre_forward()
    unit = state.unit
    if unit is not None:
        _check_initialised(module, unit)
        # during backward this forward is a recomputation (activation checkpointing): units resharded
        # now could be ones backward is using, and the forward order's prefetch does not apply
        recompute = root.in_backward
        with parameter_communication():  # not an activation: never cached by selective checkpointing
            if root.deferred is not None and root.deferred is not unit and not recompute:
                root.defer_reshard(None)
            unit.unshard(async_op=True)
            for target in () if recompute else _forward_targets(root, unit):
                target.unshard(async_op=True)
            unit.wait_unshard()
        unit.swap_in()
        if torch.is_grad_enabled() and unit._expected:  # pylint: disable=protected-access
            unit.needs_post_backward = True
        if unit not in root.order:
            root.order.append(unit)
    mp = state.mp
    if mp.cast_forward_inputs and mp.param_dtype is not None:
        args, kwargs = _cast((args, kwargs), mp.param_dtype)
    return args, kwargs


def _check_initialised(module: nn.Module, unit: FSDPUnit) -> None:
    """Refuse a forward while parameters sharded from meta tensors have no values."""
    if not unit.pending_init:
        return
    names = [i.fqn for i in unit.infos if i.pending_init]
    raise RuntimeError(f"fully_shard: {type(module).__name__} was sharded from meta-device parameters and "
                       f"{len(names)} of them have no values yet ({', '.join(names[:3])}...); call "
                       "hyper_parallel.models.init_parameters(model) (or write_local_shard) before the forward")


def _forward_targets(root: FSDPState, unit: FSDPUnit) -> List[FSDPUnit]:
    """Explicit forward prefetch list, else the unit that followed this one in the previous step."""
    if unit.forward_prefetch is not None:
        return unit.forward_prefetch
    prev = root.prev_order
    if unit in prev:
        idx = prev.index(unit) + 1
        if idx < len(prev) and prev[idx].state != UNSHARDED:
            return [prev[idx]]
    return []


def _post_forward(module: nn.Module, _args, output):
    state: FSDPState = module.__dict__[_STATE_ATTR]
    unit = state.unit
    hooked = False
    if torch.is_grad_enabled():
        tensors = [t for t in tree_flatten(output)[0] if isinstance(t, torch.Tensor) and t.requires_grad]
        if tensors:
            torch.autograd.graph.register_multi_grad_hook(tensors, functools.partial(_pre_backward, state),
                                                          mode="any")
            hooked = True
    if unit is not None:
        unit.swap_out()
        # without a pre-backward hook the parameters must stay gathered for a backward that may come
        root = state.root
        if unit not in root.post_order:
            root.post_order.append(unit)
        if root.in_backward:
            # a recomputation during backward (activation checkpointing of an enclosing module): the
            # recomputed graph reads these parameters until this unit's own backward reshards them
            pass
        elif hooked and not state.is_root:
            root.defer_reshard(unit)
        elif not hooked and not unit.needs_post_backward:
            unit.post_forward_reshard(state.is_root)
    if state.mp.output_dtype is not None:
        output = _cast(output, state.mp.output_dtype)
    return output


def _pre_backward(state: FSDPState, _grad) -> None:
    root = state.root
    if not root.in_backward:
        root.begin_backward()
    unit = state.unit
    if unit is None:
        return
    if unit._expected:  # pylint: disable=protected-access
        # this backward brings the unit gradients: with several forwards in flight (pipeline micro-batches:
        # F1 F2 B1 B2) B1's post-backward consumed the flag F2's pre-forward set, and B2's gradients would
        # otherwise stay on the unsharded parameters, unreduced (issue 33)
        unit.needs_post_backward = True
    unit.unshard()
    # like FSDP2: register the unsharded parameters, so that a recomputation in backward (activation
    # checkpointing of the module's forward) reads them; post_backward registers the shards again
    unit.swap_in()
    targets = unit.backward_prefetch
    if targets is None:  # backward runs in reverse post-forward order
        order = root.post_order
        idx = order.index(unit) if unit in order else 0
        targets = [order[idx - 1]] if idx > 0 else []
    for target in targets:
        if target.needs_post_backward and target.state != UNSHARDED:
            target.unshard(async_op=True)


def _grad_hook(state: FSDPState, _param) -> None:
    unit = state.unit
    if unit.on_grad_ready():
        state.root.run_post_backward(unit)


# ---------------------------------------------------------------------- FSDPModule
class UnshardHandle:
    """Returned by ``FSDPModule.unshard(async_op=True)``; ``wait()`` completes the unshard."""

    def __init__(self, unit: Optional[FSDPUnit]) -> None:
        self._unit = unit

    def wait(self) -> None:
        """Wait for the all-gather and register the unsharded parameters."""
        if self._unit is not None:
            self._unit.wait_unshard()
            self._unit.swap_in()
            self._unit = None


class FSDPModule:
    """Mixin added to every module passed to ``fully_shard`` (``FSDP<Class>``)."""

    def _fsdp_state(self) -> FSDPState:
        return self.__dict__[_STATE_ATTR]

    def _fsdp_units(self, recurse: bool) -> List[FSDPUnit]:
        mods = self.modules() if recurse else [self]  # type: ignore[attr-defined]  # pylint: disable=no-member
        out = []
        for m in mods:
            st = m.__dict__.get(_STATE_ATTR)
            if st is not None and st.unit is not None:
                out.append(st.unit)
        return out

    def unshard(self, async_op: bool = False) -> Optional[UnshardHandle]:
        """All-gather this module's parameters and register them unsharded (until ``reshard()``)."""
        unit = self._fsdp_state().unit
        if unit is None:
            return UnshardHandle(None) if async_op else None
        unit.unshard(async_op=async_op)
        handle = UnshardHandle(unit)
        if async_op:
            return handle
        handle.wait()
        return None

    def reshard(self) -> None:
        """Register the sharded parameters again and free the unsharded ones."""
        unit = self._fsdp_state().unit
        if unit is not None:
            unit.swap_out()
            unit.reshard()

    def set_requires_gradient_sync(self, requires_gradient_sync: bool, *, recurse: bool = True) -> None:
        """When False, backward accumulates unsharded gradients locally (no reduce-scatter) until a
        backward with True reduces the sum (gradient accumulation without communication)."""
        for unit in self._fsdp_units(recurse):
            unit.requires_grad_sync = bool(requires_gradient_sync)

    def set_is_last_backward(self, is_last_backward: bool, *, recurse: bool = True) -> None:
        """Whether the next backward is the last one of the step (default True). When False, the end of
        that backward neither reduces nor reshards: gradients stay on the unsharded parameters and the
        parameters stay gathered for the next backward (pipeline microbatches); a later backward with
        True, or :meth:`reduce_gradients`, reduces the sum."""
        for unit in self._fsdp_units(recurse):
            unit.is_last_backward = bool(is_last_backward)

    def reduce_gradients(self) -> None:
        """Reduce every gradient accumulated so far now (one reduce-scatter per unit), as the end of a last,
        synchronised backward would, then reshard as ``set_reshard_after_backward`` says. The pipeline
        runtime calls it at a stage's REDUCE_GRAD, after the step's last backward of that stage."""
        state = self._fsdp_state()
        state.lazy_init()
        units = self._fsdp_units(True)
        for unit in units:
            unit.requires_grad_sync = True
            unit.is_last_backward = True
            unit.needs_post_backward = any(i.unsharded is not None and i.unsharded.grad is not None
                                           for i in unit.infos) or any(b.acc is not None for b in unit.buckets)
        state.root.final_callback()

    def set_reshard_after_backward(self, reshard_after_backward: bool, *, recurse: bool = True) -> None:
        """Whether parameters are freed after their gradients are reduced (default True)."""
        for unit in self._fsdp_units(recurse):
            unit.reshard_after_backward = bool(reshard_after_backward)

    def set_gradient_scaling_factor(self, factor: float, *, recurse: bool = True) -> None:
        """Multiply the reduced gradients by ``factor`` on top of the data-parallel average
        (the reduced gradient is ``factor * sum_ranks(grad) / dp_size``; default 1.0)."""
        if not isinstance(factor, (int, float)) or isinstance(factor, bool):
            raise TypeError(f"set_gradient_scaling_factor(factor): expected a number, got {factor!r}")
        for unit in self._fsdp_units(recurse):
            unit.scale = float(factor)

    def set_modules_to_forward_prefetch(self, modules: List["FSDPModule"]) -> None:
        """All-gather ``modules`` asynchronously right after this module's pre-forward unshard."""
        require_unit(self, "set_modules_to_forward_prefetch").forward_prefetch = prefetch_units(
            modules, "set_modules_to_forward_prefetch", nn.Module, "module")

    def set_modules_to_backward_prefetch(self, modules: List["FSDPModule"]) -> None:
        """All-gather ``modules`` asynchronously in this module's pre-backward (replaces the implicit
        prefetch of the previous module in forward order)."""
        require_unit(self, "set_modules_to_backward_prefetch").backward_prefetch = prefetch_units(
            modules, "set_modules_to_backward_prefetch", nn.Module, "module")


# ---------------------------------------------------------------------- fully_shard
def _default_mesh(device_type: str):
    from hyper_parallel.core import device_mesh as dm
    mesh = _DEFAULT_MESH.get(device_type)
    if mesh is None or not any(m is mesh for m in dm._MESHES):  # pylint: disable=protected-access
        # none yet, or its groups died with destroy_process_group()
        from hyper_parallel.core.device_mesh import init_device_mesh
        mesh = init_device_mesh(device_type, (dist.get_world_size(),))
        _DEFAULT_MESH[device_type] = mesh
    return mesh


def _collect_params(module: nn.Module, ignored_params):
    found = collect_unit_params(module, params=lambda m: m._parameters.items(),  # pylint: disable=protected-access
                                children=lambda m: m._modules.items(),  # pylint: disable=protected-access
                                skip=lambda p: "_hp_fsdp_info" in p.__dict__, ignored=ignored_params or ())
    for p, _, fqn in found:
        check_shardable(fqn, p.dim())
    infos = [ParamInfo(locs, fqn, p) for p, locs, fqn in found]
    return infos, {fqn: p for p, _, fqn in found}


def _spec_for(info: ParamInfo, mi: MeshInfo) -> DTensorSpec:
    """The global spec of a sharded parameter (plain, HSDP or TP x FSDP)."""
    return sharded_param_spec(info.fqn, info.shape, info.tp_spec, mi.mesh, dist.get_rank())


def _build_params(unit: FSDPUnit, originals: Dict[str, torch.Tensor]) -> None:
    hook_state = unit.module.__dict__[_STATE_ATTR]
    for bucket in unit.buckets:
        fulls = []
        for info in bucket.infos:
            p = originals[info.fqn]
            with DisableTorchFunctionSubclass():
                fulls.append(p.view_as(p))
        bucket.shard_from(fulls)
        unit.pending_init += sum(info.pending_init for info in bucket.infos)
        for info in bucket.infos:
            info.spec = _spec_for(info, unit.mi)
            with DisableTorchFunctionSubclass():
                local = info.local.view_as(info.local)
                full = info.full_view.view_as(info.full_view)
            info.sharded = nn.Parameter(as_dtensor(local, info.spec), requires_grad=info.requires_grad)
            info.sharded._hp_fsdp_info = info  # pylint: disable=protected-access
            if info.tp_spec is not None:
                full = as_dtensor(full, info.tp_spec)
            info.unsharded = nn.Parameter(full, requires_grad=info.requires_grad)
            if info.requires_grad:
                info.unsharded.register_post_accumulate_grad_hook(functools.partial(_grad_hook, hook_state))
        bucket.free_unsharded()


def write_local_shard(param: torch.Tensor, local: torch.Tensor) -> bool:
    """Give a ``fully_shard`` -ed parameter this rank's shard values in place (``local``: the local
    shard of ``param``'s global spec, e.g. drawn by ``shard_values``); the way a model sharded on the
    meta device gets its weights. Returns False (and does nothing) when ``param`` is not a sharded
    parameter of a ``fully_shard`` unit. Call it before the unit's first forward."""
    info = param.__dict__.get("_hp_fsdp_info")
    if info is None:
        return False
    if info.unit.state != SHARDED:
        raise RuntimeError(f"write_local_shard({info.fqn}): its fully_shard unit is unsharded (state "
                           f"{info.unit.state!r}); write shard values before the forward or after reshard()")
    with DisableTorchFunctionSubclass():
        shape = tuple(info.local.shape)
        value = local.view_as(local) if isinstance(local, DTensor) else local
    if tuple(value.shape) != shape:
        raise ValueError(f"write_local_shard({info.fqn}): expected a local shard of shape {list(shape)}, got "
                         f"{list(value.shape)}")
    with torch.no_grad(), DisableTorchFunctionSubclass():
        info.local.copy_(value)
    info.mark_written()
    return True


def _device_of(mesh) -> torch.device:
    if mesh.device_type == "cpu":
        return torch.device("cpu")
    mod = getattr(torch, mesh.device_type)
    return torch.device(mesh.device_type, mod.current_device())


def fully_shard(module: nn.Module, *, mesh=None, reshard_after_forward: Any = True,
                mp_policy: Optional[MixedPrecisionPolicy] = None, offload_policy: Optional[OffloadPolicy] = None,
                ignored_params: Optional[Iterable[nn.Parameter]] = None) -> nn.Module:
    """Shard ``module``'s parameters (those not already managed by a nested ``fully_shard``) over the
    data-parallel mesh dim and hook its forward/backward (FSDP2 semantics).

    Args:
        module: the module; its class becomes ``FSDP<Class>`` (an :class:`FSDPModule`).
        mesh: a 1-D ``DeviceMesh`` (FSDP) or a 2-D one (replicate, shard) for HSDP; default: the world.
        reshard_after_forward: True (free after forward, all-gather again in backward), False (keep)
            or an int ``k`` dividing the shard group size (keep ``1/k``; backward all-gathers within
            ``k`` ranks). The root module never reshards after forward.
        mp_policy: :class:`MixedPrecisionPolicy` (compute, reduce and output dtypes).
        offload_policy: :class:`CPUOffloadPolicy` keeps sharded parameters, gradients and the
            optimizer states on the CPU.
        ignored_params: parameters to leave alone (neither sharded nor reduced).

    Returns the same module object. Parameters become ``nn.Parameter(DTensor)`` sharded ``Shard(0)``
    (uneven and empty shards follow ``torch.chunk``); parameters that already are DTensors (TP)
    get sharded again on dim 0 of their local shard.
    """
    mp_policy = MixedPrecisionPolicy() if mp_policy is None else mp_policy
    offload_policy = OffloadPolicy() if offload_policy is None else offload_policy
    check_fully_shard_args(module, nn.Module, "an nn.Module", mp_policy, offload_policy)
    if mesh is None:
        from hyper_parallel.platform import get_platform
        mesh = _default_mesh(get_platform("torch").default_device_type())
    infos, originals = _collect_params(module, ignored_params)
    mi = MeshInfo(mesh, post_forward_group_size(reshard_after_forward, mesh.shape[-1]))
    offload = isinstance(offload_policy, CPUOffloadPolicy)
    pin = offload and offload_policy.pin_memory
    unit = FSDPUnit(module, infos, mi, mp_policy, _device_of(mesh), offload, pin) if infos else None
    state = FSDPState(module, unit, mp_policy)
    module.__dict__[_STATE_ATTR] = state
    if unit is not None:
        _build_params(unit, originals)
        unit.swap_out()
    module.__class__ = fsdp_class(type(module), FSDPModule)
    module.register_forward_pre_hook(_pre_forward, prepend=True, with_kwargs=True)
    module.register_forward_hook(_post_forward)
    from hyper_parallel.fsdp._torch import optim as _optim
    _optim.install_step_hooks()
    return module
