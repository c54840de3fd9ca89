# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""MindSpore implementation of the backend interface (PyNative; ``mccl`` on CPU, ``hccl`` on Ascend).

Process groups are MindSpore communication groups, represented by :class:`MsGroup` (name + global
ranks). The world group is initialised with ``mindspore.communication.init`` from the variables
``msrun`` (or the dynamic-cluster launch in ``hyper_parallel.testing.mindspore_launch``) sets.
Collectives missing on CPU are emulated in ``collectives.py``, which documents each cost.
"""
from __future__ import annotations

import hashlib
import os
from datetime import timedelta
from typing import Any, Dict, Optional, Sequence, Tuple

import mindspore as ms
from mindspore import ops
import mindspore.communication as mscomm
import mindspore.mint.distributed as msdist

from hyper_parallel.platform.base import CollectiveHandle, CompletedHandle, Platform, record_collective_timeout
from hyper_parallel.platform.mindspore import collectives as C
from hyper_parallel.platform.mindspore.collectives import MsGroup

__all__ = ["MindSporePlatform", "MsGroup"]

#: accepted backend names -> MindSpore communication backend, per device target
_CPU_BACKENDS = {None: "mccl", "gloo": "mccl", "mccl": "mccl"}
_ACCEL_BACKENDS = {"hccl": ("Ascend", "hccl"), "nccl": ("GPU", "nccl")}


def _not_supported(what: str, why: str) -> RuntimeError:
    return RuntimeError(f"{what} is not supported on MindSpore because {why}")


class MindSporePlatform(Platform):
    """MindSpore communication (``mccl`` on CPU; ``hccl`` on Ascend, named but untested here)."""

    name = "mindspore"
    module_type = ms.nn.Cell
    submodules_method = "cells_and_names"
    submodule_word = "sub-cell"

    def __init__(self) -> None:
        self._world: Optional[MsGroup] = None
        self._groups: Dict[Tuple[int, ...], MsGroup] = {}
        self._backend = ""
        self._device = "cpu"

    # ------------------------------------------------------------------ process groups
    def init_process_group(self, backend: Optional[str] = None, *, rank: Optional[int] = None,
                           world_size: Optional[int] = None, init_method: Optional[str] = None,
                           timeout: Optional[timedelta] = None) -> None:
        """Initialise the world group. ``rank``/``world_size`` must match the launcher's (MindSpore
        takes them from ``msrun`` / ``MS_*`` variables); ``init_method`` is not supported (MindSpore
        rendezvous goes through its scheduler, ``MS_SCHED_HOST``/``MS_SCHED_PORT``)."""
        record_collective_timeout(self.name, timeout)
        if self._world is not None:
            return
        if init_method is not None:
            raise _not_supported("init_process_group(init_method=...)", "its rendezvous goes through the msrun "
                                 "scheduler (MS_SCHED_HOST / MS_SCHED_PORT), not a URL")
        if backend in _ACCEL_BACKENDS:
            device, comm = _ACCEL_BACKENDS[backend]
        elif backend in _CPU_BACKENDS:
            device, comm = "CPU", _CPU_BACKENDS[backend]
        else:
            raise ValueError(f"init_process_group(backend={backend!r}): expected mccl (CPU; gloo is accepted as "
                             f"its alias), hccl (Ascend) or nccl (GPU)")
        ms.set_device(device)
        if timeout is not None:
            os.environ.setdefault("MS_RECEIVE_MSG_TIMEOUT", str(int(timeout.total_seconds())))
        mscomm.init(comm)
        n = mscomm.get_group_size()
        me = mscomm.get_rank()
        if world_size is not None and world_size != n:
            raise ValueError(f"init_process_group(world_size={world_size}): the MindSpore cluster has {n} ranks")
        if rank is not None and rank != me:
            raise ValueError(f"init_process_group(rank={rank}): the MindSpore cluster assigned rank {me}")
        self._world = MsGroup(mscomm.GlobalComm.WORLD_COMM_GROUP, range(n), True)
        self._backend = comm
        self._device = device.lower() if device != "Ascend" else "npu"

    def is_initialized(self) -> bool:
        return self._world is not None

    def destroy_process_group(self, group: Any = None) -> None:
        if group is None:
            if self._world is not None:
                mscomm.release()
            self._world = None
            self._groups.clear()
        elif not group.is_world and group.size > 1 and mscomm.get_rank() in group.ranks:
            mscomm.destroy_group(group.name)
            self._groups.pop(group.ranks, None)

    def _require(self) -> MsGroup:
        if self._world is None:
            raise RuntimeError("MindSpore backend: the default process group is not initialised; call "
                               "hyper_parallel.init_process_group(platform='mindspore') first (launch with msrun)")
        return self._world

    def get_rank(self, group: Any = None) -> int:
        self._require()
        me = mscomm.get_rank()
        return me if group is None else group.ranks.index(me)

    def get_world_size(self, group: Any = None) -> int:
        world = self._require()
        return world.size if group is None else group.size

    def new_group(self, ranks: Sequence[int]) -> Any:
        world = self._require()
        ranks = tuple(int(r) for r in ranks)
        if ranks == world.ranks:
            return world
        group = self._groups.get(ranks)
        if group is None:  # one MindSpore group per rank tuple, however many times it is asked for
            digest = hashlib.sha1(",".join(map(str, ranks)).encode()).hexdigest()[:12]
            group = MsGroup(f"hp_{self._backend}_{len(ranks)}_{digest}", ranks, False)
            if len(ranks) > 1 and mscomm.get_rank() in ranks:
                mscomm.create_group(group.name, list(ranks))
            self._groups[ranks] = group
        return group

    def get_process_group_ranks(self, group: Any) -> Tuple[int, ...]:
        return (group or self._require()).ranks

    def get_backend(self, group: Any = None) -> str:
        self._require()
        return self._backend

    def default_device_type(self) -> str:
        return self._device

    # ------------------------------------------------------------------ tensors
    def is_tensor(self, obj: Any) -> bool:
        return isinstance(obj, ms.Tensor)

    def narrow(self, x: Any, dim: int, start: int, length: int) -> Any:
        from mindspore import mint
        return mint.narrow(x, dim, start, length)

    def zeros_like(self, x: Any) -> Any:
        return ops.zeros_like(x)

    def output_shapes(self, op, args, kwargs, shapes):
        """None: MindSpore 2.10 has no data-free evaluation of a ``mint`` op on CPU (no meta device), so a
        strategy table whose shapes are ``meta`` runs such a call replicated (``fallback: replicate``)."""
        del op, args, kwargs, shapes

    # ------------------------------------------------------------------ DTensor and random state
    def manual_seed(self, seed: int) -> None:
        ms.set_seed(seed)

    # ------------------------------------------------------------------ differentiable collectives
    def all_gather(self, x, group, dim, sizes, index, grad_partial=False):
        return C.AllGather.apply(x, group, dim, C.sizes_tuple(sizes), index, grad_partial)

    def chunk(self, x, dim, sizes, index, group):
        return C.Chunk.apply(x, dim, C.sizes_tuple(sizes), index, group)

    def all_reduce(self, x, op, group):
        return C.AllReduce.apply(x, op, group)

    def reduce_scatter(self, x, op, group, dim, sizes, index):
        return C.ReduceScatter.apply(x, op, group, dim, C.sizes_tuple(sizes), index)

    def all_to_all(self, x, group, split_dim, concat_dim, split_sizes, concat_sizes, index):
        return C.AllToAll.apply(x, group, split_dim, concat_dim, C.sizes_tuple(split_sizes),
                                C.sizes_tuple(concat_sizes), index)

    def make_partial(self, x, op, index, group_size):
        return C.MakePartial.apply(x, op, index, group_size)

    def grad_all_reduce(self, x, group):
        if group.size == 1:
            return x
        return C.GradAllReduce.apply(x, group)

    def scale_grad(self, x, factor):
        return C.ScaleGrad.apply(x, factor)

    def broadcast(self, x, src, group):
        return C.raw_broadcast(x, src, group or self._require())

    def batch_isend_irecv(self, ops):  # pylint: disable=redefined-outer-name
        """Emulated: every op is a broadcast over the pair group ``(sender, receiver)`` run at once, in the
        order given, so both sides must list their ops in the same order (the pipeline runtime issues one
        op per call, in the validated global order). Handles are complete when returned."""
        return [C.P2PDone(C.pair_transfer(op.tensor, op.op, op.peer, self.new_group)) for op in ops]

    def barrier(self, group: Any = None) -> None:
        group = group or self._require()
        if group.size > 1:
            msdist.barrier(group=None if group.is_world else group.name)

    # ------------------------------------------------------------------ uneven all-to-all (expert parallel)
    def all_to_all_single(self, x, group, output_split_sizes, input_split_sizes):
        """Emulated with all-gathers on CPU (see ``collectives.raw_all_to_all_single`` for the cost)."""
        return C.AllToAllSingle.apply(x, group, C.sizes_tuple(output_split_sizes), C.sizes_tuple(input_split_sizes))

    def all_to_all_single_start(self, x, group, output_split_sizes, input_split_sizes) -> CollectiveHandle:
        """Synchronous on MindSpore (its CPU collectives have no asynchronous form): the exchange runs
        here and the handle is already complete, so nothing overlaps it."""
        return CompletedHandle(self.all_to_all_single(x, group, output_split_sizes, input_split_sizes))


#: the one instance (``hyper_parallel.platform.get_platform("mindspore")`` returns it)
PLATFORM = MindSporePlatform()
C.set_group_factory(PLATFORM.new_group)
