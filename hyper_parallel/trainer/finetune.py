# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Fine-tuning keys of the trainer config, resolved and validated (pure Python: no framework).

``[model] init_from = "hf:<folder>"`` (name from the folder's ``config.json``, flavor ``"hf"``), ``[data]``
SFT formats (``format``, ``packing``, ``bad_records``) and ``[checkpoint] export_hf``. Kept apart from
``config.py`` so the fine-tuning rules live in one place.
"""
from __future__ import annotations

from typing import Any, Dict

from hyper_parallel.trainer.hf_folder import HF_FLAVOR, parse_init_from, resolve_model

__all__ = ["SFT_FORMATS", "DATA_FORMATS", "BAD_RECORDS", "resolve_init_from", "validate_finetune", "tokenizer_spec",
           "load_text_tokenizer", "prepare_sft", "banner_lines", "export_folder", "schedule_note", "check_resumable"]

SFT_FORMATS = ("text", "prompt_completion", "messages")
DATA_FORMATS = ("stream",) + SFT_FORMATS
BAD_RECORDS = ("fail", "skip")


def resolve_init_from(model: Dict[str, Any]) -> Dict[str, Any]:
    """The ``[model]`` block with ``name`` taken from the ``init_from`` folder's ``config.json`` when not given
    and ``flavor`` set to ``"hf"``; a ``ValueError`` naming the key when they disagree. The text model of a
    vision-language folder's language half (:data:`~hyper_parallel.models.registry.TEXT_OF_VISION`: ``qwen3_5``
    for a ``Qwen3_5ForConditionalGeneration`` folder) agrees with it: it trains the language model only. A
    folder that does not exist yet (a config shipped before ``make finetune`` writes the folder) is accepted
    when ``name`` is given; the run then fails at setup naming the folder."""
    import os  # pylint: disable=import-outside-toplevel
    value = model["init_from"]
    given = model.get("name")
    flavor = model.get("flavor")
    if flavor is not None and flavor != HF_FLAVOR:
        raise ValueError(f"model.flavor: {flavor!r} given with model.init_from; the size comes from the folder's "
                         f"config.json (leave model.flavor out)")
    if isinstance(value, str) and value.startswith("hf:") and given and not os.path.exists(value[3:]):
        return dict(model, flavor=HF_FLAVOR)
    folder = parse_init_from(value)
    name, doc = resolve_model(folder)
    from hyper_parallel.models.registry import TEXT_OF_VISION  # pylint: disable=import-outside-toplevel
    if given is not None and given == TEXT_OF_VISION.get(name):  # the language model of a VL folder
        return dict(model, flavor=HF_FLAVOR)
    if given is not None and given not in (name, "llama" if name == "llama3" else name):
        also = f" or {TEXT_OF_VISION[name]!r} (its language model only)" if name in TEXT_OF_VISION else ""
        raise ValueError(f"model.name: {given!r} given, but model.init_from {folder}/config.json is model_type "
                         f"{doc['model_type']!r} ({name!r}{also}); leave model.name out or make them agree")
    return dict(model, name=name, flavor=HF_FLAVOR)


def validate_finetune(cfg: Any) -> None:
    """Check the fine-tuning keys of a parsed ``JobConfig`` (a ``ValueError`` naming the key; ``config.py``
    reports it as a ``ConfigError`` naming the file)."""
    da = cfg.data
    if da.format not in DATA_FORMATS:
        raise ValueError(f"data.format: expected one of {list(DATA_FORMATS)}, got {da.format!r}")
    if da.bad_records not in BAD_RECORDS:
        raise ValueError(f"data.bad_records: expected one of {list(BAD_RECORDS)}, got {da.bad_records!r}")
    if da.format != "stream" and da.source != "files":
        raise ValueError(f"data.format = {da.format!r} reads records from data.paths: set data.source = "
                          f"'files'")
    from hyper_parallel.trainer.vl_config import is_vision_model, validate_vl_data  # pylint: disable=C0415
    if is_vision_model(cfg.model.name):  # its layouts: validate.validate_job
        validate_vl_data(cfg)
        return
    if da.processor:
        raise ValueError(f"data.processor: model {cfg.model.name!r} is not a vision-language model; remove it")
    if da.format == "messages" and not cfg.model.init_from and not da.tokenizer.startswith("hf:"):
        raise ValueError("data.format = 'messages' renders conversations with a tokenizer's chat "
                         "template: set model.init_from = 'hf:<folder>' or data.tokenizer = 'hf:<folder>'")
    if da.format != "stream" and getattr(cfg.parallelism, "loss_parallel", False):
        raise ValueError("parallelism.loss_parallel: not with SFT data (data.format = "
                         f"{da.format!r}): the SFT loss sums over loss tokens of whole logits; set it to false")
    _validate_outputs(cfg)


def _validate_outputs(cfg: Any) -> None:
    """The export / tracker / backend keys of :func:`validate_finetune`."""
    da = cfg.data
    if cfg.checkpoint.export_folder and not cfg.checkpoint.export_hf:
        raise ValueError("checkpoint.export_folder given but checkpoint.export_hf is false")
    if cfg.metrics.wandb not in ("", "offline", "online"):
        raise ValueError(f"metrics.wandb: expected '', 'offline' or 'online', got {cfg.metrics.wandb!r}")
    if (cfg.model.init_from or cfg.checkpoint.export_hf or da.format != "stream") and cfg.job.backend != "torch":
        raise ValueError(f"model.init_from / checkpoint.export_hf / SFT data.format run on job.backend = "
                          f"'torch', got {cfg.job.backend!r}")


def tokenizer_spec(cfg: Any) -> str:
    """``data.tokenizer``, or the ``init_from`` folder's (``"hf:<folder>"``) when it is the default ``"bpe"``:
    a model started from a folder reads text with that folder's tokenizer."""
    if cfg.model.init_from and cfg.data.tokenizer == "bpe":
        return cfg.model.init_from
    return cfg.data.tokenizer


def load_text_tokenizer(cfg: Any) -> Any:
    """The :class:`hyper_parallel.trainer.tokenizer.TextTokenizer` of an SFT run: an HF folder's
    (``hf:<folder>``) or a ``tokenizer.json`` file (its ``<|endoftext|>`` as EOS)."""
    from hyper_parallel.trainer.tokenizer import load_hf_tokenizer, wrap_tokenizers  # noqa  # pylint: disable=C0415
    spec = tokenizer_spec(cfg)
    if spec.startswith("hf:"):
        return load_hf_tokenizer(spec[3:])
    if spec == "bpe":
        raise ValueError(f"data.format = {cfg.data.format!r}: SFT needs the model's tokenizer: set model.init_from "
                         f"= 'hf:<folder>', data.tokenizer = 'hf:<folder>' or a tokenizer.json path")
    from tokenizers import Tokenizer  # pylint: disable=import-outside-toplevel
    from hyper_parallel.trainer.data import EOS  # pylint: disable=import-outside-toplevel
    return wrap_tokenizers(Tokenizer.from_file(spec), eos=EOS, source=spec)


def prepare_sft(cfg: Any) -> Any:
    """The :class:`hyper_parallel.trainer.sft.SFTDataset` of ``[data]`` (format, packing, bad records)."""
    from hyper_parallel.trainer.data import _expand_paths  # pylint: disable=import-outside-toplevel
    from hyper_parallel.trainer.sft import build_sft_dataset  # pylint: disable=import-outside-toplevel
    d = cfg.data
    tok = load_text_tokenizer(cfg)
    keys = {"text": d.text_key, "prompt": d.prompt_key, "completion": d.completion_key, "messages": d.messages_key}
    ds = build_sft_dataset(_expand_paths(d.paths), _expand_paths(d.eval_paths) if d.eval_paths else [], tok,
                           fmt=d.format, seq_len=cfg.training.seq_len, packing=d.packing, bad_records=d.bad_records,
                           eval_fraction=d.eval_fraction, keys=keys)
    ds.tokenizer = tok
    return ds


def export_folder(cfg: Any) -> str:
    """Where ``[checkpoint] export_hf`` writes (``export_folder`` or ``<out_dir>/hf``)."""
    import os  # pylint: disable=import-outside-toplevel
    return cfg.checkpoint.export_folder or os.path.join(cfg.job.out_dir, "hf")


def banner_lines(trainer: Any) -> list:
    """What the run banner says about fine-tuning: the weights' folder, the tokenizer file, the SFT data."""
    cfg, out = trainer.config, []
    if cfg.model.init_from:
        out.append(f"init_from {cfg.model.init_from}: each rank read only its shards of the safetensors files")
        out += [f"  note: {n}" for n in getattr(trainer.backend, "hf_notes", [])]
    tok = getattr(trainer.dataset, "tokenizer", None)
    spec = tokenizer_spec(cfg)
    if tok is not None:
        out.append(f"tokenizer {tok.source}")
    elif spec.startswith("hf:"):
        from hyper_parallel.trainer.hf_folder import tokenizer_file  # pylint: disable=import-outside-toplevel
        out.append(f"tokenizer {tokenizer_file(spec[3:])} (tokenizers)")
    proc = getattr(trainer.dataset, "processor", None)
    if proc is not None:
        out.append(f"processor {proc.folder}: {getattr(trainer.dataset, 'images', 0)} training images, "
                   f"{proc.size['shortest_edge']}..{proc.size['longest_edge']} pixels each")
    stats = getattr(trainer.dataset, "stats", None)
    if stats is not None:
        out.append(f"SFT data ({cfg.data.format}, packing {'on' if cfg.data.packing else 'off'}): {stats.summary()}")
    return out


def schedule_note(saved_steps: Any, steps: int, step: int) -> str:
    """The resume banner's line on the LR schedule: the checkpoint's schedule length against this run's."""
    if saved_steps is None:
        return (f"LR schedule: {steps} steps (the checkpoint does not record its schedule length); it continues "
                f"at step {step}")
    if int(saved_steps) == steps:
        return f"LR schedule: unchanged ({steps} steps), continuing at step {step}"
    return (f"LR schedule CHANGED: the checkpoint was trained on a {saved_steps}-step schedule, this run uses {steps} "
            f"steps (training.steps / optimizer.total_steps); from step {step} the LR follows the {steps}-step "
            f"curve. Set optimizer.total_steps = {saved_steps} to keep the original schedule")


def check_resumable(path: str, states: list) -> None:
    """A checkpoint to resume from must hold every state of the run; a folder with the model only (``hp-ckpt
    convert``'s output) is refused with the way to start from its weights instead."""
    import os  # pylint: disable=import-outside-toplevel
    from hyper_parallel.checkpoint.cli import summarize  # pylint: disable=import-outside-toplevel
    if not os.path.isdir(path):
        return
    s = summarize(path)
    tops = {name.split(".")[0] for name in list(s["tensors"]) + list(s["objects"])}
    missing = sorted(set(states) - tops)
    if missing and "model" in tops:
        raise ValueError(f"checkpoint {path} holds the model weights only (no {', '.join(missing)} state; written by "
                         f"hp-ckpt convert?), so a run cannot resume from it: to start training from these weights, "
                         f"convert them to a Hugging Face folder (hp-ckpt convert {path} DIR --to hf --adapter ...) "
                         f"and set model.init_from = 'hf:DIR' with checkpoint.resume = false")
