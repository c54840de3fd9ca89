# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Fine-tuning in the torch trainer backend: start from a Hugging Face folder, SFT batches, export to HF.

* :func:`build_from_hf`: the model config from the folder's ``config.json`` (``config_from_hf`` refuses what it
  cannot honour; DeepSeek MTP layers the checkpoint holds no weights for are not built, and the banner says
  so), the model built on the meta device (nothing allocated).
* :func:`load_from_hf`: after the parallel plan, every rank materialises only its local shards
  (``init_parameters(empty=True)``: allocated, no values drawn) and reads only the slices of the safetensors
  files they cover (``HuggingFaceStorageReader`` through DCP: ``safe_open(...).get_slice``); no rank holds the
  full model; every parameter must get a value from the folder. Works for every layout the plan
  produces (FSDP, TP, CP, EP, pipeline stages: a stage loads the keys it holds; a last stage with a tied head
  reads it from ``model.embed_tokens.weight``).
* :func:`sft_loss`: packed SFT rows (``input_ids``, ``labels``, ``position_ids``, ``doc_ids``): the document mask,
  positions restarting per document, CP sharding, and the loss summed over loss tokens and divided by the
  step's global count of loss tokens (so any layout equals one process).
* :func:`export_hf`: ``save_hf`` of every part plus ``config.json`` of the trained model's real config,
  ``generation_config.json`` and the tokenizer files.
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
from typing import Any, Dict, List, Tuple

import torch
import torch.distributed as dist

from hyper_parallel.checkpoint.hf import read_index
from hyper_parallel.trainer.hf_folder import TOKENIZER_FILES, parse_init_from, read_hf_config

__all__ = ["hf_model_config", "hf_adapter", "build_from_hf", "load_from_hf", "prepare_sft_step", "sft_inputs",
           "sft_loss", "sft_pp_loss", "sft_pp_pass", "export_hf", "GENERATION_KEYS"]

#: ``config.json`` fields an export carries over from the folder the run started from
GENERATION_KEYS = ("bos_token_id", "eos_token_id", "pad_token_id")


def hf_model_config(spec: Any, folder: str) -> Tuple[Any, List[str]]:
    """(our model config of ``folder``, notes for the banner)."""
    doc = read_hf_config(folder)
    mcfg = spec.state_dict_adapter.config_from_hf(doc)
    notes = _language_model_note(spec, folder, doc)
    mtp = getattr(mcfg, "num_nextn_predict_layers", 0)
    if mtp:
        first = f"model.layers.{mcfg.num_hidden_layers}."
        if not any(k.startswith(first) for k in read_index(folder)):
            mcfg = dataclasses.replace(mcfg, num_nextn_predict_layers=0)
            notes.append(f"config.json num_nextn_predict_layers={mtp} but the checkpoint holds no weights for "
                         f"{first}*: built without multi-token-prediction layers")
    return mcfg, notes


def _language_model_note(spec: Any, folder: str, doc: Dict[str, Any]) -> List[str]:
    """A text model started from a vision-language folder (``text_config``) reads its language model only: the
    banner line saying which tensors are not loaded."""
    if not hasattr(spec.state_dict_adapter, "for_hf_config") or not isinstance(doc.get("text_config"), dict):
        return []
    from hyper_parallel.models.qwen3_5.state_dict_adapter import VL_TEXT_PREFIX  # noqa  # pylint: disable=C0415
    skipped = [k for k in read_index(folder) if not k.startswith(VL_TEXT_PREFIX) and k != "lm_head.weight"]
    arch = (doc.get("architectures") or [doc["model_type"]])[0]
    return [f"{arch} folder: model {spec.name!r} reads its language model only ({VL_TEXT_PREFIX}*, lm_head.weight); "
            f"{len(skipped)} other tensors (the vision tower, model.visual.*) are skipped; export_hf writes a "
            f"text-only {spec.state_dict_adapter.hf_architecture} folder"]


def hf_adapter(spec: Any, model_config: Any, folder: str) -> Any:
    """The state-dict adapter that reads ``folder`` (``for_hf_config`` when the adapter has one: the language
    model of a vision-language checkpoint lives under another prefix)."""
    make = getattr(spec.state_dict_adapter, "for_hf_config", None)
    return make(model_config, read_hf_config(folder)) if make else spec.state_dict_adapter(model_config)


def build_from_hf(backend: Any, vocab_size: int) -> Any:
    """The model of ``[model] init_from`` on the meta device (``backend.hf_config`` / ``hf_notes`` set)."""
    from hyper_parallel.models import init_empty_weights  # pylint: disable=import-outside-toplevel
    from hyper_parallel.trainer.models import model_spec  # pylint: disable=import-outside-toplevel
    cfg = backend.config
    folder = parse_init_from(cfg.model.init_from)
    spec = model_spec(cfg.model.name)
    try:
        mcfg, notes = hf_model_config(spec, folder)
    except ValueError as exc:
        raise ValueError(f"model.init_from {folder}: {exc}") from None
    rows = getattr(mcfg, "text", mcfg).vocab_size  # a vision-language config: its language model's
    if vocab_size > rows:
        raise ValueError(f"model.init_from {folder}: the tokenizer has {vocab_size} tokens, the model's "
                         f"embedding {rows} rows")
    for key, value in getattr(backend.trainer.dataset, "model_overrides", {}).items():
        if getattr(mcfg, key, value) != value:  # a VL processor's special token ids must be the model's
            raise ValueError(f"model.init_from {folder}: config.json {key}={getattr(mcfg, key)!r} but the data's "
                             f"processor (data.processor) has {value!r}")
    backend.hf_config, backend.hf_notes = mcfg, notes
    with init_empty_weights():
        return spec.model_cls(mcfg)


def _part_state(part: Any, adapter: Any) -> Dict[str, Any]:
    """The HF-keyed state of one model part; a stage holding a tied head without the embedding reads the
    head from ``model.embed_tokens.weight`` (HF stores no ``lm_head.weight`` for tied embeddings)."""
    from hyper_parallel.checkpoint._torch.state_dict import get_model_state_dict  # noqa  # pylint: disable=C0415
    sd = get_model_state_dict(part)
    hf_sd = adapter.to_hf(sd)
    tied = getattr(adapter.model_config, "tie_word_embeddings", False)
    if tied and "lm_head.weight" in sd and "model.embed_tokens.weight" not in sd:
        hf_sd[getattr(adapter, "text_prefix", "model.") + "embed_tokens.weight"] = sd["lm_head.weight"]
    return hf_sd


def load_from_hf(backend: Any, parts: List[Any]) -> None:
    """Materialise each part's local shards and read its slices of the ``init_from`` folder."""
    import torch.distributed.checkpoint as dcp  # pylint: disable=import-outside-toplevel
    from torch.distributed.checkpoint import HuggingFaceStorageReader  # pylint: disable=import-outside-toplevel
    from hyper_parallel.checkpoint.api import StateDictOptions  # pylint: disable=import-outside-toplevel
    from hyper_parallel.checkpoint._torch.state_dict import set_model_state_dict  # noqa  # pylint: disable=C0415
    from hyper_parallel.models import init_parameters  # pylint: disable=import-outside-toplevel
    from hyper_parallel.trainer.models import model_spec  # pylint: disable=import-outside-toplevel
    folder = parse_init_from(backend.config.model.init_from)
    adapter = hf_adapter(model_spec(backend.config.model.name), backend.hf_config, folder)
    stored = read_index(folder)
    for part in parts:
        init_parameters(part, empty=True)  # only the local shards, uninitialised: every one is read below
        hf_sd = _part_state(part, adapter)
        missing = sorted(set(hf_sd) - set(stored))
        if missing:
            raise ValueError(f"model.init_from {folder}: the checkpoint lacks {len(missing)} tensors of the model, "
                             f"e.g. {missing[:3]}")
        dcp.load(hf_sd, storage_reader=HuggingFaceStorageReader(folder),
                 no_dist=not (backend.trainer.distributed and dist.is_initialized()))
        ours = adapter.from_hf(hf_sd)
        _check_every_parameter_read(part, ours, folder)
        set_model_state_dict(part, ours, options=StateDictOptions(strict=False))


def _check_every_parameter_read(part: Any, ours: Dict[str, Any], folder: str) -> None:
    """The parameters were allocated uninitialised: each one must come back from the folder (an adapter that
    maps no HF key to a parameter would leave it holding garbage)."""
    unread = sorted(name for name, _ in part.named_parameters() if name not in ours)
    if unread:
        raise ValueError(f"model.init_from {folder}: {len(unread)} parameters have no tensor in the folder "
                         f"through the {type(part).__name__} state-dict adapter, e.g. {unread[:3]}")


# ---------------------------------------------------------------------------------------------- SFT batches
def sft_inputs(rows: List[Dict[str, List[int]]]) -> Dict[str, torch.Tensor]:
    """Tensors of SFT rows: ``input_ids``, ``labels``, ``position_ids`` ``[b, s]`` and the boolean document
    mask ``[b, 1, s, s]``."""
    from hyper_parallel.models.llama3.model import document_mask  # pylint: disable=import-outside-toplevel
    t = {k: torch.tensor([r[k] for r in rows], dtype=torch.long)
         for k in ("input_ids", "labels", "position_ids", "doc_ids")}
    t["attention_mask"] = document_mask(t.pop("doc_ids"))
    return t


def prepare_sft_step(backend: Any, rows: List[Dict[str, List[int]]], train: bool) -> None:
    """Set ``backend._sft_norm``: (loss ranks x grad_accum when training) / the global count of loss tokens
    of this step, so summed per-token losses average over the whole global batch on any layout."""
    count = torch.tensor([sum(1 for r in rows for x in r["labels"] if x != -100)], dtype=torch.float64)
    ranks = 1
    group = getattr(backend, "_loss_group", None)
    if group is not None:
        dist.all_reduce(count, group=group)
        ranks = dist.get_world_size(group)
        dims = getattr(backend, "dims", None)
        count /= dims.cp if dims is not None else 1  # the CP ranks of one data-parallel rank hold the same rows
    accum = backend.config.training.grad_accum if train else 1
    backend._sft_norm = ranks * accum / max(1.0, count.item())  # pylint: disable=protected-access
    # a pipeline microbatch loss is scaled by 1 / pp_microbatches in the schedule's backward
    backend._sft_pp_norm = (ranks * backend.config.parallelism.pp_microbatches  # pylint: disable=protected-access
                            / max(1.0, count.item()))


def sft_loss(backend: Any, rows: List[Dict[str, List[int]]]) -> torch.Tensor:
    """This rank's share of the step loss for SFT rows (see :func:`prepare_sft_step`)."""
    t = sft_inputs(rows)
    ids, labels, pos = t["input_ids"], t["labels"], t["position_ids"]
    cp_mesh = getattr(backend, "_cp_mesh", None)
    if cp_mesh is not None:
        from hyper_parallel.cp import context_parallel_shard  # pylint: disable=import-outside-toplevel
        ids, labels, pos = context_parallel_shard(  # pylint: disable=unbalanced-tuple-unpacking
            cp_mesh, [ids, labels, pos], [1, 1, 1], load_balance=backend.config.parallelism.cp_load_balance)
    with backend._autocast():  # pylint: disable=protected-access
        logits = backend.model(ids, position_ids=pos, attention_mask=t["attention_mask"])
        total = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), labels.flatten(),
                                                  ignore_index=-100, reduction="sum")
    return total * backend._sft_norm  # pylint: disable=protected-access


def sft_pp_loss(backend: Any, out: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """A pipeline microbatch's share of the step loss for SFT rows (see :func:`prepare_sft_step`)."""
    total = torch.nn.functional.cross_entropy(out.float().flatten(0, 1), labels.flatten(), ignore_index=-100,
                                              reduction="sum")
    return total * backend._sft_pp_norm  # pylint: disable=protected-access


def sft_pp_pass(backend: Any, rows: List[Dict[str, List[int]]], train: bool) -> float:
    """One pipeline schedule pass over SFT rows: input ids to the first stage, labels to the last, positions and
    the document mask to every stage (``pass_kwargs_to_all``); the mean microbatch loss on the last stage's
    rank, else 0."""
    t = sft_inputs(rows)
    schedule = backend._schedule  # pylint: disable=protected-access
    for stage in schedule._stages:  # pylint: disable=protected-access
        stage.pass_kwargs_to_all = True
    losses: List[Any] = []
    run = schedule.step if train else schedule.eval
    backend._sft_pp = True  # pylint: disable=protected-access
    try:
        with backend._autocast():  # pylint: disable=protected-access
            first, last = backend._pp_first, backend._pp_last  # pylint: disable=protected-access
            run(t["input_ids"] if first else None, target=t["labels"] if last else None, losses=losses,
                return_outputs=False, position_ids=t["position_ids"], attention_mask=t["attention_mask"])
    finally:
        backend._sft_pp = False  # pylint: disable=protected-access
    return sum(float(x) for x in losses) / len(losses) if losses else 0.0


# ---------------------------------------------------------------------------------------------- export
def _source_folder(cfg: Any) -> str:
    """The HF folder the run's tokenizer (and generation settings) came from, or ""."""
    from hyper_parallel.trainer.finetune import tokenizer_spec  # pylint: disable=import-outside-toplevel
    spec = tokenizer_spec(cfg)
    return spec[3:] if spec.startswith("hf:") else ""


#: the files of a vision-language run's processor folder (``data.processor = "hf:<folder>"``) an export copies
PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json", "video_preprocessor_config.json",
                   "chat_template.json") + TOKENIZER_FILES


def _copy_processor(folder: str, cfg: Any) -> None:
    """A vision-language run's processor files next to the weights (``AutoProcessor.from_pretrained`` reads the
    export), unless the export already has them."""
    source = cfg.data.processor[3:] if cfg.data.processor.startswith("hf:") else ""
    for name in PROCESSOR_FILES if source else ():
        if os.path.isfile(os.path.join(source, name)) and not os.path.isfile(os.path.join(folder, name)):
            shutil.copyfile(os.path.join(source, name), os.path.join(folder, name))


def _generation_keys(source: str) -> Dict[str, Any]:
    """The :data:`GENERATION_KEYS` of ``source``'s ``config.json`` (top level, else its ``text_config``)."""
    if not os.path.isfile(os.path.join(source, "config.json")):
        return {}
    doc = read_hf_config(source)
    text = doc.get("text_config") if isinstance(doc.get("text_config"), dict) else {}
    return {k: doc.get(k, text.get(k)) for k in GENERATION_KEYS if k in doc or k in text}


def _write_side_files(folder: str, cfg: Any, hf_config: Dict[str, Any]) -> Dict[str, Any]:
    """Tokenizer (and processor) files and ``generation_config.json`` next to the weights; returns the
    config.json additions."""
    source = _source_folder(cfg)
    extra: Dict[str, Any] = {}
    if source:
        for name in TOKENIZER_FILES:
            if os.path.isfile(os.path.join(source, name)):
                shutil.copyfile(os.path.join(source, name), os.path.join(folder, name))
        extra = _generation_keys(source)
    elif cfg.data.tokenizer not in ("bpe", "") and os.path.isfile(cfg.data.tokenizer):
        shutil.copyfile(cfg.data.tokenizer, os.path.join(folder, "tokenizer.json"))
    gen = os.path.join(source, "generation_config.json") if source else ""
    if gen and os.path.isfile(gen):
        shutil.copyfile(gen, os.path.join(folder, "generation_config.json"))
    else:
        doc = {"_from_model_config": True, **{k: v for k, v in extra.items() if v is not None}}
        with open(os.path.join(folder, "generation_config.json"), "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=2)
    _copy_processor(folder, cfg)
    config = dict(hf_config, **extra)
    config["torch_dtype"] = "float32"
    return config


def export_hf(backend: Any, folder: str) -> Dict[str, str]:
    """Write the trained model as a Hugging Face folder (every rank calls it); returns the weight map."""
    from hyper_parallel.checkpoint._torch.hf import save_hf  # pylint: disable=import-outside-toplevel
    from hyper_parallel.trainer.models import model_spec  # pylint: disable=import-outside-toplevel
    cfg = backend.config
    parts = backend.model if isinstance(backend.model, list) else [backend.model]
    mcfg = backend.model_config
    adapter = model_spec(cfg.model.name).state_dict_adapter(mcfg)
    weight_map = save_hf(parts, folder, adapter)
    if backend.rank == 0:  # save_hf published the folder with config.json; add the rest next to it
        config = _write_side_files(folder, cfg, adapter.hf_config())
        with open(os.path.join(folder, "config.json"), "w", encoding="utf-8") as fh:
            json.dump(config, fh, indent=2, sort_keys=True)
    if dist.is_initialized():
        dist.barrier()
    return weight_map
