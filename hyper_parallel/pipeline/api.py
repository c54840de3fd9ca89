# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Public runtime API of the pipeline (backend-free): ``PipelineStage`` and the schedule classes.

Signatures follow ``torch.distributed.pipelining``: code written for torch runs by changing the
import. ``PipelineStage(submodule, ...)`` builds the stage of the submodule's framework (a torch
``nn.Module`` or a MindSpore ``nn.Cell``); the schedule classes run any backend's stages.

``schedule.step(*args, target=None, losses=None, **kwargs)``: the whole batch goes to the rank that
holds stage 0 (split into microbatches along ``args_chunk_spec`` / ``kwargs_chunk_spec``, dim 0 by
default), ``target`` and the ``losses`` list to the rank of the last stage; returns the last stage's
merged outputs there (``None`` elsewhere). The loss-scaling rule is in ``runtime.py``.
"""
from __future__ import annotations

import importlib
from typing import Any, Dict, List, Optional

from hyper_parallel.pipeline.runtime import RankRunner, StepContext
from hyper_parallel.pipeline.stage_base import PipelineStage, set_stage_loader
from hyper_parallel.pipeline.schedules import canonical_schedule_name, generate_schedule, pair_forward_backward
from hyper_parallel.pipeline.validate import validate_lists
from hyper_parallel.platform import platform_of

__all__ = ["PipelineStage", "PipelineSchedule", "ScheduleGPipe", "Schedule1F1B", "ScheduleInterleaved1F1B",
           "ScheduleLoopedBFS", "ScheduleInterleavedZeroBubble", "ScheduleZBVZeroBubble", "ScheduleDualPipeV",
           "ScheduleMpipe", "get_schedule_class"]

_BACKENDS = {"torch": "hyper_parallel.pipeline._torch.stage", "mindspore": "hyper_parallel.pipeline._mindspore.stage"}


def _stage_class(submodule: Any) -> type:
    """The stage class of ``submodule``'s framework (a torch ``nn.Module`` or a MindSpore ``nn.Cell``)."""
    plat = platform_of(submodule)
    if plat is None:
        raise TypeError(f"PipelineStage(submodule): expected a torch nn.Module or a MindSpore nn.Cell, got "
                        f"{type(submodule).__module__}.{type(submodule).__name__}")
    return importlib.import_module(_BACKENDS[plat.name]).PipelineStage


set_stage_loader(_stage_class)


class PipelineSchedule:  # pylint: disable=too-many-instance-attributes
    """Base of the schedule classes: generates, validates and runs this rank's list (see module docstring)."""

    schedule_name = ""
    multi = False

    def __init__(self, stages, n_microbatches: int, loss_fn=None, args_chunk_spec=None, kwargs_chunk_spec=None,
                 output_merge_spec=None, scale_grads: bool = True, *, overlap_p2p: bool = False,
                 stages_per_rank: Optional[int] = None, backward_requires_autograd: bool = True,
                 defer_pp_recv: bool = False, overlap_b_f: bool = False) -> None:
        # torch's knobs: receives are already posted at their comm point (what defer_pp_recv asks for);
        # backward always runs through autograd here, so a custom non-autograd backward is refused
        del defer_pp_recv
        if not backward_requires_autograd:
            raise ValueError(f"{type(self).__name__}(backward_requires_autograd=False): custom backward functions "
                             "are not supported; the runtime differentiates the stage modules with autograd")
        stage_list = list(stages) if isinstance(stages, (list, tuple)) else [stages]
        if not stage_list:
            raise ValueError(f"{type(self).__name__}(stages): expected at least one PipelineStage")
        if not self.multi and len(stage_list) != 1:
            raise ValueError(f"{type(self).__name__}: a single-stage schedule takes one stage per rank, got "
                             f"{len(stage_list)}; use ScheduleInterleaved1F1B or another multi-stage schedule")
        first = stage_list[0]
        v = stages_per_rank if stages_per_rank is not None else len(stage_list)
        positions = getattr(first, "num_positions", first.group_size)
        if first.num_stages != positions * v:
            where = (f"{positions} ranks" if positions == first.group_size else
                     f"{positions} pipeline positions (rank sets) of {first.group_size} ranks")
            raise ValueError(f"{type(self).__name__}: {first.num_stages} stages cannot be placed as {v} stage(s) "
                             f"per rank on {where} ({positions * v} stages)")
        if not isinstance(overlap_b_f, bool):
            raise TypeError(f"{type(self).__name__}(overlap_b_f): expected True or False, got {overlap_b_f!r}")
        if overlap_b_f and first.platform.name != "torch":
            raise ValueError(f"{type(self).__name__}(overlap_b_f=True): two compute threads need torch stages; "
                             f"these are {first.platform.name} stages (run with overlap_b_f=False)")
        self.overlap_b_f = overlap_b_f
        self._stages = stage_list
        self._n_microbatches = n_microbatches
        self._loss_fn = loss_fn
        self._args_chunk_spec = args_chunk_spec
        self._kwargs_chunk_spec = kwargs_chunk_spec
        self._output_merge_spec = output_merge_spec
        self.scale_grads = scale_grads
        self.schedule = self._make_schedule(positions, n_microbatches, v)
        self._bind(self.schedule, overlap_p2p)

    def _make_schedule(self, positions: int, n_microbatches: int, stages_per_rank: int):
        """The compute lists of this schedule class (a subclass with knobs of its own overrides this); with
        ``overlap_b_f`` adjacent forward/backward steps of different microbatches become ``OVERLAP_F_B`` pairs
        (:func:`~hyper_parallel.pipeline.schedules.pair_forward_backward`)."""
        schedule = generate_schedule(self.schedule_name, positions, n_microbatches, stages_per_rank)
        return pair_forward_backward(schedule) if self.overlap_b_f else schedule

    def _bind(self, schedule, overlap_p2p: bool) -> None:
        self.schedule = schedule
        fsdp = any(s.uses_fsdp for s in self._stages)
        lists = schedule.lowered(fsdp=fsdp)
        self.validation = validate_lists(lists, schedule.stage_to_rank, schedule.n_microbatches)
        first = self._stages[0]
        # the pipeline position of this rank (its rank in the schedule); with stages on meshes of different
        # sizes several ranks share one position
        rank = schedule.stage_to_rank[first.stage_index] if hasattr(first, "num_positions") else first.group_rank
        mine = set(schedule.stages_of(rank))
        got = {s.stage_index for s in self._stages}
        if got != mine:
            raise ValueError(f"{type(self).__name__}: rank {rank} holds stages {sorted(got)} but the "
                             f"{schedule.name} placement puts stages {sorted(mine)} on it "
                             f"(stage_to_rank={list(schedule.stage_to_rank)})")
        for s in self._stages:
            s.bind(schedule.stage_to_rank, schedule.n_microbatches, {t.stage_index: t for t in self._stages})
        self.pipeline_order = {r: list(schedule.compute[r]) for r in range(schedule.num_ranks)}
        self.pipeline_order_with_comms = lists
        self._position = rank
        self._overlap_p2p = overlap_p2p
        self._runner = RankRunner(lists[rank], {s.stage_index: s for s in self._stages}, schedule.stage_to_rank,
                                  rank, overlap_p2p=overlap_p2p,
                                  rendezvous=self._stages[0].platform.name == "mindspore",
                                  overlap_b_f=self.overlap_b_f)
        self._eval_runner: Optional[RankRunner] = None

    def _forward_runner(self) -> RankRunner:
        """The runner of the forward-only list (built and validated on first use)."""
        if self._eval_runner is None:
            fwd = self.schedule.forward_only()
            lists = fwd.lowered(fsdp=any(s.uses_fsdp for s in self._stages))
            validate_lists(lists, fwd.stage_to_rank, fwd.n_microbatches, forward_only=True)
            self._eval_runner = RankRunner(lists[self._position], {s.stage_index: s for s in self._stages},
                                           fwd.stage_to_rank, self._position, overlap_p2p=self._overlap_p2p,
                                           rendezvous=self._stages[0].platform.name == "mindspore")
        return self._eval_runner

    @property
    def record_timeline(self) -> bool:
        """When True, ``step()`` records (start, end, step) of every compute step in ``timeline``."""
        return self._runner.record

    @record_timeline.setter
    def record_timeline(self, value: bool) -> None:
        self._runner.record = bool(value)

    @property
    def leaf_timeline(self):
        """Every forward/backward of the last ``step()`` as ``(start_s, end_s, MetaStep, thread name)`` when
        ``record_timeline`` is on: with ``overlap_b_f`` the two halves of a pair carry different thread names
        and their intervals intersect."""
        return list(self._runner.leaf_timeline)

    @property
    def comm_stats(self):
        """``{"batches": n, "duplex": d}``: ``batch_isend_irecv`` calls of the last ``step()``, and how many of
        them carried sends and receives together."""
        return dict(self._runner.comm_stats)

    @property
    def timeline(self):
        """This rank's compute steps of the last ``step()`` as ``(start_s, end_s, MetaStep)`` (perf_counter
        seconds), when ``record_timeline`` is on."""
        return list(self._runner.timeline)

    # ------------------------------------------------------------------ torch-compatible surface
    def step(self, *args, target=None, losses: Optional[List[Any]] = None, return_outputs: bool = True,
             loss_kwargs: Optional[Dict[str, Any]] = None, **kwargs) -> Any:
        """Run one step on the whole batch (see the module docstring); returns the merged last-stage output
        (``None`` with ``return_outputs=False``). ``loss_kwargs`` go to every ``loss_fn`` call unchanged."""
        return self._run(self._runner, args, kwargs, target, losses, return_outputs, loss_kwargs)

    def eval(self, *args, target=None, losses: Optional[List[Any]] = None, return_outputs: bool = True,
             loss_kwargs: Optional[Dict[str, Any]] = None, **kwargs) -> Any:
        """Forward only (torch's ``eval``): the same microbatch split and stage order, each rank's forward
        steps of the schedule with their sends and receives, autograd off (no graph, no gradients, tied
        gradients untouched); FSDP stages are gathered once and freed after. With ``target`` on the last
        stage the microbatch losses go to ``losses``; without it no loss is computed. Returns the merged
        last-stage output there, like ``step``."""
        saved = self._loss_fn
        if target is None:
            self._loss_fn = None
        for s in self._stages:
            s.grad_enabled = False
        try:
            return self._run(self._forward_runner(), args, kwargs, target, losses, return_outputs, loss_kwargs)
        finally:
            self._loss_fn = saved
            for s in self._stages:
                s.grad_enabled = True

    def set_requires_gradient_sync(self, requires_gradient_sync: bool) -> None:
        """Gradient accumulation over several ``step()`` calls (FSDP's name): while False, ``step()`` leaves the
        gradients of FSDP stages unreduced (accumulated unsharded, the parameters kept gathered, as between
        microbatches) and the gradients of tied parameters unsummed; the next ``step()`` with True (the
        default) reduces and sums the accumulated total once. Each ``step()`` still scales its microbatch losses
        by ``1 / n_microbatches``: divide by the number of accumulated steps in ``loss_fn``."""
        for s in self._stages:
            s.requires_gradient_sync = bool(requires_gradient_sync)

    def _run(self, runner: RankRunner, args, kwargs, target, losses, return_outputs, loss_kwargs) -> Any:
        stage0 = self._stages[0]
        arg_mbs, kwarg_mbs, target_mbs = stage0.prepare_step(self, args, kwargs, target, losses)
        scale = 1.0 / self._n_microbatches if self.scale_grads else 1.0
        ctx = StepContext(arg_mbs, kwarg_mbs, target_mbs, losses, scale)
        loss_fn = self._loss_fn
        if loss_kwargs and loss_fn is not None:
            base = loss_fn

            def loss_fn(out, tgt):  # pylint: disable=function-redefined
                return base(out, tgt, **loss_kwargs)
        for s in self._stages:
            s.begin_step(loss_fn)
            if self.overlap_b_f and hasattr(s, "prepare_backward_lane"):
                # every step: the stage modules may be parallelized (EP, FSDP, TP) after the schedule is built;
                # groups twinned before are skipped
                s.prepare_backward_lane()
        runner.run(ctx)
        out = None
        for s in self._stages:
            s.end_step()
            if s.is_last:
                if losses is not None:
                    losses.extend(ctx.mb_losses[k] for k in sorted(ctx.mb_losses))
                out = s.merge_outputs(self._output_merge_spec) if return_outputs else None
        return out

    def _load_csv(self, path: str, format: str = "compute_only") -> None:  # pylint: disable=redefined-builtin
        """Replace the generated schedule by a custom compute-only CSV (torch's format); validated here."""
        from hyper_parallel.pipeline.csv_io import schedule_from_csv  # pylint: disable=import-outside-toplevel
        if format != "compute_only":
            raise ValueError(f"_load_csv(format={format!r}): only 'compute_only' CSVs are read (communication "
                             "is added by lowering)")
        sched = schedule_from_csv(path, self._n_microbatches, num_stages=self._stages[0].num_stages)
        self._bind(sched, self._runner.overlap_p2p)


class ScheduleGPipe(PipelineSchedule):
    """GPipe: all forwards, then all backwards (fill-drain). Any ``n_microbatches >= 1``."""
    schedule_name = "GPipe"


class Schedule1F1B(PipelineSchedule):
    """1F1B: warm-up forwards, then one forward / one backward. Any ``n_microbatches >= 1`` (for m < p the
    warm-up shrinks to m; torch refuses m < p)."""
    schedule_name = "1F1B"


class ScheduleInterleaved1F1B(PipelineSchedule):
    """Interleaved 1F1B (Megatron virtual stages, depth first): several stages per rank (loop placement)."""
    schedule_name = "Interleaved1F1B"
    multi = True


class ScheduleLoopedBFS(PipelineSchedule):
    """Looped BFS: several stages per rank, all microbatches of the earlier stage first."""
    schedule_name = "LoopedBFS"
    multi = True


class ScheduleInterleavedZeroBubble(PipelineSchedule):
    """Interleaved zero bubble (ZB1P; with one stage per rank ZB-H1): backward split into I and W."""
    schedule_name = "InterleavedZeroBubble"
    multi = True


class ScheduleZBVZeroBubble(PipelineSchedule):
    """ZB-V: exactly 2 stages per rank in a V placement, I/W split."""
    schedule_name = "ZBVZeroBubble"
    multi = True


class ScheduleDualPipeV(PipelineSchedule):
    """DualPipeV: 2 stages per rank (V placement), overlapped forward/backward pairs (OVERLAP_F_B);
    needs ``n_microbatches >= num_stages``."""
    schedule_name = "DualPipeV"
    multi = True


class ScheduleMpipe(PipelineSchedule):
    """Mpipe (``pipeline/mpipe.py``): stage 0 is the encoder stage on its own position (a rank set of any
    size), running ``config.encoder_ahead`` forwards ahead of the language-model stages on positions
    ``1 .. p-1`` (1F1B among them); ``step(..., sample_costs=...)`` balances the microbatches by measured
    per-sample cost (image tokens, say). ``ScheduleMpipe(stage, n_microbatches, loss_fn=None, ..., config=
    MpipeConfig())``; the other arguments as the other schedules."""
    schedule_name = "Mpipe"

    def __init__(self, stages, n_microbatches: int, loss_fn=None, args_chunk_spec=None, kwargs_chunk_spec=None,
                 output_merge_spec=None, scale_grads: bool = True, *, config=None, **kwargs) -> None:
        from hyper_parallel.pipeline.mpipe import MpipeConfig  # pylint: disable=import-outside-toplevel
        if config is None:
            config = MpipeConfig()
        if not isinstance(config, MpipeConfig):
            raise TypeError(f"ScheduleMpipe(config): expected an MpipeConfig, got {type(config).__name__}")
        self.config = config
        #: the sample indices of every microbatch in the last ``step()`` (caller's order when not balanced)
        self.microbatch_groups: List[List[int]] = []
        super().__init__(stages, n_microbatches, loss_fn, args_chunk_spec, kwargs_chunk_spec, output_merge_spec,
                         scale_grads, **kwargs)

    def _make_schedule(self, positions: int, n_microbatches: int, stages_per_rank: int):
        from hyper_parallel.pipeline.schedules import mpipe_schedule  # pylint: disable=import-outside-toplevel
        schedule = mpipe_schedule(positions, n_microbatches, self.config.encoder_ahead)
        return pair_forward_backward(schedule) if self.overlap_b_f else schedule

    def step(self, *args, target=None, losses: Optional[List[Any]] = None, return_outputs: bool = True,
             loss_kwargs: Optional[Dict[str, Any]] = None, sample_costs=None, **kwargs) -> Any:
        """As :meth:`PipelineSchedule.step`, plus ``sample_costs``: one number per sample of the batch (on at
        least one rank of the pipeline group; ranks that pass it must agree). With ``config.balance`` the
        batch (inputs, keyword inputs and target, along their chunk dims) is permuted into microbatches of
        equal size and even cost (:func:`~hyper_parallel.pipeline.mpipe.balance_microbatches`); the
        returned output is put back in the caller's order, ``losses`` stay per (balanced) microbatch and
        ``microbatch_groups`` names the samples of each."""
        from hyper_parallel.pipeline.mpipe import balanced_step  # pylint: disable=import-outside-toplevel
        return balanced_step(self, args, kwargs, target, losses, return_outputs, loss_kwargs, sample_costs)


_CLASSES: Dict[str, type] = {c.schedule_name: c for c in (
    ScheduleGPipe, Schedule1F1B, ScheduleInterleaved1F1B, ScheduleLoopedBFS, ScheduleInterleavedZeroBubble,
    ScheduleZBVZeroBubble, ScheduleDualPipeV, ScheduleMpipe)}


def get_schedule_class(schedule_name: str) -> type:
    """The schedule class for ``schedule_name`` (case-insensitive, torch's names)."""
    return _CLASSES[canonical_schedule_name(schedule_name)]
