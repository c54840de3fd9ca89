# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The sharded optimizer step.

``torch.optim`` optimizers step the local shards directly: a global optimizer step pre-hook
re-classes every FSDP-sharded ``DTensor`` parameter (and its gradient) to a plain ``torch.Tensor``
for the duration of ``step()`` and the post-hook re-classes them back. The objects, their storage
(views into the unit's flat buffers) and the optimizer's keys are unchanged, so the step runs the
optimizer's ordinary kernels on local shards with no ``__torch_function__`` dispatch at all, and
its states (``exp_avg`` …) are plain local tensors shaped like the shards. A sharded parameter's
unit is resharded before the step so no stale unsharded copy survives it.

``hyper_parallel.fsdp.clip_grad_norm_`` is the general ``hyper_parallel.clip_grad_norm_``
(``hyper_parallel/optim/_torch/clip.py``), which handles FSDP/HSDP gradients among any others.
"""
from __future__ import annotations

from typing import Iterable, List

import torch
from torch._C import DisableTorchFunctionSubclass
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from hyper_parallel.platform.torch.dtensor import DTensor

__all__ = ["install_step_hooks", "local_params_of"]

_INSTALLED = []
_FLIPPED = "_hp_fsdp_flipped"


def _pre_step(optimizer, _args, _kwargs) -> None:
    flipped = []
    for group in optimizer.param_groups:
        for p in group["params"]:
            info = p.__dict__.get("_hp_fsdp_info")
            if info is None or type(p) is not DTensor:  # pylint: disable=unidiomatic-typecheck
                continue
            unit = info.unit
            if unit.state != "sharded" and not unit.swapped_in:
                unit.reshard()  # an unsharded copy would be stale after the step
            with DisableTorchFunctionSubclass():
                g = p.grad
            p.__class__ = torch.Tensor
            if g is not None and type(g) is DTensor:  # pylint: disable=unidiomatic-typecheck
                g.__class__ = torch.Tensor
            flipped.append((p, g))
    if flipped:
        optimizer.__dict__[_FLIPPED] = flipped


def _post_step(optimizer, _args, _kwargs) -> None:
    for p, g in optimizer.__dict__.pop(_FLIPPED, ()):
        p.__class__ = DTensor
        if g is not None and type(g) is torch.Tensor:  # pylint: disable=unidiomatic-typecheck
            g.__class__ = DTensor


def install_step_hooks() -> None:
    """Register the global optimizer step hooks once per process."""
    if not _INSTALLED:
        _INSTALLED.append(register_optimizer_step_pre_hook(_pre_step))
        _INSTALLED.append(register_optimizer_step_post_hook(_post_step))


def local_params_of(parameters: Iterable[torch.Tensor]) -> List[torch.Tensor]:
    """Plain-tensor aliases of the local shards of ``parameters`` (DTensors or plain tensors)."""
    out = []
    with DisableTorchFunctionSubclass():
        for p in parameters:
            out.append(p.view_as(p))
    return out
