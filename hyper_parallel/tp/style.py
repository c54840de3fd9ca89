# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Tensor-parallel styles with PyTorch-compatible names and semantics — one set for both backends.

A style is a configuration (plain Python). ``style.apply(module, device_mesh)`` runs the implementation
of the module's backend (``tp/_torch/styles.py`` for a ``torch.nn.Module``, ``tp/_mindspore/styles.py``
for a ``mindspore.nn.Cell``): it shards the module's parameters and lays out its inputs (plain tensors
are wrapped with ``input_layouts``, then redistributed to the layout the module computes on) and its
outputs (redistributed to ``output_layouts``; local tensors again when ``use_local_output``).

* ``ColwiseParallel``   Linear weight ``Shard(0)`` (+ bias ``Shard(0)``), Embedding weight ``Shard(1)``;
                        input ``Replicate`` by default, output ``Shard(-1)``.
* ``RowwiseParallel``   Linear weight ``Shard(1)`` (bias ``Replicate``), Embedding weight ``Shard(0)``
                        (vocabulary-parallel); input ``Shard(-1)`` (Embedding: ``Replicate``), output
                        ``Replicate`` (set ``Shard(1)`` for sequence parallel: a reduce-scatter).
* ``overlap="mc2"``     (both, nn.Linear under sequence parallel): Colwise with ``input_layouts=Shard(d)``
                        runs ``all_gather_matmul`` (no separate all-gather), Rowwise with
                        ``output_layouts=Shard(d)`` runs ``matmul_reduce_scatter`` (torch; MindSpore refuses).
* ``SequenceParallel``  parameters replicated; input/output sharded on the sequence dim.
* ``PrepareModuleInput`` / ``PrepareModuleOutput`` / ``PrepareModuleInputOutput``: layouts only.

On MindSpore, ``ColwiseParallel`` and ``RowwiseParallel`` apply to ``nn.Dense``, ``mint.nn.Linear``,
``nn.Embedding`` and ``mint.nn.Embedding`` cells; ``SequenceParallel`` and ``PrepareModule*`` to any cell
(see ``tp/_mindspore/styles.py``).
"""
from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from typing import Dict, Optional, Tuple

from hyper_parallel.core.placement import Placement, Replicate, Shard
from hyper_parallel.platform import platform_for_module
from hyper_parallel.tp.layouts import Layouts, as_layouts

__all__ = ["ParallelStyle", "ColwiseParallel", "RowwiseParallel", "SequenceParallel", "PrepareModuleInput",
           "PrepareModuleOutput", "PrepareModuleInputOutput", "Layouts"]

_IMPLEMENTATIONS = {"torch": "hyper_parallel.tp._torch.styles", "mindspore": "hyper_parallel.tp._mindspore.styles"}


class ParallelStyle(ABC):
    """Base class of every TP style, on both backends: ``apply(module, device_mesh)`` parallelises
    ``module`` in place and returns it. Subclass it for a custom style (then ``apply`` is yours)."""

    @abstractmethod
    def apply(self, module, device_mesh):
        """Parallelise ``module`` in place and return it."""


class _BackendStyle(ParallelStyle):
    """A built-in style: ``apply`` runs the implementation of the module's backend, which reads the style's
    ``kind`` and attributes (it never imports this module)."""

    kind: str = ""

    def apply(self, module, device_mesh):
        """Parallelise ``module`` (a ``torch.nn.Module`` or a ``mindspore.nn.Cell``) in place and return it."""
        plat = platform_for_module(module)
        return importlib.import_module(_IMPLEMENTATIONS[plat.name]).apply_style(self, module, device_mesh)


class _LinearStyle(_BackendStyle):
    """Column- or row-wise sharding of a Linear/Embedding: the parameter layouts and the default layouts."""

    weight_dim: int
    bias_placement: Placement

    def __init__(self, *, input_layouts: Layouts = None, output_layouts: Layouts = None,
                 use_local_output: bool = True, overlap: Optional[str] = None) -> None:
        self.input_layouts = as_layouts(input_layouts)
        self.output_layouts = as_layouts(output_layouts)
        self.use_local_output = use_local_output
        if overlap not in (None, "mc2"):
            raise ValueError(f"{type(self).__name__}: overlap={overlap!r}; expected None or 'mc2' (the all-gather / "
                             "reduce-scatter of sequence parallel overlapped with the matmul, hyper_parallel.kernels)")
        self.overlap = overlap

    def default_linear_layouts(self) -> Tuple[Placement, Placement]:
        """(input layout, output layout) defaults for a Linear."""
        raise TypeError(type(self).__name__)

    def default_embedding_layouts(self) -> Tuple[Placement, Placement]:
        """(input layout, output layout) defaults for an Embedding."""
        raise TypeError(type(self).__name__)

    def desired_input(self, is_embedding: bool) -> Placement:
        """The layout the module computes on."""
        raise TypeError(type(self).__name__)


class ColwiseParallel(_LinearStyle):
    """Column-wise sharding: the output features (Linear) / embedding dim (Embedding) are split."""

    kind = "colwise"
    weight_dim = 0
    bias_placement = Shard(0)

    def default_linear_layouts(self):
        return Replicate(), Shard(-1)

    def default_embedding_layouts(self):
        return Replicate(), Shard(-1)

    def desired_input(self, is_embedding: bool):
        return Replicate()


class RowwiseParallel(_LinearStyle):
    """Row-wise sharding: the input features (Linear) / vocabulary (Embedding) are split."""

    kind = "rowwise"
    weight_dim = 1
    bias_placement = Replicate()

    def default_linear_layouts(self):
        return Shard(-1), Replicate()

    def default_embedding_layouts(self):
        return Replicate(), Replicate()

    def desired_input(self, is_embedding: bool):
        return Replicate() if is_embedding else Shard(-1)


class SequenceParallel(_BackendStyle):
    """Replicated parameters, activations sharded on ``sequence_dim`` (norms, dropout)."""

    kind = "sequence"

    def __init__(self, *, sequence_dim: int = 1, use_local_output: bool = False) -> None:
        self.sequence_dim = sequence_dim
        self.use_local_output = use_local_output


class PrepareModuleInput(_BackendStyle):
    """Lay out positional (and keyword) inputs: ``input_layouts`` -> ``desired_input_layouts``.

    ``partial_grad_on_gather=True`` (sequence parallel into column-parallel consumers): the gathered
    input promises that its consumers deliver partial gradients, so backward does ONE reduce-scatter
    instead of an all-reduce per consumer (see ``DTensor.redistribute(grad_partial=...)``); the
    dispatcher keeps the promise for consumers that do not (scaling their full gradients by 1/n).
    """

    kind = "prepare_input"

    def __init__(self, *, input_layouts: Layouts = None, desired_input_layouts: Layouts = None,
                 input_kwarg_layouts: Optional[Dict[str, Placement]] = None,
                 desired_input_kwarg_layouts: Optional[Dict[str, Placement]] = None,
                 use_local_output: bool = False, partial_grad_on_gather: bool = False) -> None:
        self.input_layouts = as_layouts(input_layouts) or ()
        self.desired = as_layouts(desired_input_layouts) or ()
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


class PrepareModuleOutput(_BackendStyle):
    """Lay out outputs: ``output_layouts`` -> ``desired_output_layouts``."""

    kind = "prepare_output"

    def __init__(self, *, output_layouts: Layouts, desired_output_layouts: Layouts,
                 use_local_output: bool = True) -> None:
        self.output_layouts = as_layouts(output_layouts) or ()
        self.desired = as_layouts(desired_output_layouts) or ()
        if len(self.output_layouts) != len(self.desired):
            raise ValueError("PrepareModuleOutput: output_layouts and desired_output_layouts differ in length")
        self.use_local_output = use_local_output


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
        """Lay out the inputs, then the outputs."""
        self.inp.apply(module, device_mesh)
        return self.out.apply(module, device_mesh)
