# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Model and optimizer state dicts for checkpoints (torch), keyed by stable FQNs in every layout.

Follows ``torch.distributed.checkpoint.state_dict`` (``get_state_dict``, ``set_state_dict``,
``get_model_state_dict`` ...), built on ``hyper_parallel.fsdp``'s model state dict and
``hyper_parallel.optim``'s optimizer state dict (any optimizer, ``Muon`` and ``ChainedOptimizer``
included, parameters of any layout) and adding: several optimizers merged into one dict, wrapper
segments dropped from keys (:mod:`hyper_parallel.checkpoint.fqn`), optimizer states created before a
first step so that a checkpoint can be loaded into a fresh optimizer, full (gathered) optimizer states
of tensor-parallel parameters, and loading of any value kind (same-spec DTensor, other DTensor, full
tensor) into any parameter (FSDP shard, TP shard, plain tensor).
"""
from __future__ import annotations

import types
from typing import Any, Dict, List, Tuple

import torch
from torch import nn
from torch._C import DisableTorchFunctionSubclass

from hyper_parallel.checkpoint.fqn import (canonical_fqn, canonical_map, flatten_optimizer_state,
                                           unflatten_optimizer_state)
from hyper_parallel.fsdp._torch import state_dict as _fsdp_sd
from hyper_parallel.optim._torch import state_dict as _optim_sd
from hyper_parallel.platform.torch.dtensor import DTensor, as_dtensor, local_alias

__all__ = ["get_model_state_dict", "set_model_state_dict", "get_optimizer_state_dict", "set_optimizer_state_dict",
           "get_state_dict", "set_state_dict", "init_optimizer_state"]


def _opts(options) -> Any:
    from hyper_parallel.checkpoint.api import StateDictOptions
    if options is None:
        return StateDictOptions()
    if not isinstance(options, StateDictOptions):
        raise TypeError(f"options: expected a hyper_parallel.checkpoint.StateDictOptions, got {options!r}")
    return options


def _optimizers(optimizers) -> List[torch.optim.Optimizer]:
    if isinstance(optimizers, torch.optim.Optimizer):
        return [optimizers]
    opts = list(optimizers)
    for o in opts:
        if not isinstance(o, torch.optim.Optimizer) and not hasattr(o, "param_groups"):
            raise TypeError(f"optimizers: expected torch optimizers, got {type(o).__name__}")
    return opts


def _parts(model) -> List[nn.Module]:
    """A model or a list of model parts (the pipeline stages this rank holds)."""
    parts = list(model) if isinstance(model, (list, tuple)) else [model]
    for part in parts:
        if not isinstance(part, nn.Module):
            raise TypeError(f"model: expected an nn.Module or a list of them, got {type(part).__name__}")
    return parts


def get_model_state_dict(model, *, options=None) -> Dict[str, Any]:
    """The state dict of a model (or of a list of model parts) with canonical keys: DTensor shards as they
    are (sharded) or gathered full tensors (``full_state_dict``; with ``cpu_offload`` on rank 0 only)."""
    o = _opts(options)
    out: Dict[str, Any] = {}
    for part in _parts(model):
        sd = _fsdp_sd.get_model_state_dict(part, full_state_dict=o.full_state_dict, cpu_offload=o.cpu_offload)
        frozen = {n for n, p in part.named_parameters() if not p.requires_grad} if o.ignore_frozen_params else set()
        for k, v in sd.items():
            if k in frozen:
                continue
            key = canonical_fqn(k)
            if key in out:
                raise ValueError(f"get_model_state_dict: two model parts both hold {key!r}")
            out[key] = v
    return out


def _local_of(value: Any, target: torch.Tensor, key: str) -> torch.Tensor:
    """``value`` (DTensor of any spec, or full tensor) as the local data of ``target``."""
    if type(target) is DTensor:  # pylint: disable=unidiomatic-typecheck
        return _fsdp_sd._local_value(value, types.SimpleNamespace(spec=target._spec), key)  # pylint: disable=W0212
    if type(value) is DTensor:  # pylint: disable=unidiomatic-typecheck
        value = value.full_tensor()
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"state dict entry {key!r}: expected a tensor, got {type(value).__name__}")
    if tuple(value.shape) != tuple(target.shape):
        raise ValueError(f"state dict entry {key!r}: shape {tuple(value.shape)} does not match {tuple(target.shape)}")
    return value


def _copy_into(target: torch.Tensor, value: Any, key: str) -> None:
    local = _local_of(value, target, key)
    with torch.no_grad(), DisableTorchFunctionSubclass():
        dst = local_alias(target) if type(target) is DTensor else target  # pylint: disable=unidiomatic-typecheck
        if type(local) is DTensor:  # pylint: disable=unidiomatic-typecheck
            local = local_alias(local)
        if dst.data_ptr() != local.data_ptr() or dst.shape != local.shape:
            dst.copy_(local)


def _load_part(part: nn.Module, model_state_dict: Dict[str, Any], used: set, ignore_frozen: bool) -> List[str]:
    """Load the entries of ``model_state_dict`` that ``part`` holds; returns its missing keys."""
    actual = dict(part.state_dict(keep_vars=True))
    by_canon = canonical_map(actual)
    frozen = {n for n, p in part.named_parameters() if not p.requires_grad} if ignore_frozen else set()
    fsdp_part, seen = {}, set()
    for key, value in model_state_dict.items():
        name = key if key in actual else by_canon.get(canonical_fqn(key))
        if name is None:
            continue
        used.add(key)
        seen.add(name)
        if actual[name].__dict__.get("_hp_fsdp_info") is not None:
            fsdp_part[name] = value
        else:
            _copy_into(actual[name], value, key)
    if fsdp_part:
        _fsdp_sd.set_model_state_dict(part, fsdp_part, strict=False)
    return [canonical_fqn(n) for n in actual if n not in seen and n not in frozen]


def set_model_state_dict(model, model_state_dict: Dict[str, Any], *, options=None) -> Tuple[List[str], List[str]]:
    """Load a sharded or full state dict (canonical or actual keys, from any layout) into a model or a list
    of model parts. Returns ``(missing_keys, unexpected_keys)``; with ``strict`` (default) either raises."""
    o = _opts(options)
    used: set = set()
    missing: List[str] = []
    for part in _parts(model):
        missing += _load_part(part, model_state_dict, used, o.ignore_frozen_params)
    unexpected = sorted(set(model_state_dict) - used)
    if o.strict and (missing or unexpected):
        raise RuntimeError(f"set_model_state_dict: missing keys {sorted(missing)}, unexpected keys {unexpected}")
    return sorted(missing), unexpected


def init_optimizer_state(optimizer: torch.optim.Optimizer) -> None:
    """Create the optimizer's per-parameter states without changing any parameter: one step with zero
    gradients at learning rate 0 (as torch's ``get_optimizer_state_dict`` does). No-op when states exist."""
    if optimizer.state:
        return
    params = [p for g in optimizer.param_groups for p in g["params"]]
    if any(p.grad is not None for p in params):
        raise RuntimeError("init_optimizer_state: parameters hold gradients; call zero_grad(set_to_none=True) first")
    for p in params:
        if p.requires_grad:
            p.grad = torch.zeros_like(p)
    saved = []
    for g in optimizer.param_groups:
        saved.append(g["lr"])
        g["lr"] = torch.zeros_like(g["lr"]) if isinstance(g["lr"], torch.Tensor) else 0.0
    try:
        optimizer.step()
    finally:
        for g, lr in zip(optimizer.param_groups, saved):
            g["lr"] = lr
        optimizer.zero_grad(set_to_none=True)


def _full_states(osd: Dict[str, Any], cpu: bool) -> Dict[str, Any]:
    for st in osd.get("state", {}).values():
        for k, v in list(st.items()):
            if type(v) is DTensor:  # pylint: disable=unidiomatic-typecheck
                v = v.full_tensor()
                st[k] = v.cpu() if cpu else v
    return osd


def get_optimizer_state_dict(model: nn.Module, optimizers, *, options=None) -> Dict[str, Any]:
    """``{"state": {fqn: {name: value}}, "param_groups": [{..., "params": [fqn, ...]}]}`` over all
    ``optimizers`` (one or a list); states are DTensor shards (or full tensors with ``full_state_dict``).
    With ``flatten_optimizer_state_dict``: ``{"state.<fqn>.<name>": value, "param_groups.<fqn>.<setting>":
    value}`` (what checkpoints should hold: it merges across pipeline stages). States are created first if
    the optimizers have not stepped yet (so a checkpoint can be loaded into them)."""
    o = _opts(options)
    state: Dict[str, Any] = {}
    groups: List[Dict[str, Any]] = []
    for opt in _optimizers(optimizers):
        init_optimizer_state(opt)
        osd = _optim_sd.get_optimizer_state_dict(model, opt, full_state_dict=o.full_state_dict,
                                                 cpu_offload=o.cpu_offload)
        if not osd:  # full + cpu_offload on a rank other than 0
            continue
        if o.full_state_dict:
            osd = _full_states(osd, o.cpu_offload)
        for fqn, st in osd["state"].items():
            key = canonical_fqn(fqn)
            if key in state:
                raise ValueError(f"get_optimizer_state_dict: parameter {key!r} belongs to several optimizers")
            state[key] = st
        for g in osd["param_groups"]:
            groups.append({**g, "params": [canonical_fqn(n) for n in g["params"]]})
    if not state and not groups:
        return {}
    osd = {"state": state, "param_groups": groups}
    return flatten_optimizer_state(osd) if o.flatten_optimizer_state_dict else osd


def _names_of(model, opt) -> Dict[int, str]:
    names = {id(p): n for part in _parts(model) for n, p in part.named_parameters()}
    return {id(p): names[id(p)] for g in opt.param_groups for p in g["params"] if id(p) in names}


def set_optimizer_state_dict(model: nn.Module, optimizers, optim_state_dict: Dict[str, Any], *, options=None) -> None:
    """Load a state dict from :func:`get_optimizer_state_dict` (sharded or full, any layout) into ``optimizers``."""
    _opts(options)
    if not optim_state_dict:
        raise ValueError("set_optimizer_state_dict: empty optimizer state dict")
    flat = not isinstance(optim_state_dict.get("state"), dict)
    for opt in _optimizers(optimizers):
        names = _names_of(model, opt)
        canon = {canonical_fqn(n): n for n in names.values()}
        if flat:
            nested = unflatten_optimizer_state(optim_state_dict, [[canonical_fqn(names[id(p)]) for p in g["params"]]
                                                                  for g in opt.param_groups])
        else:
            nested = optim_state_dict
        state, groups = nested["state"], list(nested["param_groups"])
        # groups restricted to this optimizer's parameters: a pipeline stage (or one of several optimizers)
        # loads the part of a checkpoint saved by the whole model
        sub_groups = []
        for g in groups:
            kept = [_actual(canon, n) for n in g["params"] if canonical_fqn(n) in canon]
            if kept:
                sub_groups.append({**g, "params": kept})
        if len(sub_groups) != len(opt.param_groups):
            raise ValueError(f"set_optimizer_state_dict: the optimizer has {len(opt.param_groups)} param groups, the "
                             f"state dict has {len(sub_groups)} holding its parameters")
        sub_state = {_actual(canon, k): v for k, v in state.items() if canonical_fqn(k) in canon}
        init_optimizer_state(opt)
        dtensor_states = _dtensor_state_keys(opt)
        _optim_sd.set_optimizer_state_dict(model, opt, {"state": sub_state, "param_groups": sub_groups})
        _restore_dtensor_states(opt, dtensor_states)


def _dtensor_state_keys(opt) -> set:
    """(param id, key) of the states the optimizer keeps as DTensors (torch optimizers stepping DTensor
    parameters directly, e.g. TP); FSDP and Muon keep plain local tensors."""
    return {(id(p), k) for p, st in opt.state.items() for k, v in st.items() if isinstance(v, DTensor)}


def _restore_dtensor_states(opt, keys: set) -> None:
    """Loading hands back plain local shards; re-wrap those the optimizer keeps as DTensors."""
    for p, st in opt.state.items():
        for k, v in list(st.items()):
            if (id(p), k) in keys and not isinstance(v, DTensor) and isinstance(v, torch.Tensor):
                st[k] = as_dtensor(v, p._spec)  # pylint: disable=protected-access


def _actual(canon: Dict[str, str], name: str) -> str:
    try:
        return canon[canonical_fqn(name)]
    except KeyError:
        raise KeyError(f"set_optimizer_state_dict: {name!r} is not a parameter of this optimizer") from None


def get_state_dict(model: nn.Module, optimizers, *, options=None) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """``(model state dict, optimizer state dict)`` (see the two functions)."""
    return get_model_state_dict(model, options=options), get_optimizer_state_dict(model, optimizers, options=options)


def set_state_dict(model: nn.Module, optimizers, *, model_state_dict: Dict[str, Any],
                   optim_state_dict: Dict[str, Any], options=None) -> Tuple[List[str], List[str]]:
    """Load both; returns the model's ``(missing_keys, unexpected_keys)``."""
    keys = set_model_state_dict(model, model_state_dict, options=options)
    set_optimizer_state_dict(model, optimizers, optim_state_dict, options=options)
    return keys
