# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Tensor-parallel styles with PyTorch-compatible names and semantics.

A style shards a module's parameters (as ``nn.Parameter(DTensor)``) and installs forward hooks that
lay out its inputs (plain tensors are wrapped with ``DTensor.from_local`` using ``input_layouts``,
then redistributed to the layout the module wants) and its outputs (redistributed to
``output_layouts``; converted back to local tensors when ``use_local_output``).

* ``ColwiseParallel``   Linear weight ``Shard(0)`` (+ bias ``Shard(0)``), Embedding weight ``Shard(1)``;
                        input ``Replicate`` by default, output ``Shard(-1)``.
* ``RowwiseParallel``   Linear weight ``Shard(1)`` (bias ``Replicate``), Embedding weight ``Shard(0)``
                        (vocabulary-parallel); input ``Shard(-1)`` (Embedding: ``Replicate``), output
                        ``Replicate`` (set ``Shard(1)`` for sequence parallel: a reduce-scatter).
* ``SequenceParallel``  parameters replicated; input/output sharded on the sequence dim.
* ``PrepareModuleInput`` / ``PrepareModuleOutput`` / ``PrepareModuleInputOutput``: layouts only.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Dict, Optional, Sequence, Tuple, Union

from hyper_parallel.core.placement import Placement, Replicate, Shard

__all__ = ["ParallelStyle", "ColwiseParallel", "RowwiseParallel", "SequenceParallel", "PrepareModuleInput",
           "PrepareModuleOutput", "PrepareModuleInputOutput"]

Layouts = Union[None, Placement, Sequence[Optional[Placement]]]


def _as_tuple(layouts: Layouts) -> Optional[Tuple[Optional[Placement], ...]]:
    if layouts is None:
        return None
    if isinstance(layouts, Placement):
        return (layouts,)
    return tuple(layouts)


def _to_dtensor(x: Any, mesh, layout: Optional[Placement]):
    """Wrap a plain tensor with ``layout`` (1-D mesh); DTensors and non-tensors pass through."""
    import torch
    from hyper_parallel.platform.torch.dtensor import DTensor
    if layout is None or not isinstance(x, torch.Tensor) or isinstance(x, DTensor):
        return x
    return DTensor.from_local(x, mesh, [layout])


def _redistribute(x: Any, mesh, layout: Optional[Placement], grad_partial: bool = False):
    from hyper_parallel.platform.torch.dtensor import DTensor
    if layout is None or not isinstance(x, DTensor):
        return x
    if x.placements == (layout,):
        return x
    return x.redistribute(mesh, [layout], grad_partial=grad_partial)


def _local(x: Any, use_local: bool):
    from hyper_parallel.platform.torch.dtensor import DTensor
    return x.to_local() if use_local and isinstance(x, DTensor) else x


def _distribute_param(module, name: str, mesh, placements) -> None:
    import torch
    from hyper_parallel.platform.torch.dtensor import DTensor, distribute_tensor
    param = getattr(module, name, None)
    if param is None:
        return
    if isinstance(param, DTensor):
        raise ValueError(f"{type(module).__name__}.{name} is already a DTensor ({param.placements}); a module can be "
                         "parallelized once per mesh")
    dparam = torch.nn.Parameter(distribute_tensor(param.detach(), mesh, placements, src_data_rank=None),
                                requires_grad=param.requires_grad)
    module.register_parameter(name, dparam)


def _check_mesh(mesh, style: str) -> None:
    if mesh.ndim != 1:
        raise ValueError(f"{style}: expected a 1-D device mesh (slice it, e.g. mesh['tp']), got {mesh}")


class ParallelStyle(ABC):
    """Base class: ``apply(module, device_mesh)`` shards parameters and installs hooks."""

    @abstractmethod
    def apply(self, module, device_mesh):
        """Parallelise ``module`` in place and return it."""


class _LinearStyle(ParallelStyle):
    weight_dim: int
    bias_placement: Placement

    def __init__(self, *, input_layouts: Layouts = None, output_layouts: Layouts = None,
                 use_local_output: bool = True) -> None:
        self.input_layouts = _as_tuple(input_layouts)
        self.output_layouts = _as_tuple(output_layouts)
        self.use_local_output = use_local_output

    def _params(self, module, mesh) -> Tuple[Placement, Placement]:
        import torch
        if isinstance(module, torch.nn.Linear):
            _distribute_param(module, "weight", mesh, [Shard(self.weight_dim)])
            _distribute_param(module, "bias", mesh, [self.bias_placement])
            return self.default_linear_layouts()
        if isinstance(module, torch.nn.Embedding):
            _distribute_param(module, "weight", mesh, [Shard(1 - self.weight_dim)])
            return self.default_embedding_layouts()
        raise TypeError(f"{type(self).__name__} supports nn.Linear and nn.Embedding, got {type(module).__name__}")

    def default_linear_layouts(self) -> Tuple[Placement, Placement]:
        """(input layout, output layout) defaults for nn.Linear."""
        raise TypeError(type(self).__name__)

    def default_embedding_layouts(self) -> Tuple[Placement, Placement]:
        """(input layout, output layout) defaults for nn.Embedding."""
        raise TypeError(type(self).__name__)

    def desired_input(self, module) -> Placement:
        """The layout the module computes on."""
        raise TypeError(type(self).__name__)

    def apply(self, module, device_mesh):
        _check_mesh(device_mesh, type(self).__name__)
        default_in, default_out = self._params(module, device_mesh)
        in_layout = (self.input_layouts or (default_in,))[0]
        out_layout = (self.output_layouts or (default_out,))[0]
        desired = self.desired_input(module)
        use_local = self.use_local_output

        def pre_hook(_mod, args):
            if not args:
                return args
            x = _redistribute(_to_dtensor(args[0], device_mesh, in_layout), device_mesh, desired)
            return (x,) + tuple(args[1:])

        def post_hook(_mod, _args, out):
            return _local(_redistribute(out, device_mesh, out_layout), use_local)

        module.register_forward_pre_hook(pre_hook)
        module.register_forward_hook(post_hook)
        return module


class ColwiseParallel(_LinearStyle):
    """Column-wise sharding: the output features (Linear) / embedding dim (Embedding) are split."""

    weight_dim = 0
    bias_placement = Shard(0)

    def default_linear_layouts(self):
        return Replicate(), Shard(-1)

    def default_embedding_layouts(self):
        return Replicate(), Shard(-1)

    def desired_input(self, module):
        return Replicate()


class RowwiseParallel(_LinearStyle):
    """Row-wise sharding: the input features (Linear) / vocabulary (Embedding) are split."""

    weight_dim = 1
    bias_placement = Replicate()

    def default_linear_layouts(self):
        return Shard(-1), Replicate()

    def default_embedding_layouts(self):
        return Replicate(), Replicate()

    def desired_input(self, module):
        import torch
        return Replicate() if isinstance(module, torch.nn.Embedding) else Shard(-1)


class SequenceParallel(ParallelStyle):
    """Replicated parameters, activations sharded on ``sequence_dim`` (norms, dropout)."""

    def __init__(self, *, sequence_dim: int = 1, use_local_output: bool = False) -> None:
        self.sequence_dim = sequence_dim
        self.use_local_output = use_local_output

    def apply(self, module, device_mesh):
        _check_mesh(device_mesh, "SequenceParallel")
        for name, _ in list(module.named_parameters(recurse=False)):
            _distribute_param(module, name, device_mesh, [Replicate()])
        layout = Shard(self.sequence_dim)
        use_local = self.use_local_output

        def pre_hook(_mod, args):
            if not args:
                return args
            x = _redistribute(_to_dtensor(args[0], device_mesh, layout), device_mesh, layout)
            return (x,) + tuple(args[1:])

        def post_hook(_mod, _args, out):
            return _local(_redistribute(out, device_mesh, layout), use_local)

        module.register_forward_pre_hook(pre_hook)
        module.register_forward_hook(post_hook)
        return module


class PrepareModuleInput(ParallelStyle):
    """Lay out positional (and keyword) inputs: ``input_layouts`` -> ``desired_input_layouts``.

    ``partial_grad_on_gather=True`` (sequence parallel into column-parallel consumers): the gathered
    input promises that its consumers deliver partial gradients, so backward does ONE reduce-scatter
    instead of an all-reduce per consumer (see ``DTensor.redistribute(grad_partial=...)``); the
    dispatcher keeps the promise for consumers that do not (scaling their full gradients by 1/n).
    """

    def __init__(self, *, input_layouts: Layouts = None, desired_input_layouts: Layouts = None,
                 input_kwarg_layouts: Optional[Dict[str, Placement]] = None,
                 desired_input_kwarg_layouts: Optional[Dict[str, Placement]] = None,
                 use_local_output: bool = False, partial_grad_on_gather: bool = False) -> None:
        self.input_layouts = _as_tuple(input_layouts) or ()
        self.desired = _as_tuple(desired_input_layouts) or ()
        if len(self.input_layouts) != len(self.desired):
            raise ValueError(f"PrepareModuleInput: input_layouts {self.input_layouts} and desired_input_layouts "
                             f"{self.desired} must have the same length")
        self.kw_in = dict(input_kwarg_layouts or {})
        self.kw_desired = dict(desired_input_kwarg_layouts or {})
        self.use_local_output = use_local_output
        self.partial_grad_on_gather = partial_grad_on_gather
        if partial_grad_on_gather and use_local_output:
            raise ValueError("PrepareModuleInput: partial_grad_on_gather needs use_local_output=False (the promise "
                             "travels with the DTensor to its consumers)")

    def _one(self, x, mesh, src, dst):
        x = _redistribute(_to_dtensor(x, mesh, src), mesh, dst, grad_partial=self.partial_grad_on_gather)
        return _local(x, self.use_local_output)

    def apply(self, module, device_mesh):
        _check_mesh(device_mesh, "PrepareModuleInput")

        def pre_hook(_mod, args, kwargs):
            new_args = list(args)
            for i, (src, dst) in enumerate(zip(self.input_layouts, self.desired)):
                if i < len(new_args):
                    new_args[i] = self._one(new_args[i], device_mesh, src, dst)
            new_kwargs = dict(kwargs)
            for key, src in self.kw_in.items():
                if key in new_kwargs:
                    new_kwargs[key] = self._one(new_kwargs[key], device_mesh, src, self.kw_desired.get(key, src))
            return tuple(new_args), new_kwargs

        module.register_forward_pre_hook(pre_hook, with_kwargs=True)
        return module


class PrepareModuleOutput(ParallelStyle):
    """Lay out outputs: ``output_layouts`` -> ``desired_output_layouts``."""

    def __init__(self, *, output_layouts: Layouts, desired_output_layouts: Layouts,
                 use_local_output: bool = True) -> None:
        self.output_layouts = _as_tuple(output_layouts) or ()
        self.desired = _as_tuple(desired_output_layouts) or ()
        if len(self.output_layouts) != len(self.desired):
            raise ValueError("PrepareModuleOutput: output_layouts and desired_output_layouts differ in length")
        self.use_local_output = use_local_output

    def apply(self, module, device_mesh):
        _check_mesh(device_mesh, "PrepareModuleOutput")

        def post_hook(_mod, _args, out):
            single = not isinstance(out, tuple)
            outs = (out,) if single else out
            res = []
            for i, o in enumerate(outs):
                if i < len(self.output_layouts):
                    o = _redistribute(_to_dtensor(o, device_mesh, self.output_layouts[i]), device_mesh,
                                      self.desired[i])
                    o = _local(o, self.use_local_output)
                res.append(o)
            return res[0] if single else tuple(res)

        module.register_forward_hook(post_hook)
        return module


class PrepareModuleInputOutput(ParallelStyle):
    """``PrepareModuleInput`` and ``PrepareModuleOutput`` together."""

    def __init__(self, *, input_layouts: Layouts, desired_input_layouts: Layouts, output_layouts: Layouts,
                 desired_output_layouts: Layouts, use_local_input: bool = False,
                 use_local_output: bool = True) -> None:
        self.inp = PrepareModuleInput(input_layouts=input_layouts, desired_input_layouts=desired_input_layouts,
                                      use_local_output=use_local_input)
        self.out = PrepareModuleOutput(output_layouts=output_layouts, desired_output_layouts=desired_output_layouts,
                                       use_local_output=use_local_output)

    def apply(self, module, device_mesh):
        self.inp.apply(module, device_mesh)
        return self.out.apply(module, device_mesh)
