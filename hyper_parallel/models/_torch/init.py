# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Meta-device construction and placement-invariant parameter initialisation (torch).

``with init_empty_weights(): model = spec.build("671B")`` allocates nothing (parameters and buffers on
the ``meta`` device). Apply the parallel plan to the meta model, then ``init_parameters(model)``
materialises only each rank's local shards: every parameter draws from its own stream of
``hyper_parallel``'s counter-based RNG, keyed by ``(seed, parameter name)`` and indexed by the *global*
element position, so the full weights are bit-identical on one process and on any layout (TP shards,
expert-parallel shards, pipeline stages that hold a subset of the layers).
"""
from __future__ import annotations

import contextlib
from typing import Dict, Iterator

import torch
from torch import nn
from torch._C import DisableTorchFunctionSubclass

from hyper_parallel.core import random as _rng
from hyper_parallel.fsdp._torch.fully_shard import write_local_shard
from hyper_parallel.platform.torch.dtensor import DTensor, as_dtensor
from hyper_parallel.models.param_seed import parameter_seed
from hyper_parallel.platform.torch.random import reference_values, shard_values

__all__ = ["init_on_device", "init_empty_weights", "init_parameters", "parameter_seed"]


@contextlib.contextmanager
def init_on_device(device) -> Iterator[None]:
    """Create every tensor of the modules built inside on ``device`` (``"meta"``, ``"cpu"``, ...)."""
    with torch.device(device):
        yield


def init_empty_weights() -> "contextlib.AbstractContextManager[None]":
    """``init_on_device("meta")``: build any flavor without allocating its weights."""
    return init_on_device("meta")


def _is_norm(module: nn.Module) -> bool:
    return type(module).__name__.endswith("RMSNorm") or isinstance(module, (nn.LayerNorm, nn.RMSNorm))


def _values(param: torch.Tensor, kind: str, stream: int, std: float, device) -> torch.Tensor:
    if isinstance(param, DTensor):
        spec = param._spec  # pylint: disable=protected-access
        coord = spec.mesh.get_coordinate()
        if kind in ("ones", "zeros", "empty"):
            local_shape, _ = spec.local_shape_and_offset(coord)
            return as_dtensor(getattr(torch, kind)(local_shape, dtype=param.dtype, device=device), spec)
        state = _rng.get_rng_state()
        _rng.set_rng_state((stream, 0))
        try:
            local = shard_values("normal", spec, coord, param.dtype, device, (0.0, std))
        finally:
            _rng.set_rng_state(state)
        return as_dtensor(local, spec)
    if kind in ("ones", "zeros", "empty"):
        return getattr(torch, kind)(param.shape, dtype=param.dtype, device=device)
    return reference_values("normal", tuple(param.shape), (stream, 0), param.dtype, (0.0, std)).to(device)


def _init_buffers(model: nn.Module, device) -> None:
    from hyper_parallel.moe._torch.moe import MoE
    for mod_name, module in model.named_modules():
        if hasattr(module, "init_buffers"):
            module.init_buffers(device)
        elif isinstance(module, MoE):
            for name in ("expert_bias", "tokens_per_expert"):
                buf = getattr(module, name)
                module.register_buffer(name, torch.zeros(buf.shape, dtype=buf.dtype, device=device),
                                       persistent=name == "expert_bias")
        for name, buf in module.named_buffers(recurse=False):
            if buf is not None and buf.is_meta:
                raise RuntimeError(f"init_parameters: buffer {mod_name}.{name} is still on the meta device and its "
                                   f"module {type(module).__name__} has no init_buffers(device)")


def init_parameters(model: nn.Module, *, seed: int = 0, std: float = 0.02, device=None,
                    empty: bool = False) -> nn.Module:
    """Give every parameter of ``model`` its initial value: ones for norm weights, Normal(0, ``std``)
    otherwise (a module's ``param_init_kinds = {name: "zeros" | "ones" | "normal"}`` overrides, e.g. a
    zero-centred norm's zeros), each parameter from its own counter-based stream (:func:`parameter_seed`), so a global
    element's value does not depend on the layout. Meta parameters are materialised on ``device``
    (default: the CPU, or the mesh's device for DTensors), only their local shards; tied parameters
    stay tied; meta buffers are rebuilt (``init_buffers(device)`` of their module). Parameters of a
    ``fully_shard`` unit (sharded on the meta device) are written in place into the unit's shard buffer
    (:func:`hyper_parallel.fsdp._torch.fully_shard.write_local_shard`), so the plan can be applied in
    any order: TP, EP, FSDP, then ``init_parameters``. ``empty=True`` allocates the same local shards without
    drawing any value (uninitialised memory), for a load that overwrites every parameter next (``init_from``):
    the draw costs more than the load at real sizes. Returns ``model``."""
    device = torch.device(device) if device is not None else None
    done: Dict[int, nn.Parameter] = {}
    for mod_name, module in model.named_modules():
        for name, param in list(module.named_parameters(recurse=False)):
            if id(param) in done:
                setattr(module, name, done[id(param)])
                continue
            fqn = f"{mod_name}.{name}" if mod_name else name
            kind = "empty" if empty else (getattr(module, "param_init_kinds", {}).get(name)
                                          or ("ones" if _is_norm(module) else "normal"))
            if "_hp_fsdp_info" in param.__dict__:  # fully_shard-ed: fill its shard of the flat buffer in place
                with DisableTorchFunctionSubclass():
                    local_device = param.view_as(param).device
                write_local_shard(param, _values(param, kind, parameter_seed(seed, fqn), std, local_device))
                done[id(param)] = param
                continue
            target = device or (torch.device(param._spec.mesh.device_type)  # pylint: disable=protected-access
                                if isinstance(param, DTensor) else torch.device("cpu"))
            value = _values(param, kind, parameter_seed(seed, fqn), std, target)
            new = nn.Parameter(value, requires_grad=param.requires_grad)
            done[id(param)] = new
            setattr(module, name, new)
    _init_buffers(model, device or torch.device("cpu"))
    return model
