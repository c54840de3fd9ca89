# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The device a process computes on, from a mesh's device type (modules take their device from the mesh, never
a hard-coded ``"cpu"``; tests/ut/test_device_strings.py keeps it that way)."""
from __future__ import annotations

import os

import torch

__all__ = ["local_device", "default_device_type"]


def default_device_type() -> str:
    """``"cuda"`` when a CUDA GPU is visible (and ``HYPER_PARALLEL_DEVICE`` is not ``cpu``), else ``"cpu"``."""
    if torch.cuda.is_available() and os.environ.get("HYPER_PARALLEL_DEVICE", "") != "cpu":
        return "cuda"
    return "cpu"


def local_device(device_type: str) -> torch.device:
    """This process's device of ``device_type``: the current accelerator index for ``cuda``/``npu`` (set from
    ``LOCAL_RANK`` by the trainer), the device type alone otherwise (``cpu``, ``meta``)."""
    module = getattr(torch, device_type, None)
    if device_type != "cpu" and module is not None and hasattr(module, "current_device"):
        return torch.device(device_type, module.current_device())
    return torch.device(device_type)
