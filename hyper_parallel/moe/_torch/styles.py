# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Parallel styles for ``GroupedExperts``, applied with ``parallelize_module`` like the TP styles:

* ``ExpertParallel()`` on a 1-D ``ep`` mesh: expert weights ``Shard(0)`` (``E / ep`` experts per rank;
  ``E`` must be divisible by ``ep``), tokens reach them through the dropless all-to-all dispatcher.
* ``ExpertTensorParallel()`` on a 2-D ``[ep, tp]`` mesh: as above over ``ep``, and each expert's
  hidden dim split over ``tp`` (``gate_proj``/``up_proj`` ``Shard(1)``, ``down_proj`` ``Shard(2)``):
  the tp ranks of one ep rank hold the same tokens; the experts' outputs are summed over ``tp`` and
  their input gradients too.
* ``TensorParallel()`` on a 1-D ``tp`` mesh: every expert on every rank, hidden dim split.

Plus the expert-FSDP helpers: :func:`init_expert_mesh` (the TorchTitan mesh rule
``efsdp * ep * etp = dp_shard * cp * tp``) and :func:`fully_shard_experts`.
"""
from __future__ import annotations

from typing import Optional

from hyper_parallel.core.placement import Shard
from hyper_parallel.moe.api import check_expert_parallel, expert_fsdp_degree
from hyper_parallel.tp._torch.styles import distribute_param
from hyper_parallel.tp.style import ParallelStyle

__all__ = ["ExpertParallel", "ExpertTensorParallel", "TensorParallel", "init_expert_mesh", "fully_shard_experts"]

_NAMES = ("gate_proj", "up_proj", "down_proj")


def _experts(module, style: str):
    from hyper_parallel.moe._torch.experts import GroupedExperts
    if not isinstance(module, GroupedExperts):
        raise TypeError(f"{style} applies to GroupedExperts (e.g. the plan key 'layers.*.mlp.experts'), got "
                        f"{type(module).__name__}")
    return module


def _mesh_dims(mesh, style: str):
    if mesh.ndim != 2:
        raise ValueError(f"{style}: expected a 2-D [ep, tp] device mesh, got {mesh}")
    names = mesh.mesh_dim_names or ()
    if "ep" in names and "tp" in names:
        return names.index("ep"), names.index("tp")
    return 0, 1


def _check_hidden(experts, tp: int, style: str) -> None:
    if experts.hidden_dim % tp:
        raise ValueError(f"{style}: hidden_dim={experts.hidden_dim} is not divisible by the tensor-parallel degree "
                         f"tp={tp}")


class ExpertParallel(ParallelStyle):
    """Experts split over a 1-D ``ep`` mesh, tokens exchanged by uneven all-to-all.

    Args:
        async_dispatch: issue the token all-to-all asynchronously (the shared experts run meanwhile).
        dispatcher: ``"all_to_all"`` (default) or ``"all_gather"`` (the baseline that gathers every token).
    """

    def __init__(self, *, async_dispatch: bool = True, dispatcher: str = "all_to_all") -> None:
        if dispatcher not in ("all_to_all", "all_gather"):
            raise ValueError(f"ExpertParallel(dispatcher): expected 'all_to_all' or 'all_gather', got {dispatcher!r}")
        self.async_dispatch = async_dispatch
        self.dispatcher = dispatcher

    def apply(self, module, device_mesh):
        from hyper_parallel.moe._torch.dispatcher import AllGatherTokenDispatcher, AllToAllTokenDispatcher
        experts = _experts(module, "ExpertParallel")
        if device_mesh.ndim != 1:
            raise ValueError(f"ExpertParallel: expected a 1-D ep mesh (slice it, e.g. mesh['ep']), got {device_mesh}")
        ep, rank = device_mesh.size(), device_mesh.get_local_rank(0)
        check_expert_parallel(experts.num_experts, ep)
        for name in _NAMES:
            distribute_param(experts, name, device_mesh, [Shard(0)])
        group = device_mesh.get_group(0)
        if self.dispatcher == "all_gather":
            experts.dispatcher = AllGatherTokenDispatcher(experts.num_experts, group, ep, rank)
        else:
            experts.dispatcher = AllToAllTokenDispatcher(experts.num_experts, group, ep, rank, self.async_dispatch)
        return experts


class ExpertTensorParallel(ParallelStyle):
    """Experts split over ``ep`` and each expert's hidden dim over ``tp`` on a 2-D ``[ep, tp]`` mesh
    (dims named ``"ep"``/``"tp"``, else in that order)."""

    def __init__(self, *, async_dispatch: bool = True) -> None:
        self.async_dispatch = async_dispatch

    def apply(self, module, device_mesh):
        from hyper_parallel.moe._torch.dispatcher import AllToAllTokenDispatcher
        experts = _experts(module, "ExpertTensorParallel")
        ep_dim, tp_dim = _mesh_dims(device_mesh, "ExpertTensorParallel")
        ep, tp = device_mesh.shape[ep_dim], device_mesh.shape[tp_dim]
        check_expert_parallel(experts.num_experts, ep)
        _check_hidden(experts, tp, "ExpertTensorParallel")
        for name, hidden in (("gate_proj", 1), ("up_proj", 1), ("down_proj", 2)):
            placements = [None, None]
            placements[ep_dim], placements[tp_dim] = Shard(0), Shard(hidden)
            distribute_param(experts, name, device_mesh, placements)
        coord = device_mesh.get_coordinate()
        experts.dispatcher = AllToAllTokenDispatcher(experts.num_experts, device_mesh.get_group(ep_dim), ep,
                                                     coord[ep_dim], self.async_dispatch)
        experts.tp_group = device_mesh.get_group(tp_dim)
        return experts


class TensorParallel(ParallelStyle):
    """Every expert on every rank of a 1-D ``tp`` mesh, hidden dim split (inputs replicated)."""

    def apply(self, module, device_mesh):
        experts = _experts(module, "TensorParallel")
        if device_mesh.ndim != 1:
            raise ValueError(f"TensorParallel: expected a 1-D tp mesh, got {device_mesh}")
        _check_hidden(experts, device_mesh.size(), "TensorParallel")
        for name, hidden in (("gate_proj", 1), ("up_proj", 1), ("down_proj", 2)):
            distribute_param(experts, name, device_mesh, [Shard(hidden)])
        experts.tp_group = device_mesh.get_group(0)
        return experts


def init_expert_mesh(device_type: str, *, dp_shard: int, cp: int = 1, tp: int = 1, ep: int, etp: int = 1):
    """The expert ("sparse") mesh over the ranks of the dense ``(dp_shard, cp, tp)`` mesh (row-major,
    as ``init_device_mesh`` numbers them): dims ``("efsdp", "ep")``, or ``("efsdp", "ep", "etp")`` when
    ``etp > 1``, with ``efsdp * ep * etp = dp_shard * cp * tp`` (errors name the dims). ``ep`` takes the
    ranks right outside ``etp``, so with ``etp = 1`` it borrows the tp (then cp, then dp) ranks first."""
    from hyper_parallel.core.device_mesh import DeviceMesh
    from hyper_parallel.core.process_group import get_world_size
    efsdp = expert_fsdp_degree(dp_shard=dp_shard, cp=cp, tp=tp, ep=ep, etp=etp)
    world = get_world_size()
    if efsdp * ep * etp != world:
        raise ValueError(f"init_expert_mesh: dp_shard*cp*tp = {dp_shard}*{cp}*{tp} = {efsdp * ep * etp} ranks but "
                         f"the world has {world}")
    ranks = [[list(range((f * ep + e) * etp, (f * ep + e + 1) * etp)) for e in range(ep)] for f in range(efsdp)]
    if etp == 1:
        return DeviceMesh(device_type, [[row[0] for row in block] for block in ranks], mesh_dim_names=("efsdp", "ep"))
    return DeviceMesh(device_type, ranks, mesh_dim_names=("efsdp", "ep", "etp"))


def fully_shard_experts(experts, expert_mesh, *, data_parallel_size: Optional[int] = None, **fsdp_kwargs):
    """``fully_shard`` an expert-parallel ``GroupedExperts`` over the ``efsdp`` dim of ``expert_mesh``.

    Its gradients are reduced over ``efsdp`` and scaled so that they are the average over
    ``data_parallel_size`` loss replicas (default: every rank of the expert mesh holds its own batch,
    i.e. ``efsdp * ep``): each expert's local gradient already sums the tokens of its whole ep group.
    Expert tensor parallelism (a 3-D expert mesh) is refused: FSDP composes with a 1-D TP mesh only.
    """
    from hyper_parallel.fsdp._torch.fully_shard import fully_shard
    names = expert_mesh.mesh_dim_names or ()
    if names != ("efsdp", "ep"):
        raise ValueError(f"fully_shard_experts: expected the expert mesh of init_expert_mesh with dims ('efsdp', 'ep') "
                         f"(expert tensor parallelism with FSDP is not supported), got {expert_mesh}")
    efsdp, ep = expert_mesh.shape
    dp = efsdp * ep if data_parallel_size is None else data_parallel_size
    if isinstance(dp, bool) or not isinstance(dp, int) or dp < 1:
        raise ValueError(f"fully_shard_experts(data_parallel_size): expected an int >= 1, got {data_parallel_size!r}")
    fully_shard(experts, mesh=expert_mesh["efsdp"], **fsdp_kwargs)
    experts.set_gradient_scaling_factor(efsdp / dp)
    return experts
