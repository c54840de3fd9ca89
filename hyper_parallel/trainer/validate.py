# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The one validation of a run that needs no rank: ``hp-train --check``, ``hp-train`` before it launches torchrun
and the composition matrix (``hyper_parallel.devtools.composition``) all call :func:`validate_job`.

It checks what :func:`hyper_parallel.trainer.config.load_config` cannot see from the file alone: the model name
and flavor (through the registry), the tokenizer and data paths (exist, readable, format), the degrees against the
world size, the global batch against data parallel x gradient accumulation x pipeline micro-batches, the layers
against the pipeline stages and the schedule's constraints, the heads against ``tp`` and ``cp``, the sequence
length against ``cp`` -- and the combinations the trainer refuses, listed once as data in :data:`REFUSALS`. Every
problem is a :class:`~hyper_parallel.trainer.config.ConfigError` whose one-line message names the key(s).

Lifting a refusal (once the combination works) is deleting its :class:`Refusal` entry. Imports no framework at
module level (the model registry imports the model package, which needs torch, when a model is checked).
"""
from __future__ import annotations

import importlib.util
import json
import os
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

from hyper_parallel.trainer.config import (ConfigError, JobConfig, check_global_batch, parallel_degrees,
                                          pipeline_stages)

__all__ = ["Refusal", "RunFacts", "REFUSALS", "refusals_of", "refuse", "validate_job", "run_facts"]

#: file types ``data.source = "files"`` reads without HF ``datasets`` / with it
_PLAIN_EXT = (".txt", ".py", ".md", ".rst", ".jsonl")
_DATASETS_EXT = (".parquet", ".csv", ".json")


@dataclass(frozen=True)
class RunFacts:
    """What a refusal rule looks at: the config, its degrees resolved on the world size, and the model config."""

    cfg: JobConfig
    degrees: Dict[str, int]
    model: Any

    @property
    def moe(self) -> bool:
        """Whether the model has MoE layers."""
        return getattr(self.model, "moe", None) is not None

    def __getitem__(self, degree: str) -> int:
        return self.degrees[degree]


@dataclass(frozen=True)
class Refusal:
    """A combination the trainer cannot run: the two config keys that conflict, when, and why (one line)."""

    first: str
    second: str
    applies: Callable[[RunFacts], bool]
    why: str


def _mtp_busy(f: RunFacts) -> bool:
    return bool(getattr(f.model, "num_nextn_predict_layers", 0)) and any(f[n] > 1 for n in ("tp", "ep", "pp", "cp"))


#: Every combination the trainer refuses, checked before any rank starts. Delete an entry to lift it.
REFUSALS: Tuple[Refusal, ...] = (
    Refusal("parallelism.cp", "parallelism.etp", lambda f: f.moe and f["cp"] > 1 and f["etp"] > 1,
            "with expert tensor parallelism a MoE model runs pp x dp_shard x tp x ep only: the [ep, tp] expert mesh "
            "has no cp dim (etp = 1 composes EP with CP)"),
    Refusal("parallelism.dp_replicate", "parallelism.etp", lambda f: f.moe and f["dp_replicate"] > 1 and f["etp"] > 1,
            "with expert tensor parallelism a MoE model runs pp x dp_shard x tp x ep only: the [ep, tp] expert mesh "
            "has no replicate (HSDP) dim (etp = 1 composes EP with HSDP)"),
    Refusal("parallelism.etp", "model.name", lambda f: f["etp"] > 1 and not f.moe,
            "expert tensor parallelism splits MoE experts' hidden dim; this model has no MoE layers"),
    Refusal("parallelism.etp", "parallelism.ep", lambda f: f.moe and f["etp"] > 1 and f["ep"] != f["dp_shard"],
            "expert tensor parallelism takes ep from dp_shard only and needs ep = dp_shard: an expert-FSDP dim "
            "(dp_shard / ep > 1) would make the expert mesh [efsdp, ep, etp] 3-D, which FSDP does not compose with"),
    Refusal("parallelism.ep", "model.name", lambda f: f["ep"] > 1 and not f.moe,
            "expert parallel splits MoE experts; this model has no MoE layers"),
    Refusal("parallelism.loss_parallel", "parallelism.tp", lambda f: f.cfg.parallelism.loss_parallel and f["tp"] == 1,
            "loss parallel splits the vocabulary over the TP ranks; it needs tp > 1"),
    Refusal("parallelism.pp_overlap_b_f", "parallelism.pp", lambda f: f.cfg.parallelism.pp_overlap_b_f and f["pp"] == 1,
            "overlap_b_f runs one microbatch's forward and another's backward of a pipeline schedule on two threads; "
            "it needs pp > 1"),
    Refusal("parallelism.pp_recompute_ahead", "parallelism.pp",
            lambda f: f.cfg.parallelism.pp_recompute_ahead and f["pp"] == 1,
            "recompute ahead moves a pipeline stage's recompute before its output gradient's receive; it needs pp > 1"),
    Refusal("parallelism.cp_async", "parallelism.cp_method", lambda f: f.cfg.parallelism.cp_async
            and f.cfg.parallelism.cp_method == "alltoall",
            "all-to-all (Ulysses) CP has no asynchronous variant; only ring and allgather overlap their exchange"),
    Refusal("training.compile", "parallelism.tp",
            lambda f: f.cfg.training.compile and f["tp"] > 1 and f.cfg.job.backend != "mindspore",
            "under TP the blocks compute on hyper_parallel DTensors dispatched in Python (__torch_function__), "
            "which TorchDynamo does not trace into a graph (the MindSpore backend compiles TP over each rank's "
            "shards)"),
    Refusal("training.compile", "model.name", lambda f: f.cfg.training.compile and f.moe,
            "MoE experts compute on hyper_parallel DTensors (their expert-parallel layout, even with ep = 1), "
            "which TorchDynamo does not trace (no rule for getset_descriptor.__get__), and route a data-dependent "
            "number of tokens per expert"),
    Refusal("model.flavor", "parallelism.pp", lambda f: bool(getattr(f.model, "tie_word_embeddings", False))
            and f["pp"] > 2,
            "tied embeddings with the first and last stage on different ranks need a 2-rank pipeline group"),
    Refusal("model.flavor", "parallelism", _mtp_busy,
            "the multi-token-prediction layers have no TP / EP / PP / CP plan yet; use FSDP / HSDP only"),
)


def refusals_of(facts: RunFacts) -> List[Refusal]:
    """The entries of :data:`REFUSALS` that apply to ``facts``."""
    return [r for r in REFUSALS if r.applies(facts)]


def _setting(cfg: JobConfig, key: str) -> str:
    """``key = value`` as the user wrote it (``model.name`` with its flavor)."""
    if "." not in key:
        return f"[{key}]"
    section, name = key.split(".", 1)
    value = getattr(getattr(cfg, section), name)
    if key == "model.name":
        return f"model.name = {value!r} (flavor {cfg.model.flavor!r})"
    if isinstance(value, bool):
        return f"{key} = {str(value).lower()}"
    return f"{key} = {value!r}"


def _model_config(cfg: JobConfig) -> Any:
    from hyper_parallel.trainer.models import build_model_config, model_spec  # noqa  # pylint: disable=C0415
    from hyper_parallel.trainer.hf_folder import HF_FLAVOR, parse_init_from, read_hf_config  # noqa  # pylint: disable=C0415
    try:
        backend = "mindspore" if cfg.job.backend == "mindspore" else "torch"
        if cfg.model.init_from and cfg.model.flavor == HF_FLAVOR:  # the shapes of the folder's config.json
            folder = parse_init_from(cfg.model.init_from)
            model = model_spec(cfg.model.name, backend).state_dict_adapter.config_from_hf(read_hf_config(folder))
        else:
            model = build_model_config(cfg.model.name, cfg.model.flavor, backend, vocab_size=cfg.data.vocab_size,
                                       max_position_embeddings=max(cfg.training.seq_len, 128))
        return getattr(model, "text", model)  # a vision-language model: the language model's sizes
    except ValueError as exc:
        raise ConfigError(f"{cfg.source}: {exc}") from None


def _check_file(src: str, key: str, path: str) -> None:
    if not os.path.exists(path):
        raise ConfigError(f"{src}: {key}: {path!r} does not exist")
    if not os.access(path, os.R_OK):
        raise ConfigError(f"{src}: {key}: {path!r} is not readable")


def _check_tokenizer(cfg: JobConfig) -> None:
    spec = cfg.data.tokenizer
    if spec == "bpe":
        return
    if spec.startswith("hf:"):  # a Hugging Face folder's tokenizer files
        from hyper_parallel.trainer.hf_folder import parse_init_from, tokenizer_files  # noqa  # pylint: disable=C0415
        try:
            folder = parse_init_from(spec, "data.tokenizer")
        except ValueError as exc:
            raise ConfigError(f"{cfg.source}: {exc}") from None
        if not tokenizer_files(folder):
            raise ConfigError(f"{cfg.source}: data.tokenizer: {folder!r} holds no tokenizer files (expected "
                              f"tokenizer.json or tokenizer_config.json with its vocabulary)")
        return
    _check_file(cfg.source, "data.tokenizer", spec)
    try:
        with open(spec, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{cfg.source}: data.tokenizer: {spec!r} is not a tokenizer.json file ({exc})") from None
    if not isinstance(doc, dict) or "model" not in doc:
        raise ConfigError(f"{cfg.source}: data.tokenizer: {spec!r} is not a tokenizer.json file (no 'model' entry); "
                          f"expected 'bpe' or a Hugging Face tokenizers file")


def _record_fields(cfg: JobConfig) -> Dict[str, type]:
    """The fields a record of ``data.format`` needs, with their JSON types (the config key names each)."""
    da = cfg.data
    if da.format == "prompt_completion":
        return {da.prompt_key: str, da.completion_key: str}
    if da.format == "messages":
        return {da.messages_key: list}
    return {da.text_key: str}  # "stream" and "text"


def _check_jsonl(cfg: JobConfig, path: str) -> None:
    """The first record of a jsonl file parses and has the fields of ``data.format`` (the loader names a bad
    record further in with its line, as ``data.bad_records`` says)."""
    need = _record_fields(cfg)
    with open(path, encoding="utf-8", errors="replace") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as exc:
                raise ConfigError(f"{cfg.source}: data.paths: {path}:{lineno}: not valid JSON ({exc})") from None
            for key, kind in need.items():
                if not isinstance(row, dict) or not isinstance(row.get(key), kind):
                    raise ConfigError(f"{cfg.source}: data.paths: {path}:{lineno}: expected an object with a "
                                      f"{'string' if kind is str else 'list'} field {key!r} (data.format = "
                                      f"{cfg.data.format!r})")
            return


def _data_files(cfg: JobConfig) -> List[str]:
    files: List[str] = []
    for path in cfg.data.paths:
        _check_file(cfg.source, "data.paths", path)
        if os.path.isdir(path):
            files.extend(sorted(os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs))
        else:
            files.append(path)
    if not files:
        raise ConfigError(f"{cfg.source}: data.paths: no files in {cfg.data.paths}")
    return files


def _check_data(cfg: JobConfig) -> None:
    if cfg.data.source != "files":
        return
    if cfg.data.processor:  # image-text records, and the processor folder, are checked as they are read (a
        return              # missing file is named then, with its line): the data may be written after the check
    for path in _data_files(cfg):
        ext = os.path.splitext(path)[1].lower()
        if ext not in _PLAIN_EXT + _DATASETS_EXT:
            raise ConfigError(f"{cfg.source}: data.paths: {path}: unsupported file type {ext!r}; expected one of "
                              f"{list(_PLAIN_EXT + _DATASETS_EXT)}")
        if not os.access(path, os.R_OK):
            raise ConfigError(f"{cfg.source}: data.paths: {path!r} is not readable")
        if ext in _DATASETS_EXT and importlib.util.find_spec("datasets") is None:
            raise ConfigError(f"{cfg.source}: data.paths: {path}: reading {ext} files needs HF datasets "
                              f"(pip install datasets)")
        if ext == ".jsonl":
            _check_jsonl(cfg, path)


def _check_vision(cfg: JobConfig, facts: RunFacts) -> None:
    from hyper_parallel.trainer.vl_config import (is_vision_model, validate_vl_encoder_group,  # noqa  # pylint: disable=C0415
                                                  validate_vl_layout, validate_vl_pipeline)
    par = cfg.parallelism
    if not is_vision_model(cfg.model.name):
        changed = [k for k, v in (("vl_encoder", par.vl_encoder != "stage0"),
                                  ("vl_encoder_ahead", par.vl_encoder_ahead),
                                  ("vl_encoder_ranks", par.vl_encoder_ranks != 1)) if v]
        if changed:
            key = changed[0]
            raise ConfigError(f"{cfg.source}: parallelism.{key}: only for a vision-language model (model.name = "
                              f"{cfg.model.name!r} has no vision encoder); remove it")
        return
    try:
        validate_vl_layout(cfg, facts.degrees)
        validate_vl_pipeline(par, facts.model.num_hidden_layers)
        validate_vl_encoder_group(cfg, facts.degrees, facts.model)
    except ValueError as exc:
        raise ConfigError(f"{cfg.source}: {exc}") from None


def _check_batch(cfg: JobConfig, d: Dict[str, int]) -> None:
    try:
        check_global_batch(cfg, d)
    except ValueError as exc:
        raise ConfigError(f"{cfg.source}: {exc}") from None


def _check_pipeline(cfg: JobConfig, d: Dict[str, int], model: Any) -> None:
    if d["pp"] == 1:
        return
    from hyper_parallel.pipeline.schedules import SCHEDULES, canonical_schedule_name, check_constraints  # noqa
    from hyper_parallel.pipeline.split import check_layers_per_stage, split_layers  # noqa  # pylint: disable=C0415
    par = cfg.parallelism
    stages = pipeline_stages(par, d["pp"])
    kind = SCHEDULES[canonical_schedule_name(par.pp_schedule)]
    try:
        check_constraints(kind.name, d["pp"], par.pp_microbatches, kind.fixed_v or (2 if kind.multi else 1))
    except ValueError as exc:
        raise ConfigError(f"{cfg.source}: parallelism.pp_schedule = {par.pp_schedule!r} with parallelism.pp = "
                          f"{d['pp']} and parallelism.pp_microbatches = {par.pp_microbatches}: {exc}") from None
    layers = model.num_hidden_layers
    from hyper_parallel.trainer.vl_config import is_vision_model  # pylint: disable=import-outside-toplevel
    if is_vision_model(cfg.model.name):  # the vision encoder's placement decides the split: _check_vision
        return
    try:
        if par.pp_layers_per_stage:
            check_layers_per_stage(par.pp_layers_per_stage, layers, stages, what="parallelism.pp_layers_per_stage")
        else:
            split_layers(layers, stages)
    except ValueError as exc:
        raise ConfigError(f"{cfg.source}: parallelism.pp = {d['pp']} ({par.pp_schedule}: {stages} stages) vs "
                          f"{cfg.model.name}/{cfg.model.flavor}'s {layers} layers: {exc}") from None


def _divides(cfg: JobConfig, key: str, degree: int, sizes: Dict[str, int]) -> None:
    for what, value in sizes.items():
        if value % degree:
            raise ConfigError(f"{cfg.source}: {key} = {degree} does not divide {cfg.model.name}/{cfg.model.flavor}'s "
                              f"{what} = {value}")


def _check_heads(cfg: JobConfig, d: Dict[str, int], model: Any) -> None:
    tp, cp = d["tp"], d["cp"]
    heads = model.num_attention_heads
    if tp > 1:
        sizes = {"num_attention_heads": heads, "num_key_value_heads": model.num_key_value_heads,
                 "vocab_size (data.vocab_size)": model.vocab_size}
        if getattr(model, "moe", None) is None or getattr(model, "first_k_dense_layers", 0):
            sizes["intermediate_size"] = model.intermediate_size
        _divides(cfg, "parallelism.tp", tp, sizes)
    par = cfg.parallelism
    if cp > 1 and par.cp_method == "alltoall" and (heads // tp) % cp:
        raise ConfigError(f"{cfg.source}: parallelism.cp_method = 'alltoall' (Ulysses) with parallelism.cp = {cp}: "
                          f"the {heads // tp} query heads per TP rank are not divisible by cp; use 'ring' or "
                          f"'allgather'")
    if cp > 1:
        multiple = cp * (1 if par.cp_load_balance == "none" else 2)
        if cfg.training.seq_len % multiple:
            raise ConfigError(f"{cfg.source}: training.seq_len = {cfg.training.seq_len} is not divisible by {multiple} "
                              f"(parallelism.cp = {cp} with cp_load_balance {par.cp_load_balance!r})")


def _check_experts(cfg: JobConfig, d: Dict[str, int], model: Any) -> None:
    moe = getattr(model, "moe", None)
    if moe is not None and d["ep"] > 1 and moe.num_experts % d["ep"]:
        raise ConfigError(f"{cfg.source}: parallelism.ep = {d['ep']} does not divide {cfg.model.name}/"
                          f"{cfg.model.flavor}'s {moe.num_experts} experts")


def run_facts(cfg: JobConfig, world_size: Optional[int] = None) -> RunFacts:
    """The degrees resolved on ``world_size`` (default ``job.nproc``) and the model config; ``ConfigError`` when
    either is wrong."""
    world = cfg.job.nproc if world_size is None else world_size
    par = cfg.parallelism
    try:
        degrees = parallel_degrees(par, world)
    except ValueError as exc:
        raise ConfigError(f"{cfg.source}: [parallelism] on job.nproc = {world} ranks: {exc}") from None
    return RunFacts(cfg, degrees, _model_config(cfg))


def refuse(facts: RunFacts, first: Optional[str] = None) -> None:
    """Raise a ``ConfigError`` (one line: the two conflicting settings and why) for the first entry of
    :data:`REFUSALS` that applies to ``facts``; with ``first`` (a config key) only the entries refusing that key
    count. ``validate_job`` applies them all before a launch; the trainer backends apply theirs again on the world
    they run in (``training.compile``: the torch backend)."""
    found = [r for r in refusals_of(facts) if first is None or r.first == first]
    if found:
        r, cfg = found[0], facts.cfg
        second = r.second
        if second == "parallelism":  # the first busy degree
            second = next(f"parallelism.{n}" for n in ("tp", "ep", "pp", "cp") if facts[n] > 1)
        raise ConfigError(f"{cfg.source}: {_setting(cfg, r.first)} conflicts with {_setting(cfg, second)}: {r.why}")


def validate_job(cfg: JobConfig, world_size: Optional[int] = None) -> RunFacts:
    """Everything about ``cfg`` that needs no rank (see the module docstring); returns the :class:`RunFacts`,
    raises ``ConfigError`` (one line naming the key or the two conflicting keys) on the first problem."""
    if cfg.job.backend == "mindspore":  # what the MindSpore trainer path cannot do, named first
        from hyper_parallel.trainer._mindspore.launch import check_mindspore_config  # noqa  # pylint: disable=C0415
        check_mindspore_config(cfg)
    facts = run_facts(cfg, world_size)
    _check_vision(cfg, facts)
    _check_tokenizer(cfg)
    _check_data(cfg)
    _check_batch(cfg, facts.degrees)
    _check_pipeline(cfg, facts.degrees, facts.model)
    _check_heads(cfg, facts.degrees, facts.model)
    _check_experts(cfg, facts.degrees, facts.model)
    refuse(facts)
    return facts
