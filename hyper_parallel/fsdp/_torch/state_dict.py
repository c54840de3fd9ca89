# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Model and optimizer state dicts of fully sharded modules: sharded (DTensor) and full (gathered).

* sharded: ``module.state_dict()`` already holds ``DTensor`` parameters; optimizer states (plain
  local tensors after a sharded step) are returned as ``DTensor`` s with their parameter's spec and
  keyed by parameter name.
* full: every ``DTensor`` is gathered (a collective: call on every rank); with ``cpu_offload`` only
  rank 0 keeps the result (on the CPU), the others get an empty dict.

Loading accepts either kind for every key: a ``DTensor`` with the parameter's spec is copied
locally, any other ``DTensor`` is gathered first, and a full plain tensor is sliced to this rank's
shard (``torch.chunk`` offsets, TP x FSDP nesting included).
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional

import torch
import torch.distributed as dist
from torch import nn
from torch._C import DisableTorchFunctionSubclass

from hyper_parallel.fsdp._torch.unit import ParamInfo
from hyper_parallel.platform.torch.dtensor import DTensor

__all__ = ["get_model_state_dict", "set_model_state_dict", "get_optimizer_state_dict", "set_optimizer_state_dict"]


def _infos(model: nn.Module) -> Dict[str, ParamInfo]:
    out = {}
    for name, p in model.named_parameters():
        info = p.__dict__.get("_hp_fsdp_info")
        if info is not None:
            out[name] = info
    return out


def _check_sharded(model: nn.Module, what: str) -> None:
    for m in model.modules():
        st = m.__dict__.get("_hp_fsdp_state")
        if st is not None and st.unit is not None and st.unit.swapped_in:
            raise RuntimeError(f"{what}: {type(m).__name__} holds unsharded parameters (inside forward or after "
                               "FSDPModule.unshard()); call it outside forward or reshard() first")


def _full(value: Any) -> Any:
    return value.full_tensor() if isinstance(value, DTensor) else value


def get_model_state_dict(model: nn.Module, *, full_state_dict: bool = False,
                         cpu_offload: bool = False) -> Dict[str, Any]:
    """The model state dict: ``DTensor`` shards, or (``full_state_dict``) whole tensors.

    With ``full_state_dict`` every rank must call it; ``cpu_offload`` keeps the gathered tensors
    on rank 0 only, on the CPU.
    """
    _check_sharded(model, "get_model_state_dict")
    sd = model.state_dict()
    if not full_state_dict:
        return sd
    keep = not cpu_offload or dist.get_rank() == 0
    out = {}
    for k, v in sd.items():
        v = _full(v)
        if keep:
            out[k] = v.cpu() if cpu_offload and isinstance(v, torch.Tensor) else v
    return out


def _local_value(value: Any, info: ParamInfo, key: str) -> torch.Tensor:
    """This rank's shard of ``value`` (a DTensor of any spec, or the full tensor) for ``info``."""
    spec = info.spec
    if isinstance(value, DTensor) and value._spec is spec:  # pylint: disable=protected-access
        with DisableTorchFunctionSubclass():
            return value.view_as(value)
    value = _full(value)
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"state dict entry {key!r}: expected a tensor, got {type(value).__name__}")
    if tuple(value.shape) != tuple(spec.shape):
        raise ValueError(f"state dict entry {key!r}: shape {tuple(value.shape)} does not match the parameter's "
                         f"global shape {tuple(spec.shape)}")
    shape, offset = spec.local_shape_and_offset(spec.mesh.get_coordinate())
    for d, (start, length) in enumerate(zip(offset, shape)):
        value = value.narrow(d, start, length)
    return value


def _reshard_units(infos: Dict[str, ParamInfo]) -> None:
    for info in infos.values():
        if not info.unit.swapped_in:
            info.unit.reshard()


def set_model_state_dict(model: nn.Module, state_dict: Dict[str, Any], *, strict: bool = True) -> None:
    """Load a sharded or full model state dict (see the module docstring) into a sharded model."""
    _check_sharded(model, "set_model_state_dict")
    infos = _infos(model)
    rest = {}
    for k, v in state_dict.items():
        info = infos.get(k)
        if info is None:
            rest[k] = v
            continue
        local = _local_value(v, info, k)
        with torch.no_grad(), DisableTorchFunctionSubclass():
            info.local.copy_(local)
        info.mark_written()
    result = model.load_state_dict(rest, strict=False)
    missing = [k for k in result.missing_keys if k not in state_dict]
    if strict and (missing or result.unexpected_keys):
        raise RuntimeError(f"set_model_state_dict: missing keys {missing}, unexpected keys {result.unexpected_keys}")
    _reshard_units(infos)


def _param_order(optimizer: torch.optim.Optimizer) -> List[torch.Tensor]:
    return [p for group in optimizer.param_groups for p in group["params"]]


def _is_param_state(v: Any, info: Optional[ParamInfo]) -> bool:
    return (info is not None and isinstance(v, torch.Tensor) and not isinstance(v, DTensor) and v.dim() > 0
            and tuple(v.shape) == tuple(info.local.shape))


def _state_out(st: Dict[str, Any], info: Optional[ParamInfo], full: bool, cpu: bool) -> Dict[str, Any]:
    new = {}
    for k, v in st.items():
        if _is_param_state(v, info):
            v = DTensor.from_local(v, info.spec.mesh, info.spec.placements, shape=info.spec.shape)
            if full:
                v = v.full_tensor()
                v = v.cpu() if cpu else v
        new[k] = v
    return new


def get_optimizer_state_dict(model: nn.Module, optimizer: torch.optim.Optimizer, *, full_state_dict: bool = False,
                             cpu_offload: bool = False) -> Dict[str, Any]:
    """The optimizer state keyed by parameter name; per-parameter states of sharded parameters are
    ``DTensor`` s (or, with ``full_state_dict``, gathered whole tensors — rank 0 only with ``cpu_offload``)."""
    names = {id(p): n for n, p in model.named_parameters()}
    params = _param_order(optimizer)
    unknown = [i for i, p in enumerate(params) if id(p) not in names]
    if unknown:
        raise ValueError(f"get_optimizer_state_dict: optimizer parameters {unknown} do not belong to the model")
    osd = optimizer.state_dict()
    state = {}
    for idx, st in osd["state"].items():
        p = params[idx]
        state[names[id(p)]] = _state_out(st, p.__dict__.get("_hp_fsdp_info"), full_state_dict, cpu_offload)
    groups = [{**{k: v for k, v in g.items() if k != "params"}, "params": [names[id(params[i])] for i in g["params"]]}
              for g in osd["param_groups"]]
    if full_state_dict and cpu_offload and dist.get_rank() != 0:
        return {}
    return {"state": state, "param_groups": groups}


def _state_in(st: Dict[str, Any], info: Optional[ParamInfo], fqn: str) -> Dict[str, Any]:
    new = {}
    for k, v in st.items():
        if info is not None and isinstance(v, torch.Tensor) and v.dim() > 0:
            v = _local_value(v, info, f"{fqn}.{k}").clone()
        elif isinstance(v, torch.Tensor):
            v = v.clone()  # e.g. AdamW's ``step``: never share a live counter with the source optimizer
        new[k] = v
    return new


def set_optimizer_state_dict(model: nn.Module, optimizer: torch.optim.Optimizer, state_dict: Dict[str, Any]) -> None:
    """Load a state dict from :func:`get_optimizer_state_dict` (sharded or full) into ``optimizer``."""
    by_name = dict(model.named_parameters())
    index = {id(p): i for i, p in enumerate(_param_order(optimizer))}
    state = {}
    for fqn, st in state_dict["state"].items():
        p = by_name.get(fqn)
        if p is None or id(p) not in index:
            raise KeyError(f"set_optimizer_state_dict: state for {fqn!r} matches no parameter of the optimizer")
        state[index[id(p)]] = _state_in(st, p.__dict__.get("_hp_fsdp_info"), fqn)
    groups = []
    for g in state_dict["param_groups"]:
        missing = [n for n in g["params"] if n not in by_name or id(by_name[n]) not in index]
        if missing:
            raise KeyError(f"set_optimizer_state_dict: param_groups name unknown parameters {missing}")
        groups.append({**g, "params": [index[id(by_name[n])] for n in g["params"]]})
    optimizer.load_state_dict({"state": state, "param_groups": groups})
