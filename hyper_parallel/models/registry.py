# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The model registry: ``get_model_spec("llama3")`` -> :class:`~hyper_parallel.models.spec.ModelSpec`.

Built-in models are listed by module name and imported on first use (each model package defines
``MODEL_SPEC``); users add their own with :func:`register_model_spec`.
"""
from __future__ import annotations

import importlib
from typing import Any, Dict, List, Mapping, Optional

from hyper_parallel.models.spec import ModelSpec

__all__ = ["get_model_spec", "pure_flavor_table", "register_model_spec", "list_models", "HF_MODEL_TYPES",
           "model_for_hf_type", "VISION_MODELS", "is_vision_model", "TEXT_OF_VISION"]

#: name -> module defining ``MODEL_SPEC``
_BUILTIN: Dict[str, str] = {
    "llama3": "hyper_parallel.models.llama3",
    "qwen3": "hyper_parallel.models.qwen3",
    "qwen3_moe": "hyper_parallel.models.qwen3_moe",
    "qwen3_5": "hyper_parallel.models.qwen3_5",
    "qwen3_5_moe": "hyper_parallel.models.qwen3_5_moe",
    "deepseek_v3": "hyper_parallel.models.deepseek_v3",
    "qwen3_vl": "hyper_parallel.models.qwen3_vl",
    "qwen3_vl_moe": "hyper_parallel.models.qwen3_vl_moe",
    "qwen3_5_vl": "hyper_parallel.models.qwen3_5_vl",
    "qwen3_5_moe_vl": "hyper_parallel.models.qwen3_5_moe_vl",
}
_REGISTERED: Dict[str, ModelSpec] = {}
#: built-in models whose package imports no framework: their flavor table (``args.FLAVORS``, the one their
#: ``MODEL_SPEC`` holds) is read without importing the model code and torch (config validation before a launch)
_FLAVOR_TABLES: Dict[str, str] = {name: f"hyper_parallel.models.{name}.args"
                                  for name in ("llama3", "qwen3", "qwen3_moe", "deepseek_v3")}
#: built-in vision-language models (their specs say ``extras["vision"]``; known here without importing them)
VISION_MODELS = ("qwen3_vl", "qwen3_vl_moe", "qwen3_5_vl", "qwen3_5_moe_vl")
#: Hugging Face ``config.json`` ``model_type`` -> our model name (``[model] init_from`` resolves the name by it)
HF_MODEL_TYPES: Dict[str, str] = {"llama": "llama3", "qwen3": "qwen3", "qwen3_moe": "qwen3_moe",
                                  "deepseek_v3": "deepseek_v3", "qwen3_vl": "qwen3_vl", "qwen3_vl_moe": "qwen3_vl_moe",
                                  "qwen3_5": "qwen3_5_vl", "qwen3_5_moe": "qwen3_5_moe_vl",
                                  "qwen3_5_text": "qwen3_5", "qwen3_5_moe_text": "qwen3_5_moe"}
#: vision-language model -> the text model of its language half: ``[model] name = "qwen3_5"`` with a
#: ``Qwen3_5ForConditionalGeneration`` folder (``model_type`` ``qwen3_5``) trains its language model only
TEXT_OF_VISION: Dict[str, str] = {"qwen3_5_vl": "qwen3_5", "qwen3_5_moe_vl": "qwen3_5_moe"}
#: (name, backend) -> module defining ``MODEL_SPEC`` for a backend other than torch
_BUILTIN_BACKENDS: Dict[tuple, str] = {(name, "mindspore"): f"hyper_parallel.models.{name}._mindspore"
                                        for name in ("llama3", "qwen3", "qwen3_moe", "deepseek_v3")}
_BACKEND_SPECS: Dict[tuple, ModelSpec] = {}


def register_model_spec(spec: ModelSpec, *, override: bool = False) -> ModelSpec:
    """Register ``spec`` under ``spec.name`` (an existing name is an error unless ``override``)."""
    if not isinstance(spec, ModelSpec):
        raise TypeError(f"register_model_spec(spec): expected a ModelSpec, got {type(spec).__name__}")
    if not override and (spec.name in _REGISTERED or spec.name in _BUILTIN):
        raise ValueError(f"register_model_spec: a model named {spec.name!r} is already registered "
                         f"(pass override=True to replace it)")
    _REGISTERED[spec.name] = spec
    return spec


def list_models() -> List[str]:
    """Names of every registered and built-in model."""
    return sorted(set(_BUILTIN) | set(_REGISTERED))


def is_vision_model(name: str) -> bool:
    """Whether model ``name`` is a vision-language model (a built-in one of :data:`VISION_MODELS`, or a
    registered spec with ``extras["vision"]``); imports no model package."""
    spec = _REGISTERED.get(name)
    return bool(spec.extras.get("vision")) if spec is not None else name in VISION_MODELS


def model_for_hf_type(model_type: str) -> str:
    """Our model name for a Hugging Face ``model_type`` (a ``KeyError`` naming the supported types)."""
    name = HF_MODEL_TYPES.get(model_type)
    if name is None:
        raise KeyError(f"Hugging Face model_type {model_type!r} is not supported; supported: "
                       f"{sorted(HF_MODEL_TYPES)}")
    return name


def get_model_spec(name: str, backend: str = "torch") -> ModelSpec:
    """The :class:`ModelSpec` of model ``name`` (imports a built-in model's package on first use);
    ``backend="mindspore"``: the MindSpore implementation (``llama3``, ``qwen3``, ``qwen3_moe``, ``deepseek_v3``)."""
    if backend != "torch":
        return _backend_spec(name, backend)
    spec = _REGISTERED.get(name)
    if spec is not None:
        return spec
    module = _BUILTIN.get(name)
    if module is None:
        raise KeyError(f"get_model_spec: unknown model {name!r}; known models: {list_models()}")
    spec = importlib.import_module(module).MODEL_SPEC
    _REGISTERED[name] = spec
    return spec


def pure_flavor_table(name: str) -> Optional[Mapping[str, Any]]:
    """The flavor table (flavor -> config, the one ``get_model_spec(name).flavors`` holds) of a built-in torch model
    whose package imports no framework (llama3, qwen3, qwen3_moe, deepseek_v3), read from its ``args`` module
    without importing the model code or torch; None for any other model (ask :func:`get_model_spec`)."""
    if name not in _FLAVOR_TABLES:
        return None
    spec = _REGISTERED.get(name)  # loaded already (or replaced by the user): its own table, if it builds plainly
    if spec is not None:
        return spec.flavors if type(spec).config is ModelSpec.config else None
    return importlib.import_module(_FLAVOR_TABLES[name]).FLAVORS


def _backend_spec(name: str, backend: str) -> ModelSpec:
    key = (name, backend)
    spec = _BACKEND_SPECS.get(key)
    if spec is not None:
        return spec
    module = _BUILTIN_BACKENDS.get(key)
    if module is None:
        have = sorted(f"{n} ({b})" for n, b in _BUILTIN_BACKENDS)
        raise KeyError(f"get_model_spec: model {name!r} has no {backend} implementation; {backend} models: {have}")
    spec = importlib.import_module(module).MODEL_SPEC
    _BACKEND_SPECS[key] = spec
    return spec
