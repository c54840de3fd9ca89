# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Dispatch of torch functions on DTensors that have no built-in handler."""
from __future__ import annotations


def _name(func) -> str:
    qual = getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or repr(func)
    if qual.startswith("_VariableFunctionsClass."):
        return "torch." + qual.split(".", 1)[1]
    module = getattr(func, "__module__", None)
    if module and not qual.startswith("Tensor."):
        return f"{module}.{qual}"
    return qual


def dispatch_unregistered(func, types, args, kwargs):  # pylint: disable=unused-argument
    """Raise the clear error for a function with no distributed rule."""
    raise RuntimeError(
        f"hyper_parallel DTensor: no distributed rule for {_name(func)}. Register one with "
        "hyper_parallel.register_op(...), or run the code on local shards (dtensor.to_local(), or inside "
        "hyper_parallel.SkipDTensorDispatch()).")
