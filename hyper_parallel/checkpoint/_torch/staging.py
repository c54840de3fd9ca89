# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Staging a state dict into host memory for ``async_save`` (works without an accelerator).

torch's ``DefaultStager()`` with its default options asserts that an accelerator is available, and
its CPU copy (``_create_cpu_state_dict``) sees a ``hyper_parallel`` DTensor as a plain tensor of the
*global* shape. :class:`CPUStager` implements torch's ``AsyncStager`` protocol for every value kind:
our DTensors (the local shard is copied, the copy is re-wrapped with the same spec), torch's
DTensors, plain tensors and other objects (deep-copied). Copies from an accelerator go to pinned
memory with non-blocking copies and one synchronisation at the end; buffers are reused between
saves when the structure is unchanged (``cache=True``), so steady-state staging allocates nothing.
"""
from __future__ import annotations

import copy
from typing import Any, Dict, Tuple

import torch
from torch._C import DisableTorchFunctionSubclass

from hyper_parallel.platform.torch.dtensor import DTensor, local_alias, as_dtensor

__all__ = ["CPUStager", "map_leaves"]


def map_leaves(obj: Any, fn, path: Tuple = ()) -> Any:
    """Apply ``fn(value, path)`` to every non-container value of nested dicts/lists/tuples (new containers)."""
    if isinstance(obj, dict):
        return {k: map_leaves(v, fn, path + (k,)) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)) and not hasattr(obj, "_fields"):
        return type(obj)(map_leaves(v, fn, path + (i,)) for i, v in enumerate(obj))
    return fn(obj, path)


class CPUStager:
    """torch ``AsyncStager``: a host-memory copy of a state dict, complete when :meth:`stage` returns.

    Args:
        cache: keep the host buffers and copy into them on the next save when shapes and dtypes match.
    """

    _synchronize_after_execute: bool = False

    def __init__(self, cache: bool = True) -> None:
        self.cache = cache
        self._buffers: Dict[Tuple, torch.Tensor] = {}
        self._pending_sync = False

    @property
    def should_synchronize_after_execute(self) -> bool:
        """False: :meth:`stage` returns a finished copy."""
        return self._synchronize_after_execute

    def _buffer(self, path: Tuple, src: torch.Tensor) -> torch.Tensor:
        buf = self._buffers.get(path) if self.cache else None
        if buf is None or buf.shape != src.shape or buf.dtype != src.dtype:
            pin = src.device.type != "cpu" and torch.accelerator.is_available()
            buf = torch.empty(src.shape, dtype=src.dtype, pin_memory=pin)
            if self.cache:
                self._buffers[path] = buf
        return buf

    def _copy(self, path: Tuple, src: torch.Tensor) -> torch.Tensor:
        with DisableTorchFunctionSubclass(), torch.no_grad():
            src = src.detach()
            buf = self._buffer(path, src)
            non_blocking = src.device.type != "cpu"
            self._pending_sync |= non_blocking
            buf.copy_(src, non_blocking=non_blocking)
        return local_alias(buf)

    def _stage_value(self, value: Any, path: Tuple) -> Any:
        if type(value) is DTensor:  # pylint: disable=unidiomatic-typecheck
            return as_dtensor(self._copy(path, local_alias(value)), value._spec)  # pylint: disable=protected-access
        from torch.distributed.tensor import DTensor as TorchDTensor
        if isinstance(value, TorchDTensor):
            local = self._copy(path, value.to_local())
            return TorchDTensor.from_local(local, value.device_mesh, value.placements, run_check=False,
                                           shape=value.shape, stride=value.stride())
        if isinstance(value, torch.Tensor):
            return self._copy(path, value)
        return copy.deepcopy(value)

    def stage(self, state_dict: Dict[str, Any]) -> Dict[str, Any]:
        """The host-memory copy of ``state_dict`` (same nesting, same specs)."""
        self._pending_sync = False
        staged = map_leaves(state_dict, self._stage_value)
        if self._pending_sync:
            torch.accelerator.synchronize()
        return staged

    def synchronize_staging(self) -> None:
        """Nothing to wait for: :meth:`stage` returns finished copies."""
        self._pending_sync = False

    def close(self) -> None:
        """Drop the cached buffers."""
        self._buffers.clear()
