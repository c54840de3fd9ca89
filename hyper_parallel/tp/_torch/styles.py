# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The torch implementation of the TP styles of ``hyper_parallel.tp.style``: parameters become
``nn.Parameter(DTensor)``; forward pre-/post-hooks lay out inputs and outputs."""
from __future__ import annotations

from typing import Any, Optional

import torch

from hyper_parallel.core.placement import Placement, Replicate, Shard
from hyper_parallel.platform.torch.dtensor import DTensor, distribute_tensor
from hyper_parallel.tp.layouts import check_one_dim_mesh

__all__ = ["apply_style", "distribute_param"]


def _to_dtensor(x: Any, mesh, layout: Optional[Placement]):
    """Wrap a plain tensor with ``layout`` (1-D mesh); DTensors and non-tensors pass through."""
    if layout is None or not isinstance(x, torch.Tensor) or isinstance(x, DTensor):
        return x
    return DTensor.from_local(x, mesh, [layout])


def _redistribute(x: Any, mesh, layout: Optional[Placement], grad_partial: bool = False):
    if layout is None or not isinstance(x, DTensor):
        return x
    if x.placements == (layout,):
        return x
    return x.redistribute(mesh, [layout], grad_partial=grad_partial)


def _local(x: Any, use_local: bool):
    return x.to_local() if use_local and isinstance(x, DTensor) else x


def distribute_param(module, name: str, mesh, placements) -> None:
    """Replace parameter ``name`` of ``module`` by an ``nn.Parameter(DTensor)`` laid out as ``placements``
    (the parameter must hold the same full value on every rank; a missing parameter is left alone)."""
    param = getattr(module, name, None)
    if param is None:
        return
    if isinstance(param, DTensor):
        raise ValueError(f"{type(module).__name__}.{name} is already a DTensor ({param.placements}); a module can be "
                         "parallelized once per mesh")
    dparam = torch.nn.Parameter(distribute_tensor(param.detach(), mesh, placements, src_data_rank=None),
                                requires_grad=param.requires_grad)
    module.register_parameter(name, dparam)


def _linear_params(style, module, mesh):
    """Shard the parameters; (default input layout, default output layout, is_embedding)."""
    if isinstance(module, torch.nn.Linear):
        distribute_param(module, "weight", mesh, [Shard(style.weight_dim)])
        distribute_param(module, "bias", mesh, [style.bias_placement])
        return (*style.default_linear_layouts(), False)
    if isinstance(module, torch.nn.Embedding):
        distribute_param(module, "weight", mesh, [Shard(1 - style.weight_dim)])
        return (*style.default_embedding_layouts(), True)
    raise TypeError(f"{type(style).__name__} supports nn.Linear and nn.Embedding, got {type(module).__name__}")


def _hooks(module, pre, post):
    if pre is not None:
        module.register_forward_pre_hook(pre)
    if post is not None:
        module.register_forward_hook(post)
    return module


def _first_arg_hooks(module, mesh, in_layout, desired, out_layout, use_local):
    def pre_hook(_mod, args):
        if not args:
            return args
        x = _redistribute(_to_dtensor(args[0], mesh, in_layout), mesh, desired)
        return (x,) + tuple(args[1:])

    def post_hook(_mod, _args, out):
        return _local(_redistribute(out, mesh, out_layout), use_local)

    return _hooks(module, pre_hook, post_hook)


def _apply_linear(style, module, mesh):
    check_one_dim_mesh(mesh, type(style).__name__)
    default_in, default_out, is_embedding = _linear_params(style, module, mesh)
    in_layout = (style.input_layouts or (default_in,))[0]
    out_layout = (style.output_layouts or (default_out,))[0]
    desired = style.desired_input(is_embedding)
    if getattr(style, "overlap", None) == "mc2":
        desired = _mc2_forward(style, module, mesh, in_layout, out_layout)
    return _first_arg_hooks(module, mesh, in_layout, desired, out_layout, style.use_local_output)


def _mc2_forward(style, module, mesh, in_layout, out_layout) -> Placement:
    """Replace ``module.forward`` by the MC2 op of the style; returns the input layout it computes on."""
    from hyper_parallel.kernels._torch.mc2 import all_gather_matmul, matmul_reduce_scatter
    name = type(style).__name__
    colwise = style.kind == "colwise"
    seq = in_layout if colwise else out_layout
    if not isinstance(module, torch.nn.Linear):
        raise TypeError(f"{name}(overlap='mc2') supports nn.Linear, got {type(module).__name__}")
    if not isinstance(seq, Shard):
        which = "input_layouts" if colwise else "output_layouts"
        raise ValueError(f"{name}(overlap='mc2') needs sequence parallel: {which}=Shard(seq_dim), got {seq}")
    group = mesh.get_group(0)

    def forward(x):
        local = x.to_local() if isinstance(x, DTensor) else x
        dim = seq.dim % local.dim()
        if dim == local.dim() - 1:
            raise ValueError(f"{name}(overlap='mc2'): the sequence dim {seq.dim} is the feature dim of the input")
        w = module.weight.to_local().t()
        if colwise:
            out = DTensor.from_local(all_gather_matmul(local, w, group, dim), mesh, [Shard(local.dim() - 1)])
        else:
            out = DTensor.from_local(matmul_reduce_scatter(local, w, group, dim), mesh, [Shard(dim)])
        return out if module.bias is None else out + module.bias  # DTensor add: bias gradients reduced

    module.forward = forward
    return in_layout if colwise else style.desired_input(False)


def _apply_sequence(style, module, mesh):
    check_one_dim_mesh(mesh, "SequenceParallel")
    for name, _ in list(module.named_parameters(recurse=False)):
        distribute_param(module, name, mesh, [Replicate()])
    layout = Shard(style.sequence_dim)
    return _first_arg_hooks(module, mesh, layout, layout, layout, style.use_local_output)


def _apply_prepare_input(style, module, mesh):
    check_one_dim_mesh(mesh, "PrepareModuleInput")

    def one(x, src, dst):
        x = _redistribute(_to_dtensor(x, mesh, src), mesh, dst, grad_partial=style.partial_grad_on_gather)
        return _local(x, style.use_local_output)

    def pre_hook(_mod, args, kwargs):
        new_args = list(args)
        for i, (src, dst) in enumerate(zip(style.input_layouts, style.desired)):
            if i < len(new_args):
                new_args[i] = one(new_args[i], src, dst)
        new_kwargs = dict(kwargs)
        for key, src in style.kw_in.items():
            if key in new_kwargs:
                new_kwargs[key] = one(new_kwargs[key], src, style.kw_desired.get(key, src))
        return tuple(new_args), new_kwargs

    module.register_forward_pre_hook(pre_hook, with_kwargs=True)
    return module


def _apply_prepare_output(style, module, mesh):
    check_one_dim_mesh(mesh, "PrepareModuleOutput")

    def post_hook(_mod, _args, out):
        single = not isinstance(out, tuple)
        outs = (out,) if single else out
        res = []
        for i, o in enumerate(outs):
            if i < len(style.output_layouts):
                o = _redistribute(_to_dtensor(o, mesh, style.output_layouts[i]), mesh, style.desired[i])
                o = _local(o, style.use_local_output)
            res.append(o)
        return res[0] if single else tuple(res)

    return _hooks(module, None, post_hook)


_APPLY = {"colwise": _apply_linear, "rowwise": _apply_linear, "sequence": _apply_sequence,
          "prepare_input": _apply_prepare_input, "prepare_output": _apply_prepare_output}


def apply_style(style, module, device_mesh):
    """Apply built-in ``style`` (a ``hyper_parallel.tp.style`` object, by its ``kind``) to the torch module
    ``module`` (in place) and return it."""
    fn = _APPLY.get(getattr(style, "kind", None))
    if fn is None:
        raise TypeError(f"{type(style).__name__} has no torch implementation")
    return fn(style, module, device_mesh)
