# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Parallelise a ``transformers`` causal LM in place: meshes from ``HyperParallelArguments``, tensor parallel on
the attention / MLP projections (HF Llama-family names), our activation policy (selective recompute / swap) on
the decoder layers, then ``fully_shard`` per decoder layer and on the root (FSDP, or HSDP on a 2-D mesh).

Also the step helpers the trainers share: the clip over sharded gradients, the optimizer wrapper that runs
``step()`` on local shards, and the device-stream sync after the last backward of a step.
"""
from __future__ import annotations

import logging
import types
import weakref
from typing import Any, Dict, Iterable, Optional, Tuple

import torch
import torch.distributed as dist
from torch import nn

from hyper_parallel.integration.transformers.args import DTYPES, HyperParallelArguments

__all__ = ["parallel_dims", "prepare_model", "is_prepared", "HSDPModule", "clip_grad_norm_", "hsdp_sync_stream",
           "wrap_optimizer_with_skip_dtensor_dispatch", "hf_tp_plan", "data_repeat", "model_of_optimizer",
           "model_dims", "ACTIVATION_PLAN", "banner"]

logger = logging.getLogger(__name__)
_DIMS: Dict[Tuple, Any] = {}
_PREPARED = "_hp_parallel_dims"
#: Attribute (in the model's ``__dict__``) holding the ``ActivationPlan`` applied by :func:`prepare_model`.
ACTIVATION_PLAN = "_hp_activation_plan"
_MODELS: "weakref.WeakSet" = weakref.WeakSet()


def _device_type() -> str:
    from hyper_parallel.platform import get_platform
    return get_platform("torch").default_device_type()


def _world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def parallel_dims(hp_args: HyperParallelArguments) -> Any:
    """The process's ``ParallelDims`` for ``hp_args`` (built once, with its meshes; every rank must call it
    the first time, since building the meshes creates process groups)."""
    from hyper_parallel.models.parallel_dims import ParallelDims
    world = _world_size()
    key = (tuple(sorted(hp_args.degrees().items())), world)
    dims = _DIMS.get(key)
    if dims is None:
        try:
            dims = ParallelDims(**hp_args.degrees(), world_size=world)
        except ValueError as exc:
            raise ValueError(f"hyper_parallel_args: {exc}") from None
        if world > 1:
            dims.build_mesh(_device_type())
        _DIMS[key] = dims
    return dims


def data_repeat(hp_args: HyperParallelArguments) -> int:
    """How many consecutive ranks see the same batch (the TP and CP peers): ``tp_size * cp_size``."""
    return hp_args.tp_size * hp_args.cp_size


def is_prepared(model: nn.Module) -> bool:
    """Whether :func:`prepare_model` already ran on ``model``."""
    return _PREPARED in model.__dict__


def _find_modules(model: nn.Module, suffix: str) -> bool:
    return any(name.endswith(suffix) for name, _ in model.named_modules())


def hf_tp_plan(model: nn.Module) -> dict:
    """The TP plan of a Llama-family ``transformers`` model (Llama, Qwen2/3, Mistral: ``model.layers.*.self_attn
    .{q,k,v,o}_proj``, ``mlp.{gate,up,down}_proj``): column-parallel q/k/v/gate/up, row-parallel o/down,
    vocabulary-parallel embedding and head, per-head q/k norms (Qwen3) on the heads dim. No sequence parallel:
    the decoder computes positions from the full sequence."""
    from hyper_parallel.core.placement import Replicate
    from hyper_parallel.tp import ColwiseParallel, RowwiseParallel, SequenceParallel
    plan = {
        "model.embed_tokens": RowwiseParallel(input_layouts=Replicate(), output_layouts=Replicate()),
        "model.layers.*.self_attn.q_proj": ColwiseParallel(),
        "model.layers.*.self_attn.k_proj": ColwiseParallel(),
        "model.layers.*.self_attn.v_proj": ColwiseParallel(),
        "model.layers.*.self_attn.o_proj": RowwiseParallel(),
        "model.layers.*.mlp.gate_proj": ColwiseParallel(),
        "model.layers.*.mlp.up_proj": ColwiseParallel(),
        "model.layers.*.mlp.down_proj": RowwiseParallel(),
        "lm_head": ColwiseParallel(output_layouts=Replicate()),
    }
    for norm in ("q_norm", "k_norm"):
        if _find_modules(model, f".self_attn.{norm}"):
            plan[f"model.layers.*.self_attn.{norm}"] = SequenceParallel(sequence_dim=2, use_local_output=True)
    return plan


def _check_tp(model: nn.Module, tp: int) -> None:
    cfg = getattr(model, "config", None)
    for what in ("num_attention_heads", "num_key_value_heads", "intermediate_size", "vocab_size"):
        value = getattr(cfg, what, None)
        if isinstance(value, int) and value % tp:
            raise ValueError(f"hyper_parallel_args.tp_size: {type(model).__name__}'s {what}={value} is not divisible "
                             f"by tp_size={tp}")


def _apply_tp(model: nn.Module, tp_mesh: Any) -> None:
    from hyper_parallel.models.llama3.parallelize import retie_embeddings
    from hyper_parallel.tp import parallelize_module
    _check_tp(model, tp_mesh.size())
    try:
        parallelize_module(model, tp_mesh, hf_tp_plan(model))
    except ValueError as exc:
        raise ValueError(f"hyper_parallel_args.tp_size: {type(model).__name__} does not have the Llama-family "
                         f"module names TP needs ({exc})") from None
    retie_embeddings(model)


def _apply_activation(model: nn.Module, hp_args: HyperParallelArguments) -> Optional[Any]:
    block = hp_args.activation_config()
    if block is None:
        return None
    flag = "is_activation_checkpointing" if hasattr(type(model), "is_activation_checkpointing") else \
        "is_gradient_checkpointing"  # transformers >= 5.x renamed it
    if getattr(model, flag, False):
        # our policy replaces transformers' own checkpointing (both would recompute twice)
        model.gradient_checkpointing_disable()
        logger.info("hyper_parallel: activation_mode=%s replaces transformers' gradient checkpointing",
                    hp_args.activation_mode)
    from hyper_parallel.activation import apply_activation_policy
    return apply_activation_policy(model, block)


def _wrap_classes(model: nn.Module, hp_args: HyperParallelArguments) -> Tuple[str, ...]:
    names = hp_args.wrap_modules or list(getattr(model, "_no_split_modules", None) or [])
    if not names:
        raise ValueError(f"hyper_parallel_args.wrap_modules: {type(model).__name__} names no _no_split_modules; give "
                         "the decoder layer class names to shard one unit each")
    return tuple(names)


def _apply_fsdp(model: nn.Module, hp_args: HyperParallelArguments, mesh: Any) -> int:
    from hyper_parallel.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy
    from hyper_parallel.fsdp._torch.fully_shard import fully_shard
    mp = MixedPrecisionPolicy(
        param_dtype=getattr(torch, DTYPES[hp_args.param_dtype]) if hp_args.param_dtype else None,
        reduce_dtype=getattr(torch, DTYPES[hp_args.reduce_dtype]) if hp_args.reduce_dtype else None)
    offload = CPUOffloadPolicy() if hp_args.cpu_offload else None
    classes = _wrap_classes(model, hp_args)
    units = [m for m in model.modules() if type(m).__name__ in classes]
    if not units:
        found = sorted({type(m).__name__ for m in model.modules()})
        raise ValueError(f"hyper_parallel_args.wrap_modules: no module of class {list(classes)} in "
                         f"{type(model).__name__} (classes: {found[:12]}...)")
    kw = dict(mesh=mesh, reshard_after_forward=hp_args.reshard_after_forward, mp_policy=mp, offload_policy=offload)
    for unit in units:
        fully_shard(unit, **kw)
    fully_shard(model, **kw)
    return len(units) + 1


def prepare_model(model: nn.Module, hp_args: HyperParallelArguments) -> nn.Module:
    """Parallelise ``model`` (a ``transformers`` ``PreTrainedModel``) in place and return it: TP when
    ``tp_size > 1``, the activation policy, then ``fully_shard`` on each decoder layer and the root over the
    data-parallel ranks (HSDP when ``dp_replicate_size > 1`` and ``dp_shard_size > 1``). A second call on the
    same model returns it unchanged. Every rank must call it (it builds meshes and shards collectively)."""
    if is_prepared(model):
        return model
    if not isinstance(hp_args, HyperParallelArguments):
        raise TypeError(f"prepare_model(hp_args): expected a HyperParallelArguments, got {type(hp_args).__name__}")
    if hp_args.cp_size > 1:
        raise ValueError(f"hyper_parallel_args.cp_size: {hp_args.cp_size} > 1 is not supported by the transformers "
                         "integration yet (use tp_size / HSDP; CP runs in hp-train)")
    dims = parallel_dims(hp_args)
    if hp_args.seed is not None:
        torch.manual_seed(hp_args.seed)
    if dims.tp > 1:
        _apply_tp(model, dims.mesh("tp"))
    plan = _apply_activation(model, hp_args)
    fsdp = dims.mesh("fsdp") if dims.world_size > 1 else None
    if fsdp is not None:
        _apply_fsdp(model, hp_args, fsdp)
    elif hp_args.param_dtype or hp_args.reduce_dtype or hp_args.cpu_offload:
        raise ValueError("hyper_parallel_args.param_dtype/reduce_dtype/cpu_offload: need a data-parallel degree > 1 "
                         f"(they are fully_shard policies; this run has dp={dims.dp})")
    model.__dict__[_PREPARED] = dims
    model.__dict__[ACTIVATION_PLAN] = plan
    _MODELS.add(model)
    return model


def model_of_optimizer(optimizer: Any) -> Optional[nn.Module]:
    """The prepared model whose parameters ``optimizer`` steps (None when there is none)."""
    inner = getattr(optimizer, "optimizer", optimizer)
    recorded = inner.__dict__.get("_hp_model")
    if recorded is not None:
        return recorded
    ids = {id(p) for group in inner.param_groups for p in group["params"]}
    for model in list(_MODELS):
        if ids and ids <= {id(p) for p in model.parameters()}:
            return model
    return None


def banner(model: nn.Module, hp_args: HyperParallelArguments) -> str:
    """One line saying what :func:`prepare_model` did to ``model``."""
    dims = model_dims(model)
    units = sum(1 for m in model.modules() if isinstance(m, HSDPModule))
    plan = model.__dict__.get(ACTIVATION_PLAN)
    layout = "HSDP" if dims.dp_replicate > 1 and dims.dp_shard > 1 else "FSDP" if units else "no data sharding"
    return (f"{type(model).__name__} on {dims.world_size} rank(s): dp_replicate={dims.dp_replicate} "
            f"dp_shard={dims.dp_shard} tp={dims.tp} ({layout}, {units} fully_shard units), activation "
            f"{hp_args.activation_mode}" + (f" on {len(plan.layers)} layers" if plan is not None else ""))


def model_dims(model: nn.Module) -> Any:
    """The ``ParallelDims`` :func:`prepare_model` used for ``model`` (None if not prepared)."""
    return model.__dict__.get(_PREPARED)


def _hsdp_module_class():
    from hyper_parallel.fsdp._torch.fully_shard import FSDPModule
    return FSDPModule


#: The class every ``fully_shard`` -ed module is an instance of (``FSDPModule``; LlamaFactory's name for it).
HSDPModule = _hsdp_module_class()


def clip_grad_norm_(parameters: Iterable[torch.Tensor], max_norm: float, norm_type: float = 2.0,
                    error_if_nonfinite: bool = False, foreach: Optional[bool] = None) -> torch.Tensor:
    """``torch.nn.utils.clip_grad_norm_`` over sharded gradients (FSDP / HSDP / TP DTensors and plain tensors):
    the total norm is reduced over each gradient's sharded mesh dims; returns it."""
    from hyper_parallel.optim._torch.clip import clip_grad_norm_ as clip
    return clip(parameters, max_norm, norm_type=norm_type, error_if_nonfinite=error_if_nonfinite, foreach=foreach)


def hsdp_sync_stream() -> None:
    """Wait for the device stream after the last backward of a step (gradient reductions done before the
    optimizer reads them). ``fully_shard``'s end-of-backward callback already finishes every reduction, so on
    the CPU this has nothing to wait for; on an accelerator it synchronises the current stream."""
    device = _device_type()
    if device != "cpu":
        getattr(torch, device).current_stream().synchronize()


def wrap_optimizer_with_skip_dtensor_dispatch(optimizer: Any) -> Any:
    """Make ``optimizer.step()`` run on the local shards of DTensor parameters (no DTensor dispatch: every
    optimizer of ``torch.optim`` is elementwise per parameter, so the local update is the global one). FSDP
    parameters already step on local shards; this covers TP-only DTensors too. In place; returns the optimizer
    (an ``accelerate`` ``AcceleratedOptimizer`` is unwrapped to its optimizer). Idempotent."""
    inner = getattr(optimizer, "optimizer", optimizer)
    if not isinstance(inner, torch.optim.Optimizer):
        raise TypeError(f"wrap_optimizer_with_skip_dtensor_dispatch(optimizer): expected a torch optimizer, got "
                        f"{type(optimizer).__name__}")
    if inner.__dict__.get("_hp_skip_dispatch"):
        return optimizer
    from hyper_parallel.platform.torch.dtensor import SkipDTensorDispatch
    step = inner.step

    def skip_step(self, *args, **kwargs):  # a bound method, as torch's LR schedulers expect of step
        del self
        with SkipDTensorDispatch():
            return step(*args, **kwargs)

    inner.step = types.MethodType(skip_step, inner)
    inner.__dict__["_hp_skip_dispatch"] = True
    return optimizer
