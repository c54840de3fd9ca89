# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""torch declarative helpers: ``custom_shard``, ``DFunction`` and ``parallelize_value_and_grad``."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

import torch

from hyper_parallel.core.placement import Placement, grad_placement
from hyper_parallel.platform.torch.dtensor import DTensor
from hyper_parallel.shard.plan import placements_of

if TYPE_CHECKING:
    from hyper_parallel.core.device_mesh import DeviceMesh

__all__ = ["custom_shard", "DFunction", "parallelize_value_and_grad"]


def custom_shard(fn: Callable, device_mesh: "DeviceMesh", in_placements: Sequence[Optional[Sequence[Placement]]],
                 out_placements: Sequence[Sequence[Placement]], *, redistribute_inputs: bool = True) -> Callable:
    """Wrap ``fn`` (written for local shards) so it takes and returns DTensors.

    DTensor inputs are redistributed to ``in_placements`` (``None`` = leave as is) unless
    ``redistribute_inputs=False`` (then a mismatch is an error); ``fn`` receives local tensors;
    its tensor outputs are wrapped with ``out_placements`` (global shapes assume even shards).
    Gradients flow through the local computation unchanged (the wrapping is an alias).
    """
    in_pl = [None if p is None else placements_of(p, "custom_shard in_placements") for p in in_placements]
    out_pl = [placements_of(p, "custom_shard out_placements") for p in out_placements]

    def wrapped(*args):
        local = []
        for i, a in enumerate(args):
            want = in_pl[i] if i < len(in_pl) else None
            if isinstance(a, DTensor) and want is not None and a.placements != want:
                if not redistribute_inputs:
                    raise ValueError(f"custom_shard({getattr(fn, '__name__', fn)}): input {i} is {a.placements}, "
                                     f"expected {want}")
                a = a.redistribute(device_mesh, want)
            local.append(a.to_local() if isinstance(a, DTensor) else a)
        out = fn(*local)
        single = not isinstance(out, (tuple, list))
        outs = [out] if single else list(out)
        if len(outs) != len(out_pl):
            raise ValueError(f"custom_shard: {getattr(fn, '__name__', fn)} returned {len(outs)} outputs, "
                             f"out_placements names {len(out_pl)}")
        res = [DTensor.from_local(o, device_mesh, pl) for o, pl in zip(outs, out_pl)]
        return res[0] if single else tuple(res)

    return wrapped


class DFunction:
    """Base class for user-defined distributed autograd functions.

    Subclasses define ``forward(ctx, *local_inputs)`` and ``backward(ctx, *local_grads)`` on LOCAL
    tensors (like ``torch.autograd.Function``) and ``infer_layout(*input_placements)`` returning
    ``(input_placements_needed, output_placements)``; ``Cls.apply(*dtensors)`` redistributes the
    inputs, runs the autograd function on their shards and wraps the outputs. Gradients are the
    local gradients of the convention (``grad_placement``).
    """

    _bridge = None

    @staticmethod
    def forward(ctx: Any, *args: Any) -> Any:  # pragma: no cover - documented interface
        """Local forward."""
        raise TypeError("DFunction subclasses must define forward")

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:  # pragma: no cover - documented interface
        """Local backward."""
        raise TypeError("DFunction subclasses must define backward")

    @staticmethod
    def infer_layout(*placements: Any) -> tuple:
        """Default: every input as it is; one output laid out like the first input."""
        return list(placements), [placements[0]]

    @classmethod
    def _autograd(cls):
        if cls.__dict__.get("_bridge") is None:
            class _Local(torch.autograd.Function):  # a class statement, so linters see Function's members
                forward = staticmethod(cls.forward)
                backward = staticmethod(cls.backward)

            _Local.__name__ = _Local.__qualname__ = f"{cls.__name__}Local"
            cls._bridge = _Local
        return cls._bridge

    @classmethod
    def apply(cls, *args: Any) -> Any:
        """Run on DTensors (plain tensors and other values pass through to the local function)."""
        dts = [a for a in args if isinstance(a, DTensor)]
        if not dts:
            raise TypeError(f"{cls.__name__}.apply: expected at least one DTensor argument")
        mesh = dts[0].device_mesh
        need, out_pl = cls.infer_layout(*[a.placements for a in dts])
        it = iter(need)
        local = []
        for a in args:
            if isinstance(a, DTensor):
                want = next(it)
                if want is not None and tuple(want) != a.placements:
                    a = a.redistribute(mesh, want)
                local.append(a.to_local())
            else:
                local.append(a)
        out = cls._autograd().apply(*local)
        single = not isinstance(out, tuple)
        outs = [out] if single else list(out)
        res = [DTensor.from_local(o, mesh, pl) for o, pl in zip(outs, out_pl)]
        return res[0] if single else tuple(res)


def parallelize_value_and_grad(fn: Callable, params: Optional[Sequence[Any]] = None) -> Callable:
    """``g = parallelize_value_and_grad(loss_fn, params)``; ``loss, grads = g(*args)``.

    ``loss`` is the (replicated) loss value; ``grads`` has one entry per parameter, a DTensor laid out
    like its parameter's gradient (``grad_placement``), so functional training loops get
    DTensor-correct gradients without touching ``.grad``.
    """
    def run(*args, **kwargs):
        plist = list(params) if params is not None else [a for a in args if isinstance(a, torch.Tensor)
                                                         and a.requires_grad]
        loss = fn(*args, **kwargs)
        scalar = loss.full_tensor() if isinstance(loss, DTensor) else loss
        grads = torch.autograd.grad(scalar, plist, allow_unused=True)
        out = []
        for p, g in zip(plist, grads):
            if isinstance(p, DTensor):
                if g is None:
                    g = torch.zeros_like(p.to_local())
                local = g.to_local() if isinstance(g, DTensor) else g
                pl = tuple(grad_placement(x) for x in p.placements)
                g = DTensor.from_local(local.detach(), p.device_mesh, pl, shape=tuple(p.shape))
            out.append(g)
        return scalar.detach(), out

    return run
