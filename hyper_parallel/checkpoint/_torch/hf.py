# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Hugging Face export and import for torch models, on torch's DCP engine.

``save_hf``: the model's sharded state dict goes through the model's adapter (Hugging Face keys, optional
dtype), each rank writes its own shards with torch's ``HuggingFaceStorageWriter`` (``save_distributed``),
then the ranks consolidate them into whole-tensor ``model-0000i-of-0000N.safetensors`` files in parallel
(torch's ``consolidate_safetensors_files_on_every_rank``: file ``i`` on rank ``i % world``), rank 0 writes
``model.safetensors.index.json`` and ``config.json``, and the folder is published atomically.

``load_hf``: every rank reads, with torch's ``HuggingFaceStorageReader``, only the slices of each tensor its
shards cover (``safe_open(...).get_slice``), converting the stored dtype to the model's.
"""
from __future__ import annotations

import json
import os
import shutil
from typing import Any, Dict, Optional

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import HuggingFaceStorageReader, HuggingFaceStorageWriter
from torch.distributed.checkpoint._consolidate_hf_safetensors import consolidate_safetensors_files_on_every_rank

from hyper_parallel.checkpoint.format import CheckpointError
from hyper_parallel.checkpoint.hf import (CONFIG_FILE, INDEX_FILE, IdentityAdapter, assign_files, build_index,
                                         check_keys, hf_file_name, read_index)
from hyper_parallel.checkpoint.publish import new_save_id, publish_dir, staging_path
from hyper_parallel.checkpoint._torch.api import agree, barrier, coordinator, prepare_for_save, wait_for_async_save
from hyper_parallel.checkpoint._torch.state_dict import get_model_state_dict, set_model_state_dict
from hyper_parallel.platform.torch.dtensor import DTensor, local_alias, as_dtensor

__all__ = ["save_hf", "load_hf", "DEFAULT_MAX_FILE_BYTES"]

#: Hugging Face's usual shard size.
DEFAULT_MAX_FILE_BYTES = 5 * 1024 ** 3
_SHARDED = "sharded"


def _convert(value: Any, dtype: Optional[torch.dtype]) -> Any:
    if dtype is None or not isinstance(value, torch.Tensor) or not value.is_floating_point():
        return value
    if type(value) is DTensor:  # pylint: disable=unidiomatic-typecheck
        return as_dtensor(local_alias(value).detach().to(dtype), value._spec)  # pylint: disable=protected-access
    return value.detach().to(dtype)


def _nbytes(value: Any) -> int:
    return value.numel() * value.element_size()


def _global_sizes(hf_sd: Dict[str, Any]) -> Dict[str, int]:
    """``{key: bytes}`` over every rank: pipeline stages hold different keys, and the file of each key must be
    the same on every rank."""
    sizes = {k: _nbytes(v) for k, v in hf_sd.items()}
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return sizes
    gathered: list = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, sizes)
    out: Dict[str, int] = {}
    for part in gathered:
        out.update(part)
    return out


def save_hf(model: "torch.nn.Module | list", folder: "str | os.PathLike", adapter: Any = None, *,
            dtype: Optional[torch.dtype] = None, max_file_bytes: int = DEFAULT_MAX_FILE_BYTES) -> Dict[str, str]:
    """Export ``model`` (any layout; a list of pipeline-stage parts too) as a Hugging Face folder; returns its
    weight map ``{hf_key: file}``.

    Every rank calls it. ``adapter``: the model's ``StateDictAdapter`` (default: keys unchanged);
    ``dtype``: convert floating tensors (e.g. ``torch.bfloat16``); ``max_file_bytes``: size of each file.
    """
    wait_for_async_save()
    adapter = adapter or IdentityAdapter()
    hf_sd = {k: _convert(v, dtype) for k, v in adapter.to_hf(get_model_state_dict(model)).items()}
    hf_sd = prepare_for_save(hf_sd)
    sizes = _global_sizes(hf_sd)
    mapping = assign_files(sizes, max_file_bytes)
    final = os.path.abspath(os.fspath(folder))
    staging = agree(staging_path(final, new_save_id()) if coordinator() else None)
    if coordinator():
        os.makedirs(os.path.join(staging, _SHARDED))
    barrier()
    writer = HuggingFaceStorageWriter(os.path.join(staging, _SHARDED), fqn_to_index_mapping=mapping,
                                      save_distributed=True, enable_consolidation=False)
    dcp.save(hf_sd, storage_writer=writer, no_dist=not dist.is_initialized())
    consolidate_safetensors_files_on_every_rank(os.path.join(staging, _SHARDED), staging, mapping,
                                                process_group=None)
    if coordinator():
        shutil.rmtree(os.path.join(staging, _SHARDED))
        if not os.path.exists(os.path.join(staging, INDEX_FILE)):
            # torch's consolidation writes the index only under an initialised process group
            count = max(mapping.values())
            weight_map = {k: hf_file_name(i, count) for k, i in mapping.items()}
            with open(os.path.join(staging, INDEX_FILE), "w", encoding="utf-8") as f:
                json.dump(build_index(weight_map, sum(sizes.values())), f, indent=2)
        config = adapter.hf_config() if hasattr(adapter, "hf_config") else None
        if config is not None:
            with open(os.path.join(staging, CONFIG_FILE), "w", encoding="utf-8") as f:
                json.dump(config, f, indent=2, sort_keys=True)
        publish_dir(staging, final)
    barrier()
    return read_index(final)


def load_hf(model: torch.nn.Module, folder: "str | os.PathLike", adapter: Any = None, *,
            strict: bool = True) -> None:
    """Load a Hugging Face folder into ``model`` in its current layout (each rank reads only its slices;
    stored dtypes are converted to the model's). Every rank calls it."""
    wait_for_async_save()
    folder = os.fspath(folder)
    adapter = adapter or IdentityAdapter()
    hf_sd = adapter.to_hf(get_model_state_dict(model))
    stored = read_index(folder)
    if strict:
        check_keys(hf_sd, stored, f"load_hf({folder})")
    else:
        hf_sd = {k: v for k, v in hf_sd.items() if k in stored}
    if not hf_sd:
        raise CheckpointError(f"load_hf({folder}): no tensor of the model is in the checkpoint")
    dcp.load(hf_sd, storage_reader=HuggingFaceStorageReader(folder), no_dist=not dist.is_initialized())
    from hyper_parallel.checkpoint.api import StateDictOptions
    set_model_state_dict(model, adapter.from_hf(hf_sd), options=StateDictOptions(strict=strict))
