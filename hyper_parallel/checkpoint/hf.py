# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Hugging Face checkpoint layout, backend-free: key adapters, file sharding and the index JSON.

A Hugging Face model folder holds ``model-00001-of-0000N.safetensors`` files (each tensor whole, in
exactly one file), ``model.safetensors.index.json`` (``{"metadata": {"total_size": bytes}, "weight_map":
{hf_key: file}}``) and usually ``config.json``. A model's :class:`StateDictAdapter` (in
``hyper_parallel/models/<name>/state_dict_adapter.py``) translates between the model's own state-dict
keys and Hugging Face's; :class:`KeyMapAdapter` covers models whose translation is a renaming with
layer-number placeholders, which is most of them.
"""
from __future__ import annotations

import json
import os
import re
from typing import Any, Dict, Iterable, List, Mapping, Optional, Protocol, Sequence, Tuple, runtime_checkable

from hyper_parallel.checkpoint.format import CheckpointCorruptError, CheckpointError

__all__ = ["StateDictAdapter", "KeyMapAdapter", "IdentityAdapter", "INDEX_FILE", "CONFIG_FILE", "hf_file_name",
           "assign_files", "build_index", "read_index", "natural_key", "files_of", "check_keys"]

INDEX_FILE = "model.safetensors.index.json"
CONFIG_FILE = "config.json"
SINGLE_FILE = "model.safetensors"


@runtime_checkable
class StateDictAdapter(Protocol):
    """Translates a model's state dict to and from Hugging Face keys (TorchTitan's adapter contract).

    ``to_hf`` and ``from_hf`` map dicts of tensors (``DTensor`` shards included) to dicts of tensors; a
    translation that only renames keys passes the tensor objects through, so loading into the
    translated dict loads into the model. ``hf_config()`` returns the ``config.json`` content or None.
    """

    def to_hf(self, state_dict: Dict[str, Any]) -> Dict[str, Any]:
        """Model keys -> Hugging Face keys."""

    def from_hf(self, hf_state_dict: Dict[str, Any]) -> Dict[str, Any]:
        """Hugging Face keys -> model keys."""

    def hf_config(self) -> Optional[Dict[str, Any]]:
        """``config.json`` content for an export, or None."""


def _compile(pattern: str) -> Tuple["re.Pattern[str]", int]:
    parts = pattern.split("{}")
    regex = "^" + r"(\d+)".join(re.escape(p) for p in parts) + "$"
    return re.compile(regex), len(parts) - 1


class KeyMapAdapter:
    """An adapter defined by renaming rules ``(model pattern, hf pattern)``; ``{}`` stands for a number
    (a layer index) and must appear equally often on both sides, e.g.
    ``("layers.{}.attention.wq.weight", "model.layers.{}.self_attn.q_proj.weight")``.

    ``strict`` (default): a key matching no rule is an error naming it; otherwise it passes unchanged.
    ``config``: the ``config.json`` content returned by :meth:`hf_config`.
    """

    def __init__(self, rules: Sequence[Tuple[str, str]], *, strict: bool = True,
                 config: Optional[Dict[str, Any]] = None) -> None:
        self.rules = list(rules)
        self.strict = strict
        self.config = config
        self._to = []
        self._from = []
        for ours, theirs in self.rules:
            (ro, no), (rt, nt) = _compile(ours), _compile(theirs)
            if no != nt:
                raise ValueError(f"KeyMapAdapter rule ({ours!r}, {theirs!r}): both sides need the same number of "
                                 "'{}' placeholders")
            self._to.append((ro, theirs))
            self._from.append((rt, ours))

    @staticmethod
    def _rename(key: str, table, strict: bool, direction: str) -> str:
        for regex, template in table:
            m = regex.match(key)
            if m:
                return template.format(*m.groups())
        if strict:
            raise KeyError(f"{direction}: key {key!r} matches no rule of the adapter")
        return key

    def _map(self, sd: Mapping[str, Any], table, direction: str) -> Dict[str, Any]:
        out: Dict[str, Any] = {}
        for key, value in sd.items():
            new = self._rename(key, table, self.strict, direction)
            if new in out:
                raise KeyError(f"{direction}: keys collide on {new!r}")
            out[new] = value
        return out

    def to_hf(self, state_dict: Mapping[str, Any]) -> Dict[str, Any]:
        """Rename model keys to Hugging Face keys (values pass through)."""
        return self._map(state_dict, self._to, "to_hf")

    def from_hf(self, hf_state_dict: Mapping[str, Any]) -> Dict[str, Any]:
        """Rename Hugging Face keys to model keys (values pass through)."""
        return self._map(hf_state_dict, self._from, "from_hf")

    def hf_config(self) -> Optional[Dict[str, Any]]:
        """The ``config.json`` content given at construction."""
        return self.config


class IdentityAdapter(KeyMapAdapter):
    """For models whose keys already are Hugging Face's."""

    def __init__(self, config: Optional[Dict[str, Any]] = None) -> None:
        super().__init__([], strict=False, config=config)


def natural_key(key: str) -> Tuple:
    """Sort key that orders ``layers.2`` before ``layers.10``."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", key))


def hf_file_name(index: int, count: int) -> str:
    """``model-00001-of-00003.safetensors`` (1-based ``index``; torch's DCP names files the same way)."""
    return f"model-{index:05d}-of-{count:05d}.safetensors"


def assign_files(nbytes: Mapping[str, int], max_file_bytes: int) -> Dict[str, int]:
    """Split tensors into files of at most ``max_file_bytes`` (a bigger tensor gets a file of its own), in
    natural key order so that a layer's tensors stay together; returns ``{key: file index (1-based)}``."""
    if max_file_bytes <= 0:
        raise ValueError(f"assign_files(max_file_bytes): expected a positive size, got {max_file_bytes}")
    out: Dict[str, int] = {}
    index, used = 1, 0
    for key in sorted(nbytes, key=natural_key):
        size = int(nbytes[key])
        if used and used + size > max_file_bytes:
            index, used = index + 1, 0
        out[key] = index
        used += size
    return out


def build_index(weight_map: Mapping[str, str], total_size: int) -> Dict[str, Any]:
    """The ``model.safetensors.index.json`` document."""
    return {"metadata": {"total_size": int(total_size)},
            "weight_map": {k: weight_map[k] for k in sorted(weight_map, key=natural_key)}}


def read_index(folder: str) -> Dict[str, str]:
    """``{hf_key: file}`` of a Hugging Face folder: from its index JSON, or from its single
    ``model.safetensors``; errors name the folder or the file."""
    path = os.path.join(folder, INDEX_FILE)
    if not os.path.exists(path):
        single = os.path.join(folder, SINGLE_FILE)
        if os.path.exists(single):
            from hyper_parallel.checkpoint.safetensors_io import read_header
            header, _ = read_header(single)
            return {k: SINGLE_FILE for k in header if k != "__metadata__"}
        raise CheckpointError(f"{folder}: not a Hugging Face checkpoint (no {INDEX_FILE} and no {SINGLE_FILE})")
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        weight_map = doc["weight_map"]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise CheckpointCorruptError(path, f"not a valid index document: {exc}") from None
    missing = sorted({f for f in weight_map.values() if not os.path.exists(os.path.join(folder, f))})
    if missing:
        raise CheckpointCorruptError(path, f"names files that do not exist: {missing}")
    return dict(weight_map)


def files_of(weight_map: Mapping[str, str]) -> List[str]:
    """The distinct files of a weight map, sorted."""
    return sorted(set(weight_map.values()))


def check_keys(expected: Iterable[str], found: Iterable[str], what: str) -> None:
    """Raise a clear error when the two key sets differ."""
    expected, found = set(expected), set(found)
    if expected != found:
        missing, extra = sorted(expected - found), sorted(found - expected)
        raise CheckpointError(f"{what}: missing keys {missing[:10]}{' ...' if len(missing) > 10 else ''}, "
                              f"unexpected keys {extra[:10]}{' ...' if len(extra) > 10 else ''}")
