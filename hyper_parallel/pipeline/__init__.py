# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Pipeline parallelism: schedules as validated data, and a runtime that executes them.

Pure (no framework import): ``MetaStep`` / ``MetaStepType`` (the schedule IR, torch's action strings),
``generate_schedule`` (GPipe, 1F1B, Interleaved1F1B, LoopedBFS, InterleavedZeroBubble, ZBVZeroBubble,
DualPipeV, Mpipe), ``validate_schedule`` (deadlock-freedom proof), ``simulate_schedule`` (timelines and
bubbles), ``explain_schedule`` (text / PNG), ``schedule_to_csv`` / ``schedule_from_csv``,
``BatchDimSpec``, ``split_layers``.

Runtime (torch, loaded on first use; signatures follow ``torch.distributed.pipelining``):
``PipelineStage``, ``ScheduleGPipe``, ``Schedule1F1B``, ``ScheduleInterleaved1F1B``, ``ScheduleLoopedBFS``,
``ScheduleInterleavedZeroBubble``, ``ScheduleZBVZeroBubble``, ``ScheduleDualPipeV``, ``ScheduleMpipe`` (with
``MpipeConfig``: the vision encoder on its own position ahead of the LM stages, balanced microbatches),
``get_schedule_class``.
See ``docs/pipeline.md``.
"""
from __future__ import annotations

from hyper_parallel._lazy import lazy_exports

from hyper_parallel.pipeline.api import (PipelineSchedule, PipelineStage, Schedule1F1B, ScheduleDualPipeV,
                                         ScheduleGPipe, ScheduleInterleaved1F1B, ScheduleInterleavedZeroBubble,
                                         ScheduleLoopedBFS, ScheduleMpipe, ScheduleZBVZeroBubble, get_schedule_class)
from hyper_parallel.pipeline.csv_io import schedule_from_csv, schedule_to_csv
from hyper_parallel.pipeline.explain import bubble_formula, explain_schedule
from hyper_parallel.pipeline.microbatch import BatchDimSpec, TensorChunkSpec
from hyper_parallel.pipeline.mpipe import MpipeConfig, balance_microbatches
from hyper_parallel.pipeline.schedules import (Schedule, ScheduleConstraintError, custom_schedule,
                                               generate_schedule, mpipe_schedule)
from hyper_parallel.pipeline.simulate import SimulationResult, simulate_schedule
from hyper_parallel.pipeline.steps import MetaStep, MetaStepType
from hyper_parallel.pipeline.validate import ScheduleValidationError, ValidationReport, validate_schedule

#: pipeline names that need a framework load it inside the stage classes (``api.py`` is backend-free)
_LAZY: dict = {}

__all__ = ["PipelineSchedule", "PipelineStage", "Schedule1F1B", "ScheduleDualPipeV", "ScheduleGPipe",
           "ScheduleInterleaved1F1B", "ScheduleInterleavedZeroBubble", "ScheduleLoopedBFS", "ScheduleMpipe",
           "ScheduleZBVZeroBubble", "get_schedule_class", "MpipeConfig", "balance_microbatches",
           "BatchDimSpec", "TensorChunkSpec", "MetaStep", "MetaStepType", "Schedule", "ScheduleConstraintError",
           "ScheduleValidationError", "SimulationResult", "ValidationReport", "bubble_formula", "custom_schedule",
           "explain_schedule", "generate_schedule",
           "mpipe_schedule", "schedule_from_csv", "schedule_to_csv", "simulate_schedule",
           "validate_schedule", *sorted(_LAZY)]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
