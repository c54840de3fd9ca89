# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Registry names of torch ops resolved to the function objects torch reports (shared by the dispatcher and
the platform's data-free shape evaluation, without importing the dispatcher)."""
from __future__ import annotations

import types
from typing import Any, Callable, Optional

import torch

from hyper_parallel.core.ops.rule import RuleError

__all__ = ["resolve_torch_name"]


def resolve_torch_name(name: str) -> Optional[Callable]:
    """``torch.add`` / ``Tensor.add_`` / ``torch.nn.functional.linear`` -> the function object the
    torch-function protocol reports (property getters resolve to ``__get__``); None for other frontends."""
    parts = name.split(".")
    if parts[0] == "Tensor":
        obj: Any = torch.Tensor
        parts = parts[1:]
    elif parts[0] == "torch":
        obj = torch
        parts = parts[1:]
    elif parts[0] == "hyper_parallel":  # library ops written with the torch-function protocol
        import importlib
        obj = importlib.import_module(".".join(parts[:-1]))
        parts = parts[-1:]
    else:
        return None
    for p in parts:
        nxt = getattr(obj, p, None)
        if nxt is None:
            raise RuleError(f"op registry: {name!r} does not exist in torch {torch.__version__}")
        obj = nxt
    if isinstance(obj, (types.GetSetDescriptorType, property)):
        return obj.__get__
    return obj
