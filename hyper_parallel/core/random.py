# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Reproducible distributed initialisation."""
from __future__ import annotations

from typing import Optional


def manual_seed(seed: int, device_mesh=None, platform: Optional[str] = None) -> None:  # pylint: disable=unused-argument
    """Seed every rank with the same ``seed`` so full tensors built before ``distribute_tensor``
    are identical on all ranks (PyTorch parity)."""
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise TypeError(f"manual_seed(seed): expected an int, got {seed!r}")
    from hyper_parallel.platform import get_platform
    plat = get_platform(platform)
    if plat.name == "torch":
        import torch
        torch.manual_seed(seed)
    else:
        import mindspore  # pylint: disable=import-error
        mindspore.set_seed(seed)
