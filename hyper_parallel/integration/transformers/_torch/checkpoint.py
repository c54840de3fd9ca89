# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Checkpoints of a parallelised ``transformers`` model: sharded model + optimizer through our checkpoint API
(any layout loads them), the LR scheduler beside them, and the Hugging Face export (``save_pretrained`` of the
gathered full weights, on rank 0, plus the tokenizer / processor)."""
from __future__ import annotations

import json
import os
from typing import Any, Optional

import torch
import torch.distributed as dist
from torch import nn

__all__ = ["HP_CHECKPOINT_DIR", "SCHEDULER_NAME", "save_hsdp_checkpoint", "load_hsdp_model",
           "load_hsdp_optimizer_and_scheduler", "export_to_hf_format", "full_state_dict", "base_model_class",
           "tied_duplicates"]

#: Sub-folder of a ``checkpoint-N`` folder holding our sharded model + optimizer checkpoint.
HP_CHECKPOINT_DIR = "hyper_parallel"
#: The LR scheduler's file (transformers' name, so the folder looks like any Trainer checkpoint).
SCHEDULER_NAME = "scheduler.pt"


def _rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def _barrier() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def _unwrap_optimizer(optimizer: Any) -> Any:
    return getattr(optimizer, "optimizer", optimizer)  # accelerate's AcceleratedOptimizer


def save_hsdp_checkpoint(model: nn.Module, optimizer: Any, lr_scheduler: Any, output_dir: str,
                         should_save_scheduler: bool = True) -> str:
    """Save ``model`` and ``optimizer`` (each rank writes its shards) under ``output_dir/hyper_parallel`` and the
    scheduler's state as ``output_dir/scheduler.pt`` (rank 0, when ``should_save_scheduler``). Every rank must
    call it. Returns the sharded checkpoint's folder."""
    from hyper_parallel import checkpoint as ckpt
    states = {"model": ckpt.ModelState(model)}
    if optimizer is not None:
        states["optim"] = ckpt.OptimizerState(model, _unwrap_optimizer(optimizer))
    folder = os.path.join(output_dir, HP_CHECKPOINT_DIR)
    if _rank() == 0:
        os.makedirs(output_dir, exist_ok=True)
    _barrier()
    ckpt.save(states, checkpoint_id=folder)
    if should_save_scheduler and lr_scheduler is not None and _rank() == 0:
        torch.save(lr_scheduler.state_dict(), os.path.join(output_dir, SCHEDULER_NAME))
    _barrier()
    return folder


def load_hsdp_model(model: nn.Module, checkpoint_dir: str) -> bool:
    """Load the model shards saved by :func:`save_hsdp_checkpoint` from ``checkpoint_dir`` (the ``checkpoint-N``
    folder) into ``model``, in its current layout. Returns False, loading nothing, when the folder holds no
    sharded checkpoint of ours. Every rank must call it."""
    folder = os.path.join(checkpoint_dir, HP_CHECKPOINT_DIR)
    if not os.path.isdir(folder):
        return False
    from hyper_parallel import checkpoint as ckpt
    ckpt.load({"model": ckpt.ModelState(model)}, checkpoint_id=folder)
    return True


def load_hsdp_optimizer_and_scheduler(optimizer: Any, scheduler: Any, checkpoint_dir: str,
                                      model: Optional[nn.Module] = None) -> None:
    """Load the optimizer state (and the scheduler's, when ``scheduler.pt`` is there) saved by
    :func:`save_hsdp_checkpoint`. ``model`` is the model the optimizer steps (default: the one recorded on the
    optimizer by the trainers of this package, else the prepared model owning its parameters). Every rank must
    call it."""
    folder = os.path.join(checkpoint_dir, HP_CHECKPOINT_DIR)
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"load_hsdp_optimizer_and_scheduler: {checkpoint_dir!r} holds no "
                                f"{HP_CHECKPOINT_DIR}/ folder (not saved by save_hsdp_checkpoint)")
    inner = _unwrap_optimizer(optimizer)
    if model is None:
        from hyper_parallel.integration.transformers._torch.prepare import model_of_optimizer
        model = model_of_optimizer(inner)
    if model is None:
        raise ValueError("load_hsdp_optimizer_and_scheduler(model): the optimizer steps no model prepared by "
                         "hyper_parallel; pass the model it steps")
    from hyper_parallel import checkpoint as ckpt
    ckpt.load({"optim": ckpt.OptimizerState(model, inner)}, checkpoint_id=folder)
    path = os.path.join(checkpoint_dir, SCHEDULER_NAME)
    if scheduler is not None and os.path.isfile(path):
        scheduler.load_state_dict(torch.load(path, weights_only=True))


def full_state_dict(model: nn.Module) -> dict:
    """The whole (unsharded) state dict on rank 0, on the CPU (empty elsewhere). Every rank must call it."""
    from hyper_parallel import checkpoint as ckpt
    opts = ckpt.StateDictOptions(full_state_dict=True, cpu_offload=True)
    return ckpt.get_model_state_dict(model, options=opts)


def tied_duplicates(model: nn.Module) -> list:
    """Names of parameters that are the same object as an earlier one (tied embeddings: ``lm_head.weight``)."""
    seen, out = set(), []
    for name, param in model.named_parameters(remove_duplicate=False):
        if id(param) in seen:
            out.append(name)
        seen.add(id(param))
    return out


def base_model_class(model: nn.Module) -> type:
    """The model's own class (``fully_shard`` turns it into ``FSDP<Class>``)."""
    from hyper_parallel.fsdp._torch.fully_shard import FSDPModule
    cls = type(model)
    if issubclass(cls, FSDPModule):
        cls = next(c for c in cls.__mro__[1:] if not issubclass(c, FSDPModule))
    return cls


def export_to_hf_format(model: nn.Module, processing_class: Any, save_dir: str) -> None:
    """Write ``save_dir`` as a Hugging Face folder that ``from_pretrained`` loads: the gathered weights as
    safetensors, ``config.json`` (architectures: the model's own class), ``generation_config.json`` and the
    tokenizer / processor (``processing_class.save_pretrained``). Every rank must call it; rank 0 writes."""
    state = full_state_dict(model)
    for name in tied_duplicates(model):  # tied embeddings are written once, as save_pretrained does
        state.pop(name, None)
    if _rank() == 0:
        os.makedirs(save_dir, exist_ok=True)
        cls = type(model)
        model.__class__ = base_model_class(model)  # save_pretrained names the architecture by the class
        try:
            model.save_pretrained(save_dir, state_dict=state, safe_serialization=True)
        finally:
            model.__class__ = cls
        _fix_architectures(save_dir, model.__class__)
        if processing_class is not None and hasattr(processing_class, "save_pretrained"):
            processing_class.save_pretrained(save_dir)
    _barrier()


def _fix_architectures(save_dir: str, cls: type) -> None:
    path = os.path.join(save_dir, "config.json")
    with open(path, encoding="utf-8") as fh:
        config = json.load(fh)
    name = base_model_class_name(cls)
    if config.get("architectures") != [name]:
        config["architectures"] = [name]
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(config, fh, indent=2, sort_keys=True)


def base_model_class_name(cls: type) -> str:
    """Name of the class ``fully_shard`` derived ``cls`` from (``cls``'s own name otherwise)."""
    from hyper_parallel.fsdp._torch.fully_shard import FSDPModule
    if issubclass(cls, FSDPModule):
        cls = next(c for c in cls.__mro__[1:] if not issubclass(c, FSDPModule))
    return cls.__name__
