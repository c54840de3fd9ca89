# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""PyTorch implementation of the backend interface (CPU/gloo and CUDA/NCCL)."""
from __future__ import annotations

import os
from datetime import timedelta
from typing import Any, Optional, Sequence, Tuple

import torch
import torch.distributed as dist

from hyper_parallel.platform.base import CollectiveHandle, Platform, record_collective_timeout
from hyper_parallel.platform.torch import collectives as C
from hyper_parallel.platform.torch.lanes import forget_twins


class TorchPlatform(Platform):
    """torch.distributed over gloo (CPU) or NCCL (CUDA)."""

    name = "torch"
    module_type = torch.nn.Module
    submodules_method = "named_modules"
    submodule_word = "submodule"

    # ------------------------------------------------------------------ process groups
    def init_process_group(self, backend: Optional[str] = None, *, rank: Optional[int] = None,
                           world_size: Optional[int] = None, init_method: Optional[str] = None,
                           timeout: Optional[timedelta] = None) -> None:
        record_collective_timeout(self.name, timeout)
        if dist.is_initialized():
            return
        if backend is None:
            backend = "nccl" if torch.cuda.is_available() and os.environ.get("HYPER_PARALLEL_DEVICE") != "cpu" \
                else "gloo"
        kwargs = {"backend": backend}
        if rank is not None:
            kwargs["rank"] = rank
        if world_size is not None:
            kwargs["world_size"] = world_size
        if init_method is not None:
            kwargs["init_method"] = init_method
        if timeout is not None:
            kwargs["timeout"] = timeout
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(**kwargs)

    def is_initialized(self) -> bool:
        return dist.is_available() and dist.is_initialized()

    def destroy_process_group(self, group: Any = None) -> None:
        if group is None:
            C.forget_orders()
            forget_twins()
        if dist.is_initialized():
            dist.destroy_process_group(group)

    def get_rank(self, group: Any = None) -> int:
        return dist.get_rank(group) if group is not None else dist.get_rank()

    def get_world_size(self, group: Any = None) -> int:
        return dist.get_world_size(group) if group is not None else dist.get_world_size()

    def new_group(self, ranks: Sequence[int]) -> Any:
        ranks = list(ranks)
        if ranks == list(range(dist.get_world_size())):
            return dist.group.WORLD
        group = dist.new_group(ranks)
        C.set_group_order(group, ranks)  # a mesh dim over unsorted ranks keeps its order in collectives
        return group

    def get_process_group_ranks(self, group: Any) -> Tuple[int, ...]:
        return tuple(dist.get_process_group_ranks(group if group is not None else dist.group.WORLD))

    def get_backend(self, group: Any = None) -> str:
        return str(dist.get_backend(group))

    def default_device_type(self) -> str:
        if dist.is_initialized():
            return "cuda" if dist.get_backend() == "nccl" else "cpu"
        from hyper_parallel.platform.torch.device import default_device_type  # pylint: disable=C0415
        return default_device_type()  # before the process group: what init_process_group would pick

    # ------------------------------------------------------------------ tensors
    def is_tensor(self, obj: Any) -> bool:
        return isinstance(obj, torch.Tensor)

    def narrow(self, x: Any, dim: int, start: int, length: int) -> Any:
        return x.narrow(dim, start, length)

    def zeros_like(self, x: Any) -> Any:
        return torch.zeros_like(x)

    def output_shapes(self, op, args, kwargs, shapes):
        """The op run on ``meta`` tensors (float32) of the global shapes; None when the name is not a torch op
        or the op does not run on meta tensors of that dtype (index arguments, data-dependent shapes)."""
        from hyper_parallel.platform.torch.names import resolve_torch_name  # pylint: disable=import-outside-toplevel
        try:
            fn = resolve_torch_name(op)
        except Exception:  # pylint: disable=broad-except  # an unknown name: the shapes are not known
            return None
        if fn is None:
            return None

        def meta(v):
            if isinstance(v, tuple) and len(v) == 2 and v[0] == "__tensor__":
                return torch.empty(tuple(shapes[v[1]]), dtype=torch.float32, device="meta")
            if type(v) in (list, tuple):  # pylint: disable=unidiomatic-typecheck
                return type(v)(meta(x) for x in v)
            return v
        try:
            with torch.no_grad():
                out = fn(*[meta(a) for a in args], **{k: meta(v) for k, v in kwargs.items()})
        except Exception:  # pylint: disable=broad-except  # no meta kernel or an argument meta cannot take
            return None
        outs = list(out) if isinstance(out, (list, tuple)) else [out]
        if not all(isinstance(o, torch.Tensor) for o in outs):
            return None
        return [tuple(o.shape) for o in outs]

    # ------------------------------------------------------------------ DTensor and random state
    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    # ------------------------------------------------------------------ differentiable collectives
    def all_gather(self, x, group, dim, sizes, index, grad_partial=False):
        if x.requires_grad and torch.is_grad_enabled():
            return C.AllGather.apply(x, group, dim, tuple(sizes), index, grad_partial)
        return C.raw_all_gather(x, group, dim, sizes)

    def chunk(self, x, dim, sizes, index, group):
        if x.requires_grad and torch.is_grad_enabled():
            return C.Chunk.apply(x, dim, tuple(sizes), index, group)
        start = sum(sizes[:index])
        return x.narrow(dim, start, sizes[index]).clone()

    def all_reduce(self, x, op, group):
        if x.requires_grad and torch.is_grad_enabled():
            return C.AllReduce.apply(x, op, group)
        return C.raw_all_reduce(x, op, group)

    def reduce_scatter(self, x, op, group, dim, sizes, index):
        if x.requires_grad and torch.is_grad_enabled():
            return C.ReduceScatter.apply(x, op, group, dim, tuple(sizes), index)
        return C.raw_reduce_scatter(x, op, group, dim, sizes, index)

    def all_to_all(self, x, group, split_dim, concat_dim, split_sizes, concat_sizes, index):
        if x.requires_grad and torch.is_grad_enabled():
            return C.AllToAll.apply(x, group, split_dim, concat_dim, tuple(split_sizes), tuple(concat_sizes), index)
        return C.raw_all_to_all(x, group, split_dim, concat_dim, split_sizes, concat_sizes, index)

    def make_partial(self, x, op, index, group_size):
        if x.requires_grad and torch.is_grad_enabled():
            return C.MakePartial.apply(x, op, index, group_size)
        if op == "sum" and index != 0:
            return torch.zeros_like(x)
        return x.clone()

    def grad_all_reduce(self, x, group):
        if x.requires_grad and torch.is_grad_enabled():
            return C.GradAllReduce.apply(x, group)
        return x

    def scale_grad(self, x, factor):
        if x.requires_grad and torch.is_grad_enabled():
            return C.ScaleGrad.apply(x, factor)
        return x

    def broadcast(self, x, src, group):
        return C.raw_broadcast(x, src, group)

    def barrier(self, group: Any = None) -> None:
        dist.barrier(group=group)

    def batch_isend_irecv(self, ops):
        return C.batch_isend_irecv(ops)

    # ------------------------------------------------------------------ uneven all-to-all (expert parallel)
    def all_to_all_single(self, x, group, output_split_sizes, input_split_sizes):
        outs = tuple(int(s) for s in output_split_sizes)
        ins = tuple(int(s) for s in input_split_sizes)
        if x.requires_grad and torch.is_grad_enabled():
            return C.AllToAllSingle.apply(x, group, outs, ins)
        return C.raw_all_to_all_single(x, group, outs, ins)

    def all_to_all_single_start(self, x, group, output_split_sizes, input_split_sizes) -> CollectiveHandle:
        """Asynchronous on every c10d backend (gloo runs it on its worker threads): forward and the
        inverse exchange in backward both overlap with the work done before ``wait()``."""
        return C.AsyncAllToAll(x, group, output_split_sizes, input_split_sizes)


#: the one instance (``hyper_parallel.platform.get_platform("torch")`` returns it)
PLATFORM = TorchPlatform()
