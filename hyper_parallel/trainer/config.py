# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The trainer's configuration: TOML files parsed into typed, validated dataclasses, plus CLI overrides.

One file (``configs/*.toml``) drives one run. Sections and keys are the fields of the dataclasses below
(``[training] steps = 100``); ``[optimizer]`` takes the keys of ``hyper_parallel.optim.config.OptimConfig``
and ``[activation]`` the block of ``hyper_parallel.activation.apply_activation_policy``. Overrides use the
same dotted names (``--training.steps 10``). Unknown keys and wrong types raise :class:`ConfigError`
naming the key and the file. Pure Python: imports no framework.
"""
from __future__ import annotations

import dataclasses
import difflib
import os
import tomllib
import typing
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

__all__ = ["ConfigError", "JobConfig", "ModelSection", "ParallelismSection", "TrainingSection", "CheckpointSection",
           "DataSection", "MetricsSection", "FaultSection", "DemoSection", "JobSection", "MoeSection", "load_config",
           "parse_config", "parse_overrides", "config_to_dict", "parallel_degrees", "pipeline_stages",
           "intra_op_threads", "micro_batches", "check_global_batch"]

MIXED_PRECISION = ("fp32", "bf16")
#: ``training.compile_backend``: TorchInductor (generated C++/OpenMP kernels on CPU) or AOTAutograd without code
#: generation (the same graph capture, seconds instead of a minute: for quick checks)
COMPILE_BACKENDS = ("inductor", "aot_eager")
BACKENDS = ("torch", "mindspore")
ASYNC_MODES = ("disabled", "async")
#: ``parallelism.cp_method`` (``hyper_parallel.cp``: ring, all-gather, Ulysses all-to-all) and ``cp_load_balance``
CP_METHODS = ("ring", "allgather", "alltoall")
CP_LOAD_BALANCE = ("headtail", "zigzag", "none")
#: ``parallelism.vl_encoder``: where a vision-language model's vision encoder runs under pipeline parallel
VL_ENCODERS = ("stage0", "mpipe")


class ConfigError(ValueError):
    """A bad configuration: the message names the file, the key and what was expected."""


@dataclass
class JobSection:
    """``[job]``: run identity and launch. ``threads``: intra-op threads per rank; 0 (the default) takes
    ``$OMP_NUM_THREADS`` when set, else the CPU count divided by the ranks on this node (see
    :func:`intra_op_threads`); the banner prints the number in use."""

    name: str = "run"
    backend: str = "torch"
    nproc: int = 2
    out_dir: str = "runs/run"
    seed: int = 0
    threads: int = 0


@dataclass
class ModelSection:
    """``[model]``: which model (registry name) and size (flavor). ``init_from = "hf:<folder>"`` starts from a
    Hugging Face folder's weights: ``name`` comes from its ``config.json`` (``model_type``) when not given, the
    size from its fields (``flavor`` becomes ``"hf"``), and each rank reads only the slices it holds."""

    name: str = "llama3"
    flavor: str = "debug"
    init_from: str = ""


@dataclass
class ParallelismSection:
    """``[parallelism]``: the degrees of :class:`hyper_parallel.trainer.ParallelDims` (``-1`` infers one) and
    their options. ``etp``: tensor parallel inside each expert (1 or ``tp``). ``loss_parallel``: the logits stay
    vocabulary-sharded over the TP ranks into the loss. ``cp_method``: ``ring``, ``allgather`` or ``alltoall``
    (Ulysses); ``cp_async`` overlaps each block's K/V exchange with compute (ring, allgather);
    ``cp_load_balance``: ``headtail`` (load-balanced causal, default), ``zigzag`` or ``none``.
    ``pp_layers_per_stage`` splits the decoder layers over the pipeline stages explicitly (one
    entry per stage: ``pp`` x the schedule's stages per rank, summing to the model's layer count; empty: the
    balanced TorchTitan split). ``pp_overlap_b_f``: run a microbatch's forward and another's backward on two
    compute threads (the schedule's ``overlap_b_f``; docs/pipeline.md). ``vl_encoder``: where a vision-language
    model's vision encoder runs under pipeline parallel: ``stage0`` (with the embedding and the first decoder
    layers on stage 0, the naive placement; any single-stage ``pp_schedule``) or ``mpipe`` (alone on stage 0
    ahead of the language-model stages, run by :class:`~hyper_parallel.pipeline.ScheduleMpipe` with
    microbatches balanced by image patches);
    ``vl_encoder_ahead``: Mpipe's ``encoder_ahead`` (the encoder forwards before its first backward; 0: all).
    ``vl_encoder_ranks``: under Mpipe, how many of the ``pp`` pipeline ranks hold the encoder stage (the first
    ones, data parallel over each microbatch's samples); the other ``pp - vl_encoder_ranks`` ranks hold one
    language-model stage each, so the pipeline has ``pp - vl_encoder_ranks + 1`` stages (docs/vl.md).
    ``pp_recompute_ahead`` (MindSpore only): each stage recomputes a microbatch's forward right before it blocks
    on the output gradient's receive, not after it arrives (``PipelineStage(recompute_ahead=True)``: the
    independent recompute schedule of the release notes; docs/mindspore.md)."""

    dp_replicate: int = 1
    dp_shard: int = -1
    cp: int = 1
    tp: int = 1
    pp: int = 1
    ep: int = 1
    etp: int = 1
    sequence_parallel: bool = True
    loss_parallel: bool = False
    cp_method: str = "ring"
    cp_async: bool = False
    cp_load_balance: str = "headtail"
    pp_schedule: str = "1F1B"
    pp_microbatches: int = 2
    pp_layers_per_stage: List[int] = field(default_factory=list)
    pp_overlap_b_f: bool = False
    vl_encoder: str = "stage0"
    vl_encoder_ahead: int = 0
    vl_encoder_ranks: int = 1
    pp_recompute_ahead: bool = False


@dataclass
class TrainingSection:
    """``[training]``: the loop. ``global_batch`` sequences of ``seq_len`` tokens per step, whatever the layout.
    ``compile``: ``torch.compile`` each decoder block (``compile_backend``: ``inductor`` or ``aot_eager``)."""

    steps: int = 100
    global_batch: int = 8
    seq_len: int = 128
    grad_accum: int = 1
    mixed_precision: str = "fp32"
    clip_grad_norm: float = 1.0
    compile: bool = False
    compile_backend: str = "inductor"
    deterministic: bool = True


@dataclass
class CheckpointSection:
    """``[checkpoint]``: ``hyper_parallel.checkpoint.CheckpointManager`` settings; ``resume`` loads the latest
    (a damaged one is skipped with a warning for the previous complete one), or step ``load_step`` when it is
    positive (pinned: a damaged one stops the run with exit status 2).
    A run that does not resume refuses a folder holding checkpoints unless ``overwrite`` (then they are deleted)."""

    enable: bool = False
    folder: str = ""
    interval: int = 50
    keep_latest_k: int = 2
    async_mode: str = "async"
    resume: bool = True
    overwrite: bool = False
    load_step: int = 0
    #: at the end of training write a Hugging Face folder (``export_folder``, default ``<out_dir>/hf``)
    export_hf: bool = False
    export_folder: str = ""


@dataclass
class DataSection:
    """``[data]``: corpus and tokenizer. ``source = "stdlib"`` reads the running Python's standard library.
    ``format``: ``"stream"`` (documents joined and cut into sequences: pretraining) or an SFT format (``"text"``,
    ``"prompt_completion"``, ``"messages"``: one sample per record, loss on completion / assistant tokens only;
    see ``hyper_parallel.trainer.sft``). ``packing`` joins SFT samples into rows (document-boundary masks,
    positions restarting per sample); ``bad_records``: ``"fail"`` or ``"skip"``; ``eval_paths``: held-out files
    (else ``eval_fraction`` of the records)."""

    source: str = "stdlib"
    paths: List[str] = field(default_factory=list)
    text_key: str = "text"
    tokenizer: str = "bpe"
    vocab_size: int = 1024
    max_corpus_mb: float = 2.0
    cache_dir: str = ""
    eval_fraction: float = 0.05
    format: str = "stream"
    packing: bool = True
    bad_records: str = "fail"
    prompt_key: str = "prompt"
    completion_key: str = "completion"
    messages_key: str = "messages"
    eval_paths: List[str] = field(default_factory=list)
    #: vision-language models: the Hugging Face processor folder ("hf:<folder>") and the per-image pixel budget
    #: (0: the processor's own min / max pixels)
    processor: str = ""
    max_pixels: int = 0
    min_pixels: int = 0


@dataclass
class MetricsSection:
    """``[metrics]``: logging, plots, evaluation, MoE monitor and profiler."""

    log_every: int = 1
    progress: bool = True
    jsonl: bool = True
    plot: bool = True
    tensorboard: bool = False
    eval_every: int = 0
    eval_batches: int = 2
    moe_monitor: bool = True
    profile_steps: List[int] = field(default_factory=list)
    #: Weights & Biases: "" (off), "offline" (a local run, no network) or "online"
    wandb: str = ""
    wandb_project: str = "hyper-parallel"


@dataclass
class FaultSection:
    """``[fault]``: fault injection for the restart test: rank ``kill_rank`` kills itself (SIGKILL) after step
    ``kill_at_step`` on the first attempt (``TORCHELASTIC_RESTART_COUNT`` 0) only; 0 disables it."""

    kill_at_step: int = 0
    kill_rank: int = 1


#: ``moe.load_balance`` values (``"flavor"``: keep the model flavor's; ``"none"``: no balancing)
MOE_LOAD_BALANCE = ("flavor", "expert_bias", "aux_loss", "expert_bias+aux_loss", "sinkhorn", "none")
MOE_AUX_LEVELS = ("flavor", "batch", "sequence")


@dataclass
class MoeSection:  # pylint: disable=too-many-instance-attributes
    """``[moe]``: load-balancing knobs of every MoE layer, overriding the model flavor's ``MoEConfig``
    (``"flavor"`` / a negative number keeps the flavor's value), and the MoE monitor's warning thresholds.

    ``load_balance``: ``expert_bias`` (DeepSeek-V3 auxiliary-loss-free bias, moved by ``bias_update_rate``
    after each step from the global token counts), ``aux_loss`` (Switch/GShard auxiliary loss of coefficient
    ``aux_loss_coeff`` on global-batch statistics, or per sequence with ``aux_loss_level = "sequence"``), both,
    or ``none``. ``z_loss_coeff``: router z-loss. ``capacity_factor``: 0 = dropless, else token dropping.
    The monitor warns once per layer when an expert stays below ``warn_min_load`` x the mean load for
    ``warn_steps`` steps, or max/mean exceeds ``warn_max_over_mean`` for ``warn_steps`` steps."""

    load_balance: str = "flavor"
    bias_update_rate: float = -1.0
    aux_loss_coeff: float = -1.0
    aux_loss_level: str = "flavor"
    z_loss_coeff: float = -1.0
    capacity_factor: float = -1.0
    warn_min_load: float = 0.25
    warn_max_over_mean: float = 1.5
    warn_steps: int = 5

    def overrides(self) -> Dict[str, Any]:
        """The ``MoEConfig`` fields this section sets (empty: the flavor's configuration as it is)."""
        out: Dict[str, Any] = {}
        if self.load_balance != "flavor":
            out["load_balance"] = None if self.load_balance == "none" else self.load_balance
        if self.aux_loss_level != "flavor":
            out["aux_loss_level"] = self.aux_loss_level
        for key in ("bias_update_rate", "aux_loss_coeff", "z_loss_coeff"):
            if getattr(self, key) >= 0:
                out[key] = getattr(self, key)
        if self.capacity_factor >= 0:
            out["capacity_factor"] = self.capacity_factor or None
        return out


@dataclass
class DemoSection:
    """``[demo]``: after training, resume from the checkpoint of ``resume_from`` and rerun ``resume_steps``
    steps next to the first run's losses, then train ``compare_steps`` steps on one process next to the
    distributed first losses (0 disables each). ``balance_from``: check that from this step on every MoE layer's
    expert load has max/mean <= ``balance_max_over_mean`` and no expert under ``balance_min_load`` x the mean
    (0 disables the check)."""

    resume_from: int = 0
    resume_steps: int = 0
    compare_steps: int = 0
    balance_from: int = 0
    balance_max_over_mean: float = 1.3
    balance_min_load: float = 0.25


@dataclass
class JobConfig:
    """The whole configuration of one run (one field per TOML section)."""

    job: JobSection = field(default_factory=JobSection)
    model: ModelSection = field(default_factory=ModelSection)
    parallelism: ParallelismSection = field(default_factory=ParallelismSection)
    training: TrainingSection = field(default_factory=TrainingSection)
    optimizer: Dict[str, Any] = field(default_factory=dict)
    activation: Dict[str, Any] = field(default_factory=dict)
    checkpoint: CheckpointSection = field(default_factory=CheckpointSection)
    data: DataSection = field(default_factory=DataSection)
    metrics: MetricsSection = field(default_factory=MetricsSection)
    fault: FaultSection = field(default_factory=FaultSection)
    moe: MoeSection = field(default_factory=MoeSection)
    demo: DemoSection = field(default_factory=DemoSection)
    source: str = "<defaults>"

    @property
    def checkpoint_folder(self) -> str:
        """Where checkpoints go (``[checkpoint] folder`` or ``<out_dir>/checkpoints``)."""
        return self.checkpoint.folder or os.path.join(self.job.out_dir, "checkpoints")


_SECTIONS = {f.name: f for f in dataclasses.fields(JobConfig) if f.name != "source"}
_FREE_SECTIONS = ("optimizer", "activation")  # validated by their features' parsers


def _type_name(tp: Any) -> str:
    return {int: "an int", float: "a number", bool: "true or false", str: "a string"}.get(tp, str(tp))


def _coerce(where: str, tp: Any, value: Any) -> Any:
    """``value`` checked against the annotation ``tp`` (int, float, bool, str, List[int], List[str])."""
    origin = typing.get_origin(tp)
    if origin in (list, List):
        (inner,) = typing.get_args(tp)
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list of {_type_name(inner)[2:]}s, got {value!r}")
        return [_coerce(f"{where}[{i}]", inner, v) for i, v in enumerate(value)]
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an int, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        return value
    raise ConfigError(f"{where}: unsupported field type {tp}")


def _unknown(where: str, key: str, known: Sequence[str]) -> ConfigError:
    close = difflib.get_close_matches(key, list(known), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return ConfigError(f"{where}: unknown key {key!r}{hint}; expected one of {sorted(known)}")


def _parse_section(src: str, name: str, cls: type, block: Any) -> Any:
    if not isinstance(block, Mapping):
        raise ConfigError(f"{src}: [{name}] must be a table, got {block!r}")
    hints = typing.get_type_hints(cls)
    known = [f.name for f in dataclasses.fields(cls)]
    values = {}
    for key, value in block.items():
        if key not in known:
            raise _unknown(f"{src}: [{name}]", key, known)
        values[key] = _coerce(f"{src}: {name}.{key}", hints[key], value)
    return cls(**values)


def _check_choice(src: str, key: str, value: str, choices: Sequence[str]) -> None:
    if value not in choices:
        raise ConfigError(f"{src}: {key}: expected one of {list(choices)}, got {value!r}")


def _check_positive(src: str, key: str, value: float, minimum: float = 1) -> None:
    if value < minimum:
        raise ConfigError(f"{src}: {key}: expected a value >= {minimum}, got {value!r}")


def _validate_parallelism(src: str, par: ParallelismSection) -> None:
    try:  # the one validator of the degrees (the product is checked against the world size at launch)
        parallel_degrees(par)
    except ValueError as exc:
        raise ConfigError(f"{src}: [parallelism]: {exc}") from None
    _check_positive(src, "parallelism.pp_microbatches", par.pp_microbatches)
    _validate_stage_split(src, par)
    _check_choice(src, "parallelism.cp_method", par.cp_method, CP_METHODS)
    _check_choice(src, "parallelism.cp_load_balance", par.cp_load_balance, CP_LOAD_BALANCE)
    _check_choice(src, "parallelism.vl_encoder", par.vl_encoder, VL_ENCODERS)
    _check_positive(src, "parallelism.vl_encoder_ahead", par.vl_encoder_ahead, 0)
    _check_positive(src, "parallelism.vl_encoder_ranks", par.vl_encoder_ranks, 1)


def pipeline_stages(par: ParallelismSection, pp: Optional[int] = None) -> int:
    """How many pipeline stages ``[parallelism]`` makes: ``pp`` x the schedule's stages per rank (1 for
    single-stage schedules such as 1F1B/GPipe, 2 for the interleaved and V ones); under Mpipe with an encoder
    stage on ``vl_encoder_ranks`` ranks, ``pp - vl_encoder_ranks + 1``."""
    from hyper_parallel.pipeline.schedules import SCHEDULES, canonical_schedule_name  # pure module
    kind = SCHEDULES[canonical_schedule_name(par.pp_schedule)]
    per_rank = kind.fixed_v or (2 if kind.multi else 1)
    shared = par.vl_encoder_ranks - 1 if par.vl_encoder == "mpipe" else 0  # ranks sharing the encoder stage
    return (par.pp if pp is None else pp) * per_rank - shared


def micro_batches(cfg: "JobConfig", pp: Optional[int] = None) -> int:
    """How many micro-batches one training step consumes the global batch in: ``training.grad_accum`` x
    ``parallelism.pp_microbatches`` under a pipeline (``pp > 1``), else ``training.grad_accum``. Per-micro-batch
    statistics (the MoE auxiliary loss) make a layout with ``n`` micro-batches equal to one process with
    ``grad_accum = n``. ``pp``: the pipeline degree when ``parallelism.pp`` is inferred (``-1``)."""
    par = cfg.parallelism
    return cfg.training.grad_accum * (par.pp_microbatches if (par.pp if pp is None else pp) > 1 else 1)


def _validate_stage_split(src: str, par: ParallelismSection) -> None:
    try:
        stages = pipeline_stages(par)
    except ValueError as exc:
        raise ConfigError(f"{src}: parallelism.pp_schedule: {exc}") from None
    split = par.pp_layers_per_stage
    if not split:
        return
    if par.pp == 1:
        raise ConfigError(f"{src}: parallelism.pp_layers_per_stage: {split} given but parallelism.pp = 1 (no "
                          f"pipeline); remove it or set pp")
    if any(n < 0 for n in split):
        raise ConfigError(f"{src}: parallelism.pp_layers_per_stage: expected non-negative ints, got {split}")
    if par.pp > 1 and len(split) != stages:
        how = (f"pp {par.pp} - vl_encoder_ranks {par.vl_encoder_ranks} + 1 (one encoder stage) = {stages}"
               if par.vl_encoder == "mpipe" and par.vl_encoder_ranks > 1 else
               f"pp {par.pp} x {stages // par.pp} stage(s) per rank ({par.pp_schedule}) = {stages}")
        raise ConfigError(f"{src}: parallelism.pp_layers_per_stage: {split} has {len(split)} entries; expected one "
                          f"per pipeline stage: {how}")


def intra_op_threads(setting: int, env: Mapping[str, str], cpu_count: Optional[int], local_ranks: int) -> int:
    """The intra-op thread count of one rank: ``job.threads`` when positive, else ``OMP_NUM_THREADS`` when it is
    a positive integer, else ``cpu_count // local_ranks`` (at least 1)."""
    if setting and setting > 0:
        return int(setting)
    omp = str(env.get("OMP_NUM_THREADS", "")).strip()
    if omp.isdigit() and int(omp) > 0:
        return int(omp)
    return max(1, (cpu_count or 1) // max(1, local_ranks))


def parallel_degrees(par: ParallelismSection, world_size: Optional[int] = None) -> Dict[str, int]:
    """The ``[parallelism]`` degrees checked by ``hyper_parallel.models.parallel_dims.check_degrees`` (with
    ``world_size``: the ``-1`` inferred and the product checked); a ``ValueError`` naming the degree."""
    from hyper_parallel.models.parallel_dims import DEGREE_NAMES, check_degrees  # pure module
    return check_degrees({k: getattr(par, k) for k in DEGREE_NAMES}, world_size)


def check_global_batch(cfg: JobConfig, degrees: Mapping[str, int]) -> None:
    """``training.global_batch`` splits evenly over the data-parallel ranks (``dp_replicate x dp_shard`` of
    ``degrees``), the ``training.grad_accum`` steps and, under pipeline parallel (``pp > 1``), each step's
    ``parallelism.pp_microbatches``; else a ``ValueError`` of one line naming the keys and the product.
    ``hp-train --check`` applies it on ``job.nproc``'s degrees, each trainer backend on the world it runs in."""
    t = cfg.training
    dp = degrees["dp_replicate"] * degrees["dp_shard"]
    micro = cfg.parallelism.pp_microbatches if degrees["pp"] > 1 else 1
    need = dp * t.grad_accum * micro
    if t.global_batch % need:
        parts = f"data-parallel degree dp_replicate*dp_shard = {dp} x training.grad_accum {t.grad_accum}"
        if degrees["pp"] > 1:
            parts += f" x parallelism.pp_microbatches {micro}"
        raise ValueError(f"training.global_batch = {t.global_batch} is not divisible by {parts} = {need}")


def _validate_backend_keys(cfg: JobConfig) -> None:
    """Keys one backend has: ``parallelism.pp_recompute_ahead`` (MindSpore pipeline stages)."""
    if cfg.parallelism.pp_recompute_ahead and cfg.job.backend != "mindspore":
        raise ConfigError(f"{cfg.source}: parallelism.pp_recompute_ahead: MindSpore pipeline stages only (they "
                          "recompute each microbatch's stage forward at its backward slot); torch stages keep their "
                          "graph. Set it to false or job.backend = 'mindspore'")


def _validate(cfg: JobConfig) -> JobConfig:
    src = cfg.source
    _check_choice(src, "job.backend", cfg.job.backend, BACKENDS)
    _check_positive(src, "job.nproc", cfg.job.nproc)
    _check_positive(src, "job.threads", cfg.job.threads, 0)
    _check_positive(src, "checkpoint.load_step", cfg.checkpoint.load_step, 0)
    _validate_parallelism(src, cfg.parallelism)
    _validate_backend_keys(cfg)
    tr = cfg.training
    for key in ("steps", "global_batch", "seq_len", "grad_accum"):
        _check_positive(src, f"training.{key}", getattr(tr, key))
    _check_choice(src, "training.mixed_precision", tr.mixed_precision, MIXED_PRECISION)
    _check_choice(src, "training.compile_backend", tr.compile_backend, COMPILE_BACKENDS)
    if tr.clip_grad_norm < 0:
        raise ConfigError(f"{src}: training.clip_grad_norm: expected >= 0 (0 disables clipping), got "
                          f"{tr.clip_grad_norm}")
    ck = cfg.checkpoint
    _check_positive(src, "checkpoint.interval", ck.interval)
    _check_positive(src, "checkpoint.keep_latest_k", ck.keep_latest_k, 0)
    _check_choice(src, "checkpoint.async_mode", ck.async_mode, ASYNC_MODES)
    da = cfg.data
    if da.source not in ("stdlib", "files"):
        raise ConfigError(f"{src}: data.source: expected 'stdlib' or 'files', got {da.source!r}")
    if da.source == "files" and not da.paths:
        raise ConfigError(f"{src}: data.paths: data.source = 'files' needs at least one path")
    _check_positive(src, "data.vocab_size", da.vocab_size, 260)
    if not 0 < da.max_corpus_mb:
        raise ConfigError(f"{src}: data.max_corpus_mb: expected a positive number, got {da.max_corpus_mb}")
    if not 0 < da.eval_fraction < 0.5:
        raise ConfigError(f"{src}: data.eval_fraction: expected a number in (0, 0.5), got {da.eval_fraction}")
    me = cfg.metrics
    _check_positive(src, "metrics.log_every", me.log_every)
    _check_positive(src, "metrics.eval_every", me.eval_every, 0)
    _check_positive(src, "metrics.eval_batches", me.eval_batches)
    _validate_moe(src, cfg.moe)
    for key in ("resume_from", "resume_steps", "compare_steps", "balance_from"):
        _check_positive(src, f"demo.{key}", getattr(cfg.demo, key), 0)
    if cfg.demo.resume_steps and not (ck.enable and 0 < cfg.demo.resume_from < tr.steps
                                      and cfg.demo.resume_from % ck.interval == 0):
        raise ConfigError(f"{src}: demo.resume_from: resuming needs checkpoint.enable and a step below "
                          f"training.steps that is a multiple of checkpoint.interval, got {cfg.demo.resume_from}")
    _validate_free_sections(cfg)
    from hyper_parallel.trainer.finetune import validate_finetune  # pure module
    try:
        validate_finetune(cfg)
    except ValueError as exc:
        raise ConfigError(f"{src}: {exc}") from None
    return cfg


def _validate_moe(src: str, moe: MoeSection) -> None:
    _check_choice(src, "moe.load_balance", moe.load_balance, MOE_LOAD_BALANCE)
    _check_choice(src, "moe.aux_loss_level", moe.aux_loss_level, MOE_AUX_LEVELS)
    if not 0 < moe.warn_min_load < 1:
        raise ConfigError(f"{src}: moe.warn_min_load: expected a fraction of the mean load in (0, 1), got "
                          f"{moe.warn_min_load}")
    _check_positive(src, "moe.warn_max_over_mean", moe.warn_max_over_mean, 1)
    _check_positive(src, "moe.warn_steps", moe.warn_steps)


def _validate_free_sections(cfg: JobConfig) -> None:
    from hyper_parallel.optim.config import OptimConfig  # pure modules
    from hyper_parallel.activation.config import parse_activation_config
    try:
        OptimConfig.parse(dict(cfg.optimizer, total_steps=cfg.optimizer.get("total_steps", cfg.training.steps)))
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{cfg.source}: [optimizer]: {exc}") from None
    if cfg.activation:
        try:
            parse_activation_config(cfg.activation)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{cfg.source}: [activation]: {exc}") from None


def parse_config(raw: Mapping[str, Any], source: str = "<dict>") -> JobConfig:
    """Validate a nested mapping (what a TOML file holds) into a :class:`JobConfig`."""
    values: Dict[str, Any] = {}
    raw = _with_init_from(raw, source)
    for name, block in raw.items():
        if name not in _SECTIONS:
            raise _unknown(f"{source}", name, list(_SECTIONS))
        if name in _FREE_SECTIONS:
            if not isinstance(block, Mapping):
                raise ConfigError(f"{source}: [{name}] must be a table, got {block!r}")
            values[name] = dict(block)
        else:
            values[name] = _parse_section(source, name, typing.get_type_hints(JobConfig)[name], block)
    return _validate(JobConfig(**values, source=source))


def _with_init_from(raw: Mapping[str, Any], source: str) -> Mapping[str, Any]:
    """With ``[model] init_from``: the model name from the folder's ``config.json`` when not given, the flavor
    ``"hf"`` (the size is the folder's); an explicit name must agree with the folder's."""
    model = raw.get("model")
    if not isinstance(model, Mapping) or not model.get("init_from"):
        return raw
    from hyper_parallel.trainer.finetune import resolve_init_from  # pure module
    try:
        return dict(raw, model=resolve_init_from(dict(model)))
    except ValueError as exc:
        raise ConfigError(f"{source}: {exc}") from None


def _literal(text: str) -> Any:
    """A CLI value as TOML would read it (``10``, ``1e-3``, ``true``, ``[1, 2]``), else the plain string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def parse_overrides(args: Sequence[str]) -> List[Tuple[str, Any]]:
    """``["--training.steps", "10", "--data.paths=[\"a\"]"]`` -> ``[("training.steps", 10), ...]``."""
    out: List[Tuple[str, Any]] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("--") or "." not in arg:
            raise ConfigError(f"command line: expected --section.key VALUE, got {arg!r}")
        key, eq, value = arg[2:].partition("=")
        if not eq:
            if i + 1 >= len(args):
                raise ConfigError(f"command line: --{key} needs a value")
            value = args[i + 1]
            i += 1
        out.append((key, _literal(value)))
        i += 1
    return out


def _apply_override(raw: Dict[str, Any], key: str, value: Any) -> None:
    section, _, name = key.partition(".")
    if section not in _SECTIONS:
        raise _unknown("command line", section, list(_SECTIONS))
    block = raw.setdefault(section, {})
    if section not in _FREE_SECTIONS:
        cls = typing.get_type_hints(JobConfig)[section]
        hints = typing.get_type_hints(cls)
        if name not in hints:
            raise _unknown(f"command line: --{section}.", name, list(hints))
        if hints[name] is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if hints[name] is str and not isinstance(value, str):
            value = str(value)
    block[name] = value


def load_config(path: Optional[str] = None, overrides: Sequence[Tuple[str, Any]] = ()) -> JobConfig:
    """Read the TOML file ``path`` (None: defaults only), apply ``overrides`` (dotted keys), validate."""
    raw: Dict[str, Any] = {}
    source = "<defaults>"
    if path is not None:
        source = os.fspath(path)
        try:
            with open(source, "rb") as fh:
                raw = tomllib.load(fh)
        except FileNotFoundError:
            raise ConfigError(f"{source}: no such config file") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{source}: not valid TOML: {exc}") from None
    for key, value in overrides:
        _apply_override(raw, key, value)
    return parse_config(raw, source + (" + command line" if overrides else ""))


def config_to_dict(cfg: JobConfig) -> Dict[str, Any]:
    """The configuration as plain data (for the metrics file and the checkpoint)."""
    return dataclasses.asdict(cfg)
