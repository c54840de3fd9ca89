# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""MindSpore op cases as data: the inputs and the call of one case, the same in the kernel check and in the ranks.

``hp-agent dist-op dev`` writes ``tests/st/mindspore/generated/cases/<op>.yaml`` for a plan with MindSpore in
scope; its kernel check (``hp_agent.dist_op.mindspore_kernels``, torch and MindSpore in one process) and the
2-rank checks of MindSpore launch 2 (``tests/st/mindspore/generated/checks.py``) build every case's inputs and
call with the functions of this module, so both run exactly the same numbers.

A case is a mapping:

* ``shapes``: one shape per tensor input;
* ``dtypes`` (optional): one dtype name per tensor (default ``float32``); a non-float tensor needs ``values``;
* ``values`` (optional): ``{index: nested list}`` fixed values of a tensor (index tensors of an OpInfo sample);
* ``low``/``high`` (optional): float inputs are uniform in ``[low, high)`` (default ``[0.5, 1.5)``), drawn with
  ``numpy.random.default_rng(seed)`` in the order of ``shapes``;
* ``args`` (optional): the positional arguments, where ``{"t": i}`` is tensor ``i`` and a list of such items
  is a tensor list (``cat``); other values are literals (lists become tuples). Without ``args`` the tensors
  are the positional arguments, in order;
* ``kwargs``: keyword arguments (lists become tuples); ``grad: false`` for an op without a derivative.

Importing this module is cheap (numpy only); the framework is the caller's.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

__all__ = ["case_arrays", "float_inputs", "build_call", "leaves", "tuple_literals", "drop_pending_error"]


def case_arrays(case: Dict[str, Any], seed: int) -> List[np.ndarray]:
    """The numpy inputs of ``case`` (see the module docstring), drawn with ``seed``."""
    rng = np.random.default_rng(seed)
    low, high = float(case.get("low", 0.5)), float(case.get("high", 1.5))
    dtypes = case.get("dtypes") or ["float32"] * len(case["shapes"])
    values = {int(k): v for k, v in (case.get("values") or {}).items()}
    out = []
    for i, (shape, dtype) in enumerate(zip(case["shapes"], dtypes)):
        if i in values:
            out.append(np.asarray(values[i], dtype=dtype).reshape(tuple(shape)))
        elif np.issubdtype(np.dtype(dtype), np.floating):
            out.append((rng.random(tuple(shape)) * (high - low) + low).astype(dtype))
        else:
            raise ValueError(f"case input {i}: a {dtype} tensor needs fixed 'values' (only float inputs are drawn)")
    return out


def float_inputs(case: Dict[str, Any]) -> List[int]:
    """Indices of the float tensors (the differentiable inputs)."""
    dtypes = case.get("dtypes") or ["float32"] * len(case["shapes"])
    return [i for i, d in enumerate(dtypes) if np.issubdtype(np.dtype(d), np.floating)]


def tuple_literals(value: Any) -> Any:
    """Lists (from YAML/JSON) back to tuples, recursively: the form torch and MindSpore both accept for sizes."""
    if isinstance(value, list):
        return tuple(tuple_literals(v) for v in value)
    if isinstance(value, dict):
        return {k: tuple_literals(v) for k, v in value.items()}
    return value


def _slot(item: Any, tensors: Sequence[Any]) -> Any:
    if isinstance(item, dict) and set(item) == {"t"}:
        return tensors[int(item["t"])]
    if isinstance(item, list) and item and all(isinstance(x, dict) and set(x) == {"t"} for x in item):
        return [tensors[int(x["t"])] for x in item]
    return tuple_literals(item)


def build_call(case: Dict[str, Any], func: Callable) -> Callable:
    """``call(*tensors)``: ``func`` with the case's tensors in their places and its literal arguments."""
    template = case.get("args")
    kwargs = tuple_literals(dict(case.get("kwargs") or {}))

    def call(*tensors):
        args = list(tensors) if template is None else [_slot(a, tensors) for a in template]
        return func(*args, **kwargs)
    return call


def leaves(out: Any) -> List[Any]:
    """The outputs of a call as a flat list (a tuple/list output is flattened; anything else is one leaf)."""
    if isinstance(out, (list, tuple)):
        return [x for item in out for x in leaves(item)]
    return [out]


def drop_pending_error() -> Optional[str]:
    """Clear the error MindSpore 2.10's PyNative executor keeps after a failed op (it re-raises it from every
    later op until synced). Returns that error's first line, or None when nothing was pending."""
    from mindspore.common.api import _pynative_executor  # pylint: disable=import-outside-toplevel
    try:
        _pynative_executor.sync()
    except Exception as exc:  # pylint: disable=broad-except  # whatever MindSpore stored is the answer
        return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return None
