# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Declarative parallelism: ``shard_module``, ``custom_shard``, ``DFunction`` and
``parallelize_value_and_grad``. The model code stays untouched; the plan says how it is laid out.

A sharding plan is a dict with up to three keys (patterns are fnmatch globs; a pattern that
matches nothing is an error naming it)::

    plan = {
        "parameters": {"mlp.fc1.weight": (Shard(0),), "mlp.fc2.weight": Layout((2,), ("tp",))("None", "tp")},
        "inputs":  {"mlp": (Replicate(),)},      # per positional input; None leaves one alone
        "outputs": {"mlp": (Replicate(),)},      # per output; DTensor outputs are redistributed
        "use_local_output": ["mlp"],             # modules whose DTensor outputs become local tensors
    }

Use ``""`` as the module pattern for the root module.
"""
from __future__ import annotations

import importlib
import sys
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional, Sequence

from hyper_parallel.core.layout import Layout
from hyper_parallel.core.placement import Placement, grad_placement

if TYPE_CHECKING:
    from hyper_parallel.core.device_mesh import DeviceMesh

__all__ = ["shard_module", "custom_shard", "DFunction", "parallelize_value_and_grad"]

_PLAN_KEYS = {"parameters", "inputs", "outputs", "use_local_output"}


def _placements(spec: Any, what: str) -> tuple:
    if isinstance(spec, Layout):
        return spec.placements
    if isinstance(spec, Placement):
        return (spec,)
    if isinstance(spec, (list, tuple)) and all(isinstance(p, Placement) for p in spec):
        return tuple(spec)
    raise TypeError(f"{what}: expected placements (a tuple of Shard/Replicate/Partial) or a bound Layout, got {spec!r}")


def _match(names: Sequence[str], pattern: str, what: str) -> list:
    hits = [n for n in names if fnmatchcase(n, pattern)]
    if not hits:
        raise ValueError(f"shard_module: {what} pattern {pattern!r} matches nothing (known: {list(names)[:8]})")
    return hits


def _to_layout(x, mesh, placements):
    """DTensors are redistributed; a plain tensor is taken as the full value (identical on every
    rank) and laid out differentiably (from a replicated view, then local chunking)."""
    import torch
    from hyper_parallel.core.placement import Replicate
    from hyper_parallel.platform.torch.dtensor import DTensor
    if placements is None or not isinstance(x, torch.Tensor):
        return x
    if not isinstance(x, DTensor):
        x = DTensor.from_local(x, mesh, (Replicate(),) * mesh.ndim)
    return x.redistribute(mesh, placements)


def _shard_parameters(module, mesh, plan: Dict[str, Any]) -> None:
    import torch
    from hyper_parallel.platform.torch.dtensor import DTensor, distribute_tensor
    names = [n for n, _ in module.named_parameters()]
    for pattern, spec in plan.items():
        for name in _match(names, pattern, "parameter"):
            owner_name, _, leaf = name.rpartition(".")
            owner = module.get_submodule(owner_name) if owner_name else module
            param = getattr(owner, leaf)
            if isinstance(param, DTensor):
                raise ValueError(f"shard_module: parameter {name} is already distributed ({param.placements})")
            placements = _placements(spec, f"shard_module parameter {name}")
            try:
                dt = distribute_tensor(param.detach(), mesh, placements, src_data_rank=None)
            except ValueError as exc:
                raise ValueError(f"shard_module: parameter {name} of shape {list(param.shape)}: {exc}") from exc
            owner.register_parameter(leaf, torch.nn.Parameter(dt, requires_grad=param.requires_grad))


def shard_module(module: Any, device_mesh: "DeviceMesh", sharding_plan: Dict[str, Any]) -> Any:
    """Lay out ``module``'s parameters and module boundaries as ``sharding_plan`` says (in place).

    A MindSpore ``nn.Cell`` goes to ``hyper_parallel.platform.mindspore.shard.shard_module``."""
    mindspore = sys.modules.get("mindspore")  # a Cell exists only if MindSpore is already imported
    if mindspore is not None and isinstance(module, mindspore.nn.Cell):
        shard_cell = importlib.import_module("hyper_parallel.platform.mindspore.shard").shard_module
        return shard_cell(module, device_mesh, sharding_plan)
    unknown = set(sharding_plan) - _PLAN_KEYS
    if unknown:
        raise ValueError(f"shard_module: unknown plan key(s) {sorted(unknown)}; expected {sorted(_PLAN_KEYS)}")
    _shard_parameters(module, device_mesh, sharding_plan.get("parameters", {}))
    modules = [n for n, _ in module.named_modules()]
    local_out = set()
    for pattern in sharding_plan.get("use_local_output", []):
        local_out.update(_match(modules, pattern, "use_local_output"))
    for pattern, layouts in sharding_plan.get("inputs", {}).items():
        for name in _match(modules, pattern, "inputs"):
            _install_inputs(module.get_submodule(name), device_mesh, layouts, name)
    for pattern, layouts in sharding_plan.get("outputs", {}).items():
        for name in _match(modules, pattern, "outputs"):
            _install_outputs(module.get_submodule(name), device_mesh, layouts, name in local_out)
    for name in local_out - {n for p in sharding_plan.get("outputs", {}) for n in _match(modules, p, "outputs")}:
        _install_outputs(module.get_submodule(name), device_mesh, (), True)
    return module


def _install_inputs(mod, mesh, layouts, name: str) -> None:
    layouts = [None if pl is None else _placements(pl, f"shard_module inputs of {name!r}") for pl in layouts]

    def pre_hook(_m, args):
        return tuple(_to_layout(a, mesh, layouts[i]) if i < len(layouts) else a for i, a in enumerate(args))

    mod.register_forward_pre_hook(pre_hook)


def _install_outputs(mod, mesh, layouts, use_local: bool) -> None:
    from hyper_parallel.platform.torch.dtensor import DTensor
    layouts = [None if pl is None else _placements(pl, "shard_module outputs") for pl in layouts]

    def post_hook(_m, _args, out):
        single = not isinstance(out, tuple)
        outs = list((out,) if single else out)
        for i, o in enumerate(outs):
            if i < len(layouts) and layouts[i] is not None and isinstance(o, DTensor):
                o = o.redistribute(mesh, layouts[i])
            if use_local and isinstance(o, DTensor):
                o = o.to_local()
            outs[i] = o
        return outs[0] if single else tuple(outs)

    mod.register_forward_hook(post_hook)


def custom_shard(fn: Callable, device_mesh: "DeviceMesh", in_placements: Sequence[Optional[Sequence[Placement]]],
                 out_placements: Sequence[Sequence[Placement]], *, redistribute_inputs: bool = True) -> Callable:
    """Wrap ``fn`` (written for local shards) so it takes and returns DTensors.

    DTensor inputs are redistributed to ``in_placements`` (``None`` = leave as is) unless
    ``redistribute_inputs=False`` (then a mismatch is an error); ``fn`` receives local tensors;
    its tensor outputs are wrapped with ``out_placements`` (global shapes assume even shards).
    Gradients flow through the local computation unchanged (the wrapping is an alias).
    """
    from hyper_parallel.platform.torch.dtensor import DTensor
    in_pl = [None if p is None else _placements(p, "custom_shard in_placements") for p in in_placements]
    out_pl = [_placements(p, "custom_shard out_placements") for p in out_placements]

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
        import torch
        if cls.__dict__.get("_bridge") is None:
            cls._bridge = type(f"{cls.__name__}Local", (torch.autograd.Function,),
                               {"forward": staticmethod(cls.forward), "backward": staticmethod(cls.backward)})
        return cls._bridge

    @classmethod
    def apply(cls, *args: Any) -> Any:
        """Run on DTensors (plain tensors and other values pass through to the local function)."""
        from hyper_parallel.platform.torch.dtensor import DTensor
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
    import torch
    from hyper_parallel.platform.torch.dtensor import DTensor

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
