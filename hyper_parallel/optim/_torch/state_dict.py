# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Sharded and full optimizer state dicts for any optimizer, ``Muon`` and ``ChainedOptimizer`` included.

Format (the same as ``hyper_parallel.fsdp.get_optimizer_state_dict``, extended to chains and to
parameters of any layout; ``hyper_parallel.checkpoint`` accepts a ``ChainedOptimizer`` directly too)::

    {"state": {param_name: {"momentum_buffer" | "exp_avg" | ...: tensor, "step": ...}},
     "param_groups": [{..settings.., "params": [param_name, ...]}, ...]}   # the chain's groups, in order

Per-parameter tensor states of a ``DTensor`` parameter (``DTensor`` s, or plain local tensors shaped
like its local shard under ``fully_shard``'s step hook — how ``Muon`` and torch's optimizers keep them)
come out as ``DTensor`` s with the parameter's spec (sharded) or gathered whole tensors
(``full_state_dict``; with ``cpu_offload`` only rank 0 keeps them, on the CPU). Loading takes either
form for every entry: a ``DTensor`` with the parameter's spec is copied locally, any other ``DTensor``
is gathered first, and a whole tensor is sliced to this rank's shard — so a full state dict loads
into any other parallel layout.
"""
from __future__ import annotations

from typing import Any, Dict, List, Sequence, Union

import torch
import torch.distributed as dist
from torch import nn
from torch._C import DisableTorchFunctionSubclass

from hyper_parallel.optim._torch.chained import ChainedOptimizer
from hyper_parallel.platform.torch.dtensor import DTensor

__all__ = ["get_optimizer_state_dict", "set_optimizer_state_dict"]


def _children(optimizer: torch.optim.Optimizer) -> List[torch.optim.Optimizer]:
    if isinstance(optimizer, ChainedOptimizer):
        out = []
        for opt in optimizer.optimizers:
            out.extend(_children(opt))
        return out
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer: expected a torch.optim.Optimizer or a ChainedOptimizer, got "
                        f"{type(optimizer).__name__}")
    return [optimizer]


def _named(model: Union[nn.Module, Sequence[nn.Module]]) -> Dict[str, nn.Parameter]:
    parts = list(model) if isinstance(model, (list, tuple)) else [model]
    out: Dict[str, nn.Parameter] = {}
    for part in parts:
        for name, p in part.named_parameters():
            if name in out and out[name] is not p:
                raise ValueError(f"optimizer state dict: two model parts both name a parameter {name!r}")
            out[name] = p
    return out


def _spec(p: torch.Tensor):
    return p.__dict__.get("_spec")


def _local_shape(p: torch.Tensor):
    spec = _spec(p)
    if spec is None:
        return tuple(p.shape)
    return spec.local_shape(spec.mesh.get_coordinate())


def _is_param_state(v: Any, p: torch.Tensor) -> bool:
    return (isinstance(v, torch.Tensor) and not isinstance(v, DTensor) and v.dim() > 0
            and tuple(v.shape) == _local_shape(p))


def _state_out(st: Dict[str, Any], p: torch.Tensor, full: bool, cpu: bool) -> Dict[str, Any]:
    spec = _spec(p)
    out = {}
    for k, v in st.items():
        if spec is not None and _is_param_state(v, p):
            v = DTensor.from_local(v, spec.mesh, spec.placements, shape=spec.shape)
        if full and isinstance(v, DTensor):
            v = v.full_tensor()
        if isinstance(v, torch.Tensor) and full and cpu:
            v = v.cpu()
        out[k] = v
    return out


def _child_state(child: torch.optim.Optimizer, names: Dict[int, str], full: bool, cpu: bool):
    """(state by name, param groups by name) of one optimizer."""
    params = [p for g in child.param_groups for p in g["params"]]
    missing = [i for i, p in enumerate(params) if id(p) not in names]
    if missing:
        raise ValueError(f"get_optimizer_state_dict: parameters {missing} of {type(child).__name__} do not belong "
                         "to the model")
    osd = child.state_dict()
    state = {names[id(params[idx])]: _state_out(st, params[idx], full, cpu) for idx, st in sorted(osd["state"].items())}
    groups = [{**{k: v for k, v in g.items() if k != "params"}, "params": [names[id(params[i])] for i in g["params"]]}
              for g in osd["param_groups"]]
    return state, groups


def get_optimizer_state_dict(model: Union[nn.Module, Sequence[nn.Module]], optimizer: torch.optim.Optimizer, *,
                             full_state_dict: bool = False, cpu_offload: bool = False) -> Dict[str, Any]:
    """The optimizer's state keyed by parameter name (see the module docstring). With
    ``full_state_dict`` it is a collective (gathers): call it on every rank."""
    names = {id(p): n for n, p in _named(model).items()}
    state: Dict[str, Any] = {}
    groups: List[Dict[str, Any]] = []
    for child in _children(optimizer):
        child_state, child_groups = _child_state(child, names, full_state_dict, cpu_offload)
        state.update(child_state)
        groups.extend(child_groups)
    if full_state_dict and cpu_offload and dist.is_initialized() and dist.get_rank() != 0:
        return {}
    return {"state": state, "param_groups": groups}


def _local_value(value: Any, p: torch.Tensor, key: str) -> torch.Tensor:
    """This rank's shard of ``value`` (a DTensor of any spec, or a whole tensor) for parameter ``p``."""
    spec = _spec(p)
    if isinstance(value, DTensor):
        if value.spec is spec:
            with DisableTorchFunctionSubclass():
                return value.view_as(value)
        value = value.full_tensor()
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"optimizer state {key!r}: expected a tensor, got {type(value).__name__}")
    if spec is None:
        if tuple(value.shape) != tuple(p.shape):
            raise ValueError(f"optimizer state {key!r}: shape {tuple(value.shape)} does not match the parameter's "
                             f"shape {tuple(p.shape)}")
        return value
    if tuple(value.shape) != tuple(spec.shape):
        raise ValueError(f"optimizer state {key!r}: shape {tuple(value.shape)} does not match the parameter's global "
                         f"shape {tuple(spec.shape)}")
    shape, offset = spec.local_shape_and_offset(spec.mesh.get_coordinate())
    for d, (start, length) in enumerate(zip(offset, shape)):
        value = value.narrow(d, start, length)
    return value


def _state_in(st: Dict[str, Any], p: torch.Tensor, fqn: str) -> Dict[str, Any]:
    spec = _spec(p)
    # torch's optimizers keep DTensor states for a DTensor parameter (TP), plain local shards for one that
    # fully_shard's step hook shows as its local shard: loaded states follow the same convention
    as_dtensor = spec is not None and p.__dict__.get("_hp_fsdp_info") is None
    out = {}
    for k, v in st.items():
        if isinstance(v, torch.Tensor) and v.dim() > 0:
            v = _local_value(v, p, f"{fqn}.{k}").clone()
            if as_dtensor:
                v = DTensor.from_local(v, spec.mesh, spec.placements, shape=spec.shape)
        elif isinstance(v, torch.Tensor):
            v = v.clone()  # e.g. AdamW's ``step``: never share a live counter with the source
        out[k] = v
    return out


def _load_child(child: torch.optim.Optimizer, saved_groups, first: int, by_name, state_dict, claimed: set) -> None:
    params = [p for g in child.param_groups for p in g["params"]]
    index = {id(p): i for i, p in enumerate(params)}
    groups = []
    for j, g in enumerate(saved_groups):
        unknown = [n for n in g["params"] if n not in by_name or id(by_name[n]) not in index]
        if unknown:
            raise KeyError(f"set_optimizer_state_dict: param_groups[{first + j}] names parameters {unknown} that "
                           f"{type(child).__name__} does not hold")
        groups.append({**g, "params": [index[id(by_name[n])] for n in g["params"]]})
    state = {}
    for fqn, st in state_dict["state"].items():
        p = by_name.get(fqn)
        if p is None:
            raise KeyError(f"set_optimizer_state_dict: state for {fqn!r} matches no parameter of the model")
        if id(p) in index:
            state[index[id(p)]] = _state_in(st, p, fqn)
            claimed.add(fqn)
    child.load_state_dict({"state": state, "param_groups": groups})


def set_optimizer_state_dict(model: Union[nn.Module, Sequence[nn.Module]], optimizer: torch.optim.Optimizer,
                             state_dict: Dict[str, Any]) -> None:
    """Load a state dict of :func:`get_optimizer_state_dict` (sharded or full, from any layout)."""
    if not isinstance(state_dict, dict) or "state" not in state_dict or "param_groups" not in state_dict:
        raise ValueError("set_optimizer_state_dict(state_dict): expected {'state': ..., 'param_groups': ...}")
    by_name = _named(model)
    children = _children(optimizer)
    saved_groups = list(state_dict["param_groups"])
    counts = [len(c.param_groups) for c in children]
    if len(saved_groups) != sum(counts):
        raise ValueError(f"set_optimizer_state_dict: the state dict holds {len(saved_groups)} param groups, the "
                         f"optimizer has {sum(counts)}")
    claimed: set = set()
    start = 0
    for child, count in zip(children, counts):
        _load_child(child, saved_groups[start:start + count], start, by_name, state_dict, claimed)
        start += count
    stray = sorted(set(state_dict["state"]) - claimed)
    if stray:
        raise KeyError(f"set_optimizer_state_dict: state for {stray} matches no parameter of the optimizer")
