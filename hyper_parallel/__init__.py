# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""hyper-parallel: dual-backend (PyTorch + MindSpore) distributed training on a distributed tensor.

``import hyper_parallel`` imports no framework; names that need one load it on first use.
"""
from __future__ import annotations

from hyper_parallel._lazy import lazy_exports
from hyper_parallel._version import __version__
from hyper_parallel.core.layout import Layout
from hyper_parallel.core.placement import Partial, Placement, Replicate, Shard

_LAZY = {
    # process groups
    "init_process_group": "hyper_parallel.core.process_group",
    "destroy_process_group": "hyper_parallel.core.process_group",
    "get_process_group_ranks": "hyper_parallel.core.process_group",
    "get_backend": "hyper_parallel.core.process_group",
    "split_group": "hyper_parallel.core.process_group",
    "get_group_local_rank": "hyper_parallel.core.process_group",
    # mesh
    "DeviceMesh": "hyper_parallel.core.device_mesh",
    "init_device_mesh": "hyper_parallel.core.device_mesh",
    # spec / planner (pure)
    "DTensorSpec": "hyper_parallel.core.spec",
    "explain_redistribute": "hyper_parallel.core.cross_mesh",
    "MeshTopology": "hyper_parallel.core.mesh_topology",
    # dtensor: backend chosen by the tensor type (distribute_tensor) or $HYPER_PARALLEL_BACKEND (DTensor)
    "DTensor": "hyper_parallel.core.api",
    "distribute_tensor": "hyper_parallel.core.api",
    "SkipDTensorDispatch": "hyper_parallel.platform.torch.dtensor",
    "manual_seed": "hyper_parallel.core.random",
    "rand": "hyper_parallel.platform.torch.factories",
    "randn": "hyper_parallel.platform.torch.factories",
    "zeros": "hyper_parallel.platform.torch.factories",
    "ones": "hyper_parallel.platform.torch.factories",
    "empty": "hyper_parallel.platform.torch.factories",
    "full": "hyper_parallel.platform.torch.factories",
    "get_platform": "hyper_parallel.platform",
    # op registry
    "register_op": "hyper_parallel.core.ops.registry",
    "strict_dispatch": "hyper_parallel.platform.torch.dispatch",
    # tensor parallel
    "parallelize_module": "hyper_parallel.tp",
    "ColwiseParallel": "hyper_parallel.tp",
    "RowwiseParallel": "hyper_parallel.tp",
    "SequenceParallel": "hyper_parallel.tp",
    "PrepareModuleInput": "hyper_parallel.tp",
    "PrepareModuleOutput": "hyper_parallel.tp",
    "PrepareModuleInputOutput": "hyper_parallel.tp",
    "loss_parallel": "hyper_parallel.tp",
    # declarative parallelism
    "shard_module": "hyper_parallel.shard",
    "custom_shard": "hyper_parallel.shard",
    "DFunction": "hyper_parallel.shard",
    "parallelize_value_and_grad": "hyper_parallel.shard",
    "CollectiveError": "hyper_parallel.platform.base",
    # fully sharded data parallel
    "fully_shard": "hyper_parallel.fsdp",
    "MixedPrecisionPolicy": "hyper_parallel.fsdp",
    "CPUOffloadPolicy": "hyper_parallel.fsdp",
    # pipeline parallel
    "MetaStep": "hyper_parallel.pipeline",
    "MetaStepType": "hyper_parallel.pipeline",
    "BatchDimSpec": "hyper_parallel.pipeline",
    "explain_schedule": "hyper_parallel.pipeline",
    "validate_schedule": "hyper_parallel.pipeline",
    "PipelineStage": "hyper_parallel.pipeline",
    "ScheduleGPipe": "hyper_parallel.pipeline",
    "Schedule1F1B": "hyper_parallel.pipeline",
    "ScheduleInterleaved1F1B": "hyper_parallel.pipeline",
    "ScheduleLoopedBFS": "hyper_parallel.pipeline",
    "ScheduleInterleavedZeroBubble": "hyper_parallel.pipeline",
    "ScheduleZBVZeroBubble": "hyper_parallel.pipeline",
    "ScheduleDualPipeV": "hyper_parallel.pipeline",
    "ScheduleMpipe": "hyper_parallel.pipeline",
    "MpipeConfig": "hyper_parallel.pipeline",
    "get_schedule_class": "hyper_parallel.pipeline",
    "redistribute_across_meshes": "hyper_parallel.platform.torch.cross_mesh",
    # context parallel
    "context_parallel": "hyper_parallel.cp",
    "context_parallel_shard": "hyper_parallel.cp",
    "context_parallel_unshard": "hyper_parallel.cp",
    "ContextParallel": "hyper_parallel.cp",
    "AsyncContextParallel": "hyper_parallel.cp",
    # mixture of experts / expert parallel
    "MoE": "hyper_parallel.moe",
    "MoEConfig": "hyper_parallel.moe",
    "ExpertParallel": "hyper_parallel.moe",
    "ExpertTensorParallel": "hyper_parallel.moe",
    # optimizers (the rest of the optimizer API is in hyper_parallel.optim)
    "clip_grad_norm_": "hyper_parallel.optim",
    # activation checkpointing and swap (``checkpoint``/``swap`` stay in hyper_parallel.activation)
    "checkpoint_wrapper": "hyper_parallel.activation",
    "swap_wrapper": "hyper_parallel.activation",
    "swap_tensor_wrapper": "hyper_parallel.activation",
    "CheckpointPolicy": "hyper_parallel.activation",
    "SwapManager": "hyper_parallel.activation",
    "apply_activation_policy": "hyper_parallel.activation",
    # distributed checkpoint (save/load/... stay in hyper_parallel.checkpoint)
    "CheckpointManager": "hyper_parallel.checkpoint",
    # auto-parallel (search/ParallelPlan/the rest stay in hyper_parallel.auto_parallel)
    "estimate_memory": "hyper_parallel.auto_parallel",
    "estimate_step_time": "hyper_parallel.auto_parallel",
    "balance_stages": "hyper_parallel.auto_parallel",
}

__all__ = ["Layout", "Partial", "Placement", "Replicate", "Shard", *sorted(_LAZY)]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
