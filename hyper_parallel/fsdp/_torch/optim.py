# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The sharded optimizer step and ``clip_grad_norm_``.

``torch.optim`` optimizers step the local shards directly: a global optimizer step pre-hook
re-classes every FSDP-sharded ``DTensor`` parameter (and its gradient) to a plain ``torch.Tensor``
for the duration of ``step()`` and the post-hook re-classes them back. The objects, their storage
(views into the unit's flat buffers) and the optimizer's keys are unchanged, so the step runs the
optimizer's ordinary kernels on local shards with no ``__torch_function__`` dispatch at all, and
its states (``exp_avg`` …) are plain local tensors shaped like the shards. A sharded parameter's
unit is resharded before the step so no stale unsharded copy survives it.
"""
from __future__ import annotations

import math
from typing import Dict, Iterable, List, Tuple, Union

import torch
import torch.distributed as dist
from torch._C import DisableTorchFunctionSubclass
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from hyper_parallel.core.placement import Shard
from hyper_parallel.platform.torch.dtensor import DTensor

__all__ = ["install_step_hooks", "clip_grad_norm_", "local_params_of"]

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


def _reduce_dims(p: torch.Tensor) -> Tuple:
    """(mesh, mesh dims on which ``p``'s gradient is sharded) — the ranks its norm is summed over."""
    if type(p) is not DTensor:  # pylint: disable=unidiomatic-typecheck
        return (None, ())
    spec = p._spec  # pylint: disable=protected-access
    return (spec.mesh, tuple(d for d, pl in enumerate(spec.placements) if isinstance(pl, Shard)))


def clip_grad_norm_(parameters: Union[torch.Tensor, Iterable[torch.Tensor]], max_norm: float,
                    norm_type: float = 2.0, error_if_nonfinite: bool = False) -> torch.Tensor:
    """Clip the gradients of (sharded) parameters by their global norm; returns the total norm.

    Each parameter's local gradient norm is combined over exactly the mesh dims on which it is
    sharded (the FSDP shard dim, a TP dim), never over replicas (HSDP replicate dim, TP
    ``Replicate``), with one all-reduce per distinct (mesh, dims) group. Plain parameters count once.
    """
    if isinstance(parameters, torch.Tensor):
        parameters = [parameters]
    norm_type = float(norm_type)
    if norm_type <= 0 and not math.isinf(norm_type):
        raise ValueError(f"clip_grad_norm_(norm_type): expected a positive number or inf, got {norm_type}")
    groups: Dict[Tuple, List[torch.Tensor]] = {}
    with DisableTorchFunctionSubclass():
        for p in parameters:
            g = p.grad
            if g is not None:
                groups.setdefault(_reduce_dims(p), []).append(g.view_as(g))
        grads = [g for gs in groups.values() for g in gs]
        if not grads:
            return torch.tensor(0.0)
        total = _total_norm(groups, norm_type)
        if error_if_nonfinite and not torch.isfinite(total):
            raise RuntimeError(f"clip_grad_norm_: the total norm of order {norm_type} is non-finite ({total.item()})")
        coef = torch.clamp(float(max_norm) / (total + 1e-6), max=1.0)
        torch._foreach_mul_(grads, coef.to(grads[0].device))  # pylint: disable=protected-access
    return total


def _total_norm(groups: Dict[Tuple, List[torch.Tensor]], norm_type: float) -> torch.Tensor:
    inf = math.isinf(norm_type)
    total = torch.zeros((), dtype=torch.float64)
    for (mesh, dims), gs in groups.items():
        norms = torch.stack([torch.linalg.vector_norm(g.to(torch.float64), norm_type) if g.numel()
                             else torch.zeros((), dtype=torch.float64, device=g.device) for g in gs]).cpu()
        part = norms.max() if inf else norms.pow(norm_type).sum()
        part = part.reshape(1).to(gs[0].device)
        for d in dims:
            if mesh.shape[d] > 1:
                dist.all_reduce(part, op=dist.ReduceOp.MAX if inf else dist.ReduceOp.SUM, group=mesh.get_group(d))
        part = part.cpu()[0]
        total = torch.maximum(total, part) if inf else total + part
    return total if inf else total.pow(1.0 / norm_type)
