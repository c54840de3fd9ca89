# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The trainer's model lookup: ``[model] name`` and ``flavor`` -> a model config and class.

Uses the model registry ``hyper_parallel.models.get_model_spec`` when the package has one, else the built-in
Llama (``hyper_parallel.models.llama``; names ``llama`` and ``llama3``, flavors of ``TINY_CONFIGS``).
"""
from __future__ import annotations

import dataclasses
import importlib
from typing import Any, Tuple

__all__ = ["model_flavors", "build_model_config", "model_class"]

_LLAMA_NAMES = ("llama", "llama3")


def _registry() -> Any:
    models = importlib.import_module("hyper_parallel.models")
    return getattr(models, "get_model_spec", None)


def model_flavors(name: str) -> Tuple[str, ...]:
    """The flavors ``name`` offers."""
    if name in _LLAMA_NAMES:
        from hyper_parallel.models.llama.model import TINY_CONFIGS  # pylint: disable=import-outside-toplevel
        return tuple(TINY_CONFIGS)
    lookup = _registry()
    if lookup is None:
        raise ValueError(f"model.name: unknown model {name!r}; expected one of {list(_LLAMA_NAMES)}")
    return tuple(lookup(name).flavors)


def build_model_config(name: str, flavor: str, **overrides: Any) -> Any:
    """The model config of ``name``/``flavor`` with ``overrides`` (``vocab_size=...``) applied."""
    flavors = model_flavors(name)
    if flavor not in flavors:
        raise ValueError(f"model.flavor: {name!r} has no flavor {flavor!r}; expected one of {list(flavors)}")
    if name in _LLAMA_NAMES:
        from hyper_parallel.models.llama.model import TINY_CONFIGS  # pylint: disable=import-outside-toplevel
        base = TINY_CONFIGS[flavor]
    else:
        base = _registry()(name).flavors[flavor]
    return dataclasses.replace(base, **overrides)


def model_class(name: str) -> Any:
    """The model class (``LlamaForCausalLM`` for the Llama names)."""
    if name in _LLAMA_NAMES:
        from hyper_parallel.models.llama.model import LlamaForCausalLM  # pylint: disable=import-outside-toplevel
        return LlamaForCausalLM
    return _registry()(name).model_cls
