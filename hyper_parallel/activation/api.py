# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Public API of activation checkpointing and swap; each call picks the backend of its arguments.

The implementation is ``hyper_parallel.activation._torch`` for torch modules/tensors and
``hyper_parallel.activation._mindspore`` for MindSpore cells/tensors (chosen by the classes of the
module, function or tensor arguments, like ``hyper_parallel.distribute_tensor``). Nothing here
imports a framework.
"""
from __future__ import annotations

import importlib
from typing import Any, Callable, Optional

from hyper_parallel.activation.plan import ActivationPlan
from hyper_parallel.platform import platform_of

__all__ = ["checkpoint", "checkpoint_wrapper", "swap", "swap_wrapper", "swap_tensor_wrapper",
           "apply_activation_policy", "ActivationPlan", "backend_of"]

_IMPLS = {"torch": "hyper_parallel.activation._torch", "mindspore": "hyper_parallel.activation._mindspore"}


def backend_of(*objs: Any) -> str:
    """``"torch"`` or ``"mindspore"``: the framework of the first module, tensor or bound method
    among ``objs`` (lists/tuples searched one level); raises TypeError when none is recognised."""
    for obj in objs:
        cands = list(obj) if isinstance(obj, (list, tuple)) else [obj]
        for c in cands:
            owner = getattr(c, "__self__", None)
            for probe in (c, owner):
                if probe is None or isinstance(probe, type):
                    continue
                plat = platform_of(probe)
                if plat is not None:
                    return plat.name
    raise TypeError("activation: cannot tell the framework: expected a torch/MindSpore module, bound method or "
                    "tensor among the arguments")


def _impl(*objs: Any) -> Any:
    return importlib.import_module(_IMPLS[backend_of(*objs)])


def checkpoint(fn: Callable, *args: Any, policy: Any = None, **kwargs: Any) -> Any:
    """Run ``fn(*args, **kwargs)`` keeping only what ``policy`` says, recomputing the rest in backward.

    ``policy``: ``None``/``"full"`` (recompute everything), ``"op"`` (keep matmul, attention and
    collective outputs), a list of op names, an ``OpPolicy`` (``save_ops``, ``op_policy``,
    ``full_policy``) or a torch-style policy function. Keyword arguments ``manager``/``group`` (torch)
    name the swap manager and group of ``MUST_SWAP`` outputs.
    """
    return _impl(fn, args).checkpoint(fn, *args, policy=policy, **kwargs)


def checkpoint_wrapper(module: Any, policy: Any = None, **kwargs: Any) -> Any:
    """Checkpoint ``module``'s forward with ``policy``, in place (returns ``module``; names unchanged)."""
    return _impl(module).checkpoint_wrapper(module, policy, **kwargs)


def swap(fn: Callable, *args: Any, manager: Any = None, group: Optional[str] = None, **kwargs: Any) -> Any:
    """Run ``fn(*args, **kwargs)`` with its saved activations swapped out until backward."""
    return _impl(fn, args).swap(fn, *args, manager=manager, group=group, **kwargs)


def swap_wrapper(module: Any, manager: Any = None, group: Optional[str] = None) -> Any:
    """Swap ``module``'s saved activations in every forward, in place (returns ``module``)."""
    return _impl(module).swap_wrapper(module, manager, group)


def swap_tensor_wrapper(tensor: Any, manager: Any = None, group: Optional[str] = None) -> Any:
    """A handle that swaps ``tensor``'s storage out and back in place (``swap_out``/``swap_in``/``wait``)."""
    return _impl(tensor).swap_tensor_wrapper(tensor, manager, group)


def apply_activation_policy(model: Any, config: Any, *, example_inputs: Any = None, loss_fn: Any = None,
                            manager: Any = None) -> ActivationPlan:
    """Apply one ``activation`` config block (see ``hyper_parallel.activation.config``) to ``model``'s
    layers in place and return the :class:`ActivationPlan`.

    ``mode="auto"`` measures the layers on ``example_inputs`` (a tuple of forward arguments; with
    ``loss_fn(output)`` the loss's saved tensors count too) and solves for the budget.
    ``manager``: the :class:`SwapManager` for swapping layers (default: one built from ``config.swap``).
    """
    from hyper_parallel.activation.config import parse_activation_config
    cfg = parse_activation_config(config)
    return _impl(model).apply_activation_policy(model, cfg, example_inputs=example_inputs, loss_fn=loss_fn,
                                                manager=manager)
