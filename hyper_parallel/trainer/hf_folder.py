# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""A Hugging Face model folder as the trainer sees it (pure Python: JSON only, no framework).

``[model] init_from = "hf:<folder>"`` names a folder written by ``save_pretrained`` (or ``hp-ckpt convert --to
hf``): ``config.json`` (its ``model_type`` picks the model through
:data:`hyper_parallel.models.registry.HF_MODEL_TYPES`, its fields the size through the model's
``state_dict_adapter.config_from_hf``; ``[model] name`` may instead name the text model of a
vision-language folder, :data:`hyper_parallel.models.registry.TEXT_OF_VISION`), ``model.safetensors`` or
sharded ``model-*.safetensors`` with ``model.safetensors.index.json``, and the tokenizer files
(``tokenizer.json``, ``tokenizer_config.json`` with the chat template, ``generation_config.json``).
"""
from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional, Tuple

__all__ = ["HF_PREFIX", "TOKENIZER_FILES", "parse_init_from", "read_hf_config", "resolve_model", "tokenizer_file",
           "tokenizer_files", "read_tokenizer_config", "HF_FLAVOR"]

HF_PREFIX = "hf:"
#: ``[model] flavor`` of a model whose size comes from an HF folder's ``config.json``
HF_FLAVOR = "hf"
#: the files an export copies next to the weights (those present)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                   "tokenizer.model", "vocab.json", "merges.txt", "added_tokens.json")


def parse_init_from(value: str, where: str = "model.init_from") -> str:
    """The folder of ``"hf:<folder>"``; a ``ValueError`` naming ``where`` for anything else."""
    if not isinstance(value, str) or not value.startswith(HF_PREFIX) or not value[len(HF_PREFIX):]:
        raise ValueError(f"{where}: expected 'hf:<folder>' (a Hugging Face model folder), got {value!r}")
    folder = value[len(HF_PREFIX):]
    if not os.path.isdir(folder):
        raise ValueError(f"{where}: {folder!r} is not a folder")
    return folder


def read_hf_config(folder: str) -> Dict[str, Any]:
    """``<folder>/config.json`` as a dict (errors name the file)."""
    path = os.path.join(folder, "config.json")
    if not os.path.isfile(path):
        raise ValueError(f"{folder}: no config.json (not a Hugging Face model folder)")
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("model_type"), str):
        raise ValueError(f"{path}: expected an object with a string 'model_type'")
    return doc


def resolve_model(folder: str) -> Tuple[str, Dict[str, Any]]:
    """(our model name, the ``config.json`` dict) of an HF folder."""
    from hyper_parallel.models.registry import model_for_hf_type
    doc = read_hf_config(folder)
    try:
        return model_for_hf_type(doc["model_type"]), doc
    except KeyError as exc:
        raise ValueError(f"{os.path.join(folder, 'config.json')}: {exc.args[0]}") from None


def tokenizer_file(folder: str) -> Optional[str]:
    """``<folder>/tokenizer.json`` when present."""
    path = os.path.join(folder, "tokenizer.json")
    return path if os.path.isfile(path) else None


def tokenizer_files(folder: str) -> List[str]:
    """The tokenizer files of :data:`TOKENIZER_FILES` present in ``folder`` (paths)."""
    return [os.path.join(folder, n) for n in TOKENIZER_FILES if os.path.isfile(os.path.join(folder, n))]


def read_tokenizer_config(folder: str) -> Dict[str, Any]:
    """``<folder>/tokenizer_config.json`` (empty dict when absent)."""
    path = os.path.join(folder, "tokenizer_config.json")
    if not os.path.isfile(path):
        return {}
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)
