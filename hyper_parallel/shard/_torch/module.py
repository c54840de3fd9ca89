# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``shard_module`` on torch modules: parameters become ``nn.Parameter(DTensor)``; forward pre-/post-hooks
lay out the planned inputs and outputs (plan format: ``hyper_parallel/shard/plan.py``)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict

import torch

from hyper_parallel.core.placement import Replicate
from hyper_parallel.platform.torch.dtensor import DTensor, distribute_tensor
from hyper_parallel.shard.plan import check_plan, match, placements_of

if TYPE_CHECKING:
    from hyper_parallel.core.device_mesh import DeviceMesh

__all__ = ["shard_module"]


def _to_layout(x, mesh, placements):
    """DTensors are redistributed; a plain tensor is taken as the full value (identical on every
    rank) and laid out differentiably (from a replicated view, then local chunking)."""
    if placements is None or not isinstance(x, torch.Tensor):
        return x
    if not isinstance(x, DTensor):
        x = DTensor.from_local(x, mesh, (Replicate(),) * mesh.ndim)
    return x.redistribute(mesh, placements)


def _shard_parameters(module, mesh, plan: Dict[str, Any]) -> None:
    names = [n for n, _ in module.named_parameters()]
    for pattern, spec in plan.items():
        for name in match(names, pattern, "parameter"):
            owner_name, _, leaf = name.rpartition(".")
            owner = module.get_submodule(owner_name) if owner_name else module
            param = getattr(owner, leaf)
            if isinstance(param, DTensor):
                raise ValueError(f"shard_module: parameter {name} is already distributed ({param.placements})")
            placements = placements_of(spec, f"shard_module parameter {name}")
            try:
                dt = distribute_tensor(param.detach(), mesh, placements, src_data_rank=None)
            except ValueError as exc:
                raise ValueError(f"shard_module: parameter {name} of shape {list(param.shape)}: {exc}") from exc
            owner.register_parameter(leaf, torch.nn.Parameter(dt, requires_grad=param.requires_grad))


def shard_module(module: Any, device_mesh: "DeviceMesh", sharding_plan: Dict[str, Any]) -> Any:
    """Lay out the torch ``module``'s parameters and module boundaries as ``sharding_plan`` says (in place)."""
    check_plan(sharding_plan)
    _shard_parameters(module, device_mesh, sharding_plan.get("parameters", {}))
    modules = [n for n, _ in module.named_modules()]
    local_out = set()
    for pattern in sharding_plan.get("use_local_output", []):
        local_out.update(match(modules, pattern, "use_local_output"))
    for pattern, layouts in sharding_plan.get("inputs", {}).items():
        for name in match(modules, pattern, "inputs"):
            _install_inputs(module.get_submodule(name), device_mesh, layouts, name)
    for pattern, layouts in sharding_plan.get("outputs", {}).items():
        for name in match(modules, pattern, "outputs"):
            _install_outputs(module.get_submodule(name), device_mesh, layouts, name in local_out)
    for name in local_out - {n for p in sharding_plan.get("outputs", {}) for n in match(modules, p, "outputs")}:
        _install_outputs(module.get_submodule(name), device_mesh, (), True)
    return module


def _install_inputs(mod, mesh, layouts, name: str) -> None:
    layouts = [None if pl is None else placements_of(pl, f"shard_module inputs of {name!r}") for pl in layouts]

    def pre_hook(_m, args):
        return tuple(_to_layout(a, mesh, layouts[i]) if i < len(layouts) else a for i, a in enumerate(args))

    mod.register_forward_pre_hook(pre_hook)


def _install_outputs(mod, mesh, layouts, use_local: bool) -> None:
    layouts = [None if pl is None else placements_of(pl, "shard_module outputs") for pl in layouts]

    def post_hook(_m, _args, out):
        single = not isinstance(out, tuple)
        outs = list((out,) if single else out)
        for i, o in enumerate(outs):
            if i < len(layouts) and layouts[i] is not None and isinstance(o, DTensor):
                o = o.redistribute(mesh, layouts[i])
            if use_local and isinstance(o, DTensor):
                o = o.to_local()
            outs[i] = o
        return outs[0] if single else tuple(outs)

    mod.register_forward_hook(post_hook)
