# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Offline conversion between checkpoint formats, in one process without a process group (torch).

Sources: a hyper-parallel folder, a torch DCP folder (``.metadata``) or a Hugging Face folder — read whole
through torch's DCP engine (``_EmptyStateDictLoadPlanner`` rebuilds the nested state dict from the
metadata), every chunk CRC-checked for our format. Destinations: Hugging Face safetensors shards with
``model.safetensors.index.json``, one ``torch.save`` file, or a DCP folder (hyper-parallel format, or
torch's own with ``torch_format=True``). ``progress(n_bytes)`` is called as tensors are read.
"""
from __future__ import annotations

import json
import os
from typing import Any, Callable, Dict, Optional

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.default_planner import _EmptyStateDictLoadPlanner
from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

from hyper_parallel.checkpoint.format import CheckpointError
from hyper_parallel.checkpoint.hf import CONFIG_FILE, INDEX_FILE, assign_files, build_index, hf_file_name
from hyper_parallel.checkpoint.publish import new_save_id, publish_dir, staging_path
from hyper_parallel.checkpoint.safetensors_io import write_safetensors
from hyper_parallel.checkpoint._torch.api import save, storage_reader_for
from hyper_parallel.checkpoint._torch.storage import FileSystemReader, dtype_name, tensor_buffer, torch_dtype

__all__ = ["read_full", "write_hf", "write_torch", "write_dcp", "select", "torch_dcp_summary"]


class _ProgressPlanner(_EmptyStateDictLoadPlanner):  # pylint: disable=abstract-method  # as torch's own
    """Rebuilds the state dict from the metadata and reports the bytes of every committed read."""

    def __init__(self, progress: Optional[Callable[[int], None]]) -> None:
        super().__init__()
        self.progress = progress

    def commit_tensor(self, read_item, tensor) -> None:
        """Count the bytes copied into place."""
        super().commit_tensor(read_item, tensor)
        if self.progress is not None:
            self.progress(tensor.numel() * tensor.element_size())


def read_full(src: "str | os.PathLike", progress: Optional[Callable[[int], None]] = None) -> Dict[str, Any]:
    """The whole checkpoint at ``src`` (any supported format) as a nested state dict of full CPU tensors."""
    sd: Dict[str, Any] = {}
    reader = storage_reader_for(src)
    if isinstance(reader, FileSystemReader):
        reader.check()
    # dcp.load fills a copy of an empty dict; the engine's own entry point fills ``sd`` (as dcp_to_torch_save)
    _load_state_dict(sd, storage_reader=reader, planner=_ProgressPlanner(progress), no_dist=True)
    return sd


def select(sd: Dict[str, Any], prefix: Optional[str]) -> Dict[str, Any]:
    """The flat ``{dotted key: tensor}`` of the subtree ``prefix`` (``None``: ``"model"`` if present, else all)."""
    if prefix is None:
        prefix = "model" if isinstance(sd.get("model"), dict) else ""
    node: Any = sd
    for part in [p for p in prefix.split(".") if p]:
        if not isinstance(node, dict) or part not in node:
            raise CheckpointError(f"convert: the checkpoint has no subtree {prefix!r} (top-level keys: {sorted(sd)})")
        node = node[part]
    flat: Dict[str, Any] = {}

    def walk(obj, path):
        if isinstance(obj, dict):
            for k, v in obj.items():
                walk(v, f"{path}.{k}" if path else str(k))
        elif isinstance(obj, torch.Tensor):
            flat[path] = obj

    walk(node, "")
    if not flat:
        raise CheckpointError(f"convert: the subtree {prefix!r} holds no tensors")
    return flat


def _hf_tensors(tensors: Dict[str, torch.Tensor], adapter: Any, dtype: "str | torch.dtype | None"):
    if adapter is not None:
        tensors = adapter.to_hf(tensors)
    if isinstance(dtype, str):
        dtype = torch_dtype(dtype)
    return {k: (v.to(dtype) if dtype is not None and v.is_floating_point() else v).contiguous()
            for k, v in tensors.items()}


def _write_hf_metadata(staging: str, weight_map: Dict[str, str], total: int, adapter: Any) -> None:
    with open(os.path.join(staging, INDEX_FILE), "w", encoding="utf-8") as f:
        json.dump(build_index(weight_map, total), f, indent=2)
    config = adapter.hf_config() if adapter is not None and hasattr(adapter, "hf_config") else None
    if config is not None:
        with open(os.path.join(staging, CONFIG_FILE), "w", encoding="utf-8") as f:
            json.dump(config, f, indent=2, sort_keys=True)


def write_hf(tensors: Dict[str, torch.Tensor], dst: "str | os.PathLike", *, adapter: Any = None,
             dtype: "str | torch.dtype | None" = None, max_file_bytes: int = 5 * 1024 ** 3,
             progress: Optional[Callable[[int], None]] = None) -> Dict[str, str]:
    """Write Hugging Face safetensors shards + index (+ ``config.json`` from the adapter), published
    atomically; ``dtype`` (a torch dtype or its name) converts floating tensors. Returns the weight map."""
    tensors = _hf_tensors(tensors, adapter, dtype)
    sizes = {k: v.numel() * v.element_size() for k, v in tensors.items()}
    mapping = assign_files(sizes, max_file_bytes)
    count = max(mapping.values())
    final = os.path.abspath(os.fspath(dst))
    staging = staging_path(final, new_save_id())
    os.makedirs(staging)
    weight_map = {k: hf_file_name(i, count) for k, i in mapping.items()}
    for index in range(1, count + 1):
        keys = [k for k, i in mapping.items() if i == index]
        write_safetensors(os.path.join(staging, hf_file_name(index, count)),
                          [(k, dtype_name(tensors[k].dtype), tuple(tensors[k].shape), tensor_buffer(tensors[k]))
                           for k in keys], metadata={"format": "pt"})
        if progress is not None:
            progress(sum(sizes[k] for k in keys))
    _write_hf_metadata(staging, weight_map, sum(sizes.values()), adapter)
    publish_dir(staging, final)
    return weight_map


def write_torch(sd: Dict[str, Any], dst: "str | os.PathLike") -> None:
    """One ``torch.save`` file of the nested state dict (like torch's ``dcp_to_torch_save``)."""
    parent = os.path.dirname(os.path.abspath(os.fspath(dst)))
    os.makedirs(parent, exist_ok=True)
    tmp = os.path.join(parent, f".{os.path.basename(os.fspath(dst))}.tmp-{new_save_id()}")
    torch.save(sd, tmp)
    os.replace(tmp, os.fspath(dst))


def write_dcp(sd: Dict[str, Any], dst: "str | os.PathLike", *, torch_format: bool = False) -> None:
    """A DCP folder: the hyper-parallel format, or torch's own (``.metadata`` + ``.distcp``)."""
    writer = dcp.FileSystemWriter(os.fspath(dst)) if torch_format else None
    save(sd, checkpoint_id=dst, storage_writer=writer, no_dist=True)


def torch_dcp_summary(src: "str | os.PathLike") -> Dict[str, Any]:
    """``{tensors: {name: {dtype, shape, chunks}}, objects: [names]}`` of a torch DCP folder (for inspect)."""
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata
    md = dcp.FileSystemReader(os.fspath(src)).read_metadata()
    tensors, objects = {}, []
    for name, entry in md.state_dict_metadata.items():
        if isinstance(entry, TensorStorageMetadata):
            tensors[name] = {"dtype": dtype_name(entry.properties.dtype), "shape": list(entry.size),
                             "chunks": len(entry.chunks)}
        else:
            objects.append(name)
    return {"tensors": tensors, "objects": sorted(objects)}
