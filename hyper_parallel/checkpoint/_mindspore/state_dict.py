# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Model state dicts of MindSpore cells (TP / ``shard_module`` layouts) for checkpoints.

Sharded parameters (the local shards that MindSpore's ``parallelize_module`` leaves in a cell, with
their specs) appear as MindSpore ``DTensor`` views whose local tensor *is* the parameter, so loading into
the state dict loads the model. Keys are the parameter names, which match torch's for the same module
tree. Optimizer states of the ``hyper_parallel.optim`` MindSpore optimizers use the flattened form
(``state.<name>.<key>``), which is what ``OptimizerState`` saves on torch too.
"""
from __future__ import annotations

from typing import Any, Dict, List, Tuple

import mindspore as ms
import numpy as np
from mindspore import nn

from hyper_parallel.checkpoint.fqn import canonical_fqn
from hyper_parallel.platform.mindspore.dtensor import DTensor

__all__ = ["get_model_state_dict", "set_model_state_dict", "get_optimizer_state_dict", "set_optimizer_state_dict",
           "get_state_dict", "set_state_dict", "init_optimizer_state"]


def _specs(cell: nn.Cell) -> Dict[str, Any]:
    out = {}
    for _, sub in cell.cells_and_names():
        for leaf, spec in sub.__dict__.get("_hp_param_specs", {}).items():
            param = getattr(sub, leaf, None)
            if param is not None:
                out[param.name] = spec
    return out


def get_model_state_dict(model: nn.Cell, *, options=None) -> Dict[str, Any]:
    """``{name: DTensor (sharded parameter) or Parameter}``; ``full_state_dict`` gathers (a collective)."""
    specs = _specs(model)
    full = options is not None and options.full_state_dict
    out = {}
    for param in model.get_parameters():
        value = DTensor(param, specs[param.name]) if param.name in specs else param
        out[canonical_fqn(param.name)] = value.full_tensor() if full and isinstance(value, DTensor) else value
    return out


def _local(value: Any, param: ms.Parameter, spec: Any, key: str) -> ms.Tensor:
    if isinstance(value, DTensor):
        if spec is not None and value.spec is spec:
            return value.to_local()
        value = value.full_tensor()
    if tuple(value.shape) != (tuple(spec.shape) if spec is not None else tuple(param.shape)):
        raise ValueError(f"state dict entry {key!r}: shape {tuple(value.shape)} does not match the parameter")
    if spec is None:
        return value
    sizes, offsets = spec.local_shape_and_offset(spec.mesh.get_coordinate())
    arr = value.asnumpy()[tuple(slice(o, o + n) for o, n in zip(offsets, sizes))]
    return ms.Tensor(np.ascontiguousarray(arr))


def set_model_state_dict(model: nn.Cell, model_state_dict: Dict[str, Any], *, options=None) -> Tuple[List[str],
                                                                                                  List[str]]:
    """Load a sharded or full state dict into ``model``; returns ``(missing, unexpected)`` (strict raises)."""
    specs = _specs(model)
    params = {canonical_fqn(p.name): p for p in model.get_parameters()}
    unexpected = sorted(k for k in model_state_dict if canonical_fqn(k) not in params)
    missing = sorted(k for k in params if k not in {canonical_fqn(n) for n in model_state_dict})
    if (options is None or options.strict) and (missing or unexpected):
        raise RuntimeError(f"set_model_state_dict: missing keys {missing}, unexpected keys {unexpected}")
    for key, value in model_state_dict.items():
        param = params.get(canonical_fqn(key))
        if param is None:
            continue
        local = _local(value, param, specs.get(param.name), key)
        if local is not param:
            param.set_data(local.astype(param.dtype) if local.dtype != param.dtype else local)
    return missing, unexpected


def _children(optimizers) -> List[Any]:
    opts = list(optimizers) if isinstance(optimizers, (list, tuple)) else [optimizers]
    out = []
    for opt in opts:
        out.extend(_children(opt.optimizers) if hasattr(opt, "optimizers") else [opt])
    for opt in out:
        if not hasattr(opt, "param_groups") or not hasattr(opt, "state"):
            raise TypeError(f"optimizers: expected hyper_parallel.optim MindSpore optimizers, got {type(opt).__name__}")
    return out


def init_optimizer_state(optimizers) -> None:
    """Create the states of optimizers that never stepped: one step with zero gradients at lr 0 (the
    parameters do not change), so that a checkpoint has somewhere to load into."""
    for opt in _children(optimizers):
        if opt.state:
            continue
        params = [p for g in opt.param_groups for p in g["params"]]
        saved = [g["lr"] for g in opt.param_groups]
        for g in opt.param_groups:
            g["lr"] = 0.0
        try:
            opt.step([ms.Tensor(np.zeros(tuple(p.shape), dtype=np.float32)).astype(p.dtype) for p in params])
        finally:
            for g, lr in zip(opt.param_groups, saved):
                g["lr"] = lr


def get_optimizer_state_dict(model: nn.Cell, optimizers, *, options=None) -> Dict[str, Any]:
    """The optimizers' states in the flattened form (``state.<name>.<key>``, ``param_groups.<name>.<setting>``):
    per-parameter tensors of sharded parameters as MindSpore DTensors (views of the live states)."""
    if options is not None and options.full_state_dict:
        raise ValueError("get_optimizer_state_dict on MindSpore: full_state_dict is not supported; save the sharded "
                         "state (any layout loads it)")
    specs = _specs(model)
    init_optimizer_state(optimizers)
    out: Dict[str, Any] = {}
    for opt in _children(optimizers):
        for group in opt.param_groups:
            for p in group["params"]:
                name = canonical_fqn(p.name)
                for k, v in group.items():
                    if k != "params":
                        out[f"param_groups.{name}.{k}"] = list(v) if isinstance(v, tuple) else v
                for k, v in opt.state.get(p.name, {}).items():
                    spec = specs.get(p.name)
                    if spec is not None and isinstance(v, ms.Tensor) and tuple(v.shape) == tuple(p.shape):
                        v = DTensor(v, spec)
                    out[f"state.{name}.{k}"] = v
    return out


def set_optimizer_state_dict(model: nn.Cell, optimizers, optim_state_dict: Dict[str, Any], *, options=None) -> None:
    """Load the flattened form (sharded, any layout) into ``optimizers``."""
    del options
    specs = _specs(model)
    for opt in _children(optimizers):
        for group in opt.param_groups:
            for p in group["params"]:
                name = canonical_fqn(p.name)
                for k in [k for k in group if k != "params"]:
                    key = f"param_groups.{name}.{k}"
                    if key in optim_state_dict:
                        value = optim_state_dict[key]
                        group[k] = tuple(value) if isinstance(group[k], tuple) else value
                prefix = f"state.{name}."
                for key, value in optim_state_dict.items():
                    if key.startswith(prefix):
                        field = key[len(prefix):]
                        if isinstance(value, DTensor):
                            value = _local(value, p, specs.get(p.name), key)
                        opt.state.setdefault(p.name, {})[field] = value


def get_state_dict(model: nn.Cell, optimizers, *, options=None) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """``(model state dict, flattened optimizer state dict)``."""
    return get_model_state_dict(model, options=options), get_optimizer_state_dict(model, optimizers, options=options)


def set_state_dict(model: nn.Cell, optimizers, *, model_state_dict: Dict[str, Any],
                   optim_state_dict: Dict[str, Any], options=None) -> Tuple[List[str], List[str]]:
    """Load both."""
    keys = set_model_state_dict(model, model_state_dict, options=options)
    set_optimizer_state_dict(model, optimizers, optim_state_dict, options=options)
    return keys
