# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Hugging Face import into a MindSpore model; export refused with the way to do it.

``load_hf(model, folder, adapter=None)`` reads the folder's safetensors files with the framework-free reader
(``hyper_parallel.checkpoint.safetensors_io``) into NumPy arrays (bf16 / fp16 widened to float32), renames them
with the model family's state-dict adapter (the same one the torch models use: ``from_hf`` is backend-free) and
sets every parameter with ``model.load_numpy``. The model holds its full weights: load before parallelising
(every rank reads the whole folder). No torch import.

A MindSpore model is exported by saving a hyper-parallel checkpoint (``hyper_parallel.checkpoint.save``) and
converting it offline with ``hp-ckpt convert CKPT OUT --to hf``: the format is shared, so no MindSpore-specific
Hugging Face writer is needed.
"""
from __future__ import annotations

import os
from typing import Any, Dict

import numpy as np

from hyper_parallel.checkpoint.format import CheckpointError

__all__ = ["save_hf", "load_hf", "read_hf_numpy"]

_NUMPY = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "I64": np.int64, "I32": np.int32,
          "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}


def save_hf(model: Any, folder: Any, adapter: Any = None, **kwargs: Any) -> None:
    """Refused: save a checkpoint, then ``hp-ckpt convert CKPT FOLDER --to hf``."""
    del model, adapter, kwargs
    raise CheckpointError(f"save_hf({folder}) on MindSpore: save a checkpoint with hyper_parallel.checkpoint.save, "
                          "then convert it with `hp-ckpt convert CKPT OUT --to hf [--adapter ...]`")


def _array(raw: bytearray, dtype: str, shape, what: str) -> np.ndarray:
    if dtype == "BF16":  # bfloat16 is float32's upper half
        return (np.frombuffer(bytes(raw), np.uint16).astype(np.uint32) << 16).view(np.float32).reshape(shape)
    if dtype not in _NUMPY:
        raise CheckpointError(f"load_hf: {what} has safetensors dtype {dtype!r}; expected one of "
                              f"{sorted(_NUMPY) + ['BF16']}")
    return np.frombuffer(bytes(raw), _NUMPY[dtype]).reshape(shape).copy()


def read_hf_numpy(folder: Any) -> Dict[str, np.ndarray]:
    """``{hf_key: ndarray}`` of every tensor in a Hugging Face folder (sharded or single file)."""
    from hyper_parallel.checkpoint.hf import read_index  # pylint: disable=import-outside-toplevel
    from hyper_parallel.checkpoint.safetensors_io import read_header, read_range  # pylint: disable=C0415
    folder = os.fspath(folder)
    out: Dict[str, np.ndarray] = {}
    files = sorted(set(read_index(folder).values()))
    for name in files:
        path = os.path.join(folder, name)
        header, start = read_header(path)
        for key, entry in header.items():
            if key == "__metadata__":
                continue
            begin, end = entry["data_offsets"]
            raw = read_range(path, start + begin, end - begin, what=key)
            out[key] = _array(raw, entry["dtype"], tuple(entry["shape"]), f"{path}: {key}")
    return out


def _adapter_for(model: Any, folder: str) -> Any:
    from hyper_parallel.models import get_model_spec  # pylint: disable=import-outside-toplevel
    from hyper_parallel.trainer.hf_folder import resolve_model  # pylint: disable=import-outside-toplevel
    name, _ = resolve_model(folder)
    return get_model_spec(name, backend="mindspore").state_dict_adapter(model.config)


def load_hf(model: Any, folder: Any, adapter: Any = None, **kwargs: Any) -> None:
    """Set every parameter of the (unsharded) MindSpore ``model`` from the Hugging Face folder ``folder``
    (``adapter``: the model family's state-dict adapter; default: the one of the folder's ``model_type`` built on
    ``model.config``). The adapter is strict: a key it does not know is an error naming it."""
    if kwargs:
        raise TypeError(f"load_hf (MindSpore): unexpected arguments {sorted(kwargs)}")
    if not hasattr(model, "load_numpy"):
        raise TypeError(f"load_hf (MindSpore): expected a hyper_parallel MindSpore model with load_numpy, got "
                        f"{type(model).__name__}")
    folder = os.fspath(folder)
    adapter = adapter if adapter is not None else _adapter_for(model, folder)
    model.load_numpy(adapter.from_hf(read_hf_numpy(folder)))
