# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The MindSpore implementations of the rules' local computations that need MindSpore functions (the
counterpart of ``platform/torch/expands.py``), registered per rule class with ``core/ops/expands.implements``.
Loaded by the MindSpore dispatcher; rules whose expand has no MindSpore implementation here raise the
shared dispatcher's clear error naming the rule and the expand."""
# pylint: disable=unused-argument  # the signatures are the rule methods' (rule, func, args, kwargs, plan)
from __future__ import annotations

import mindspore as ms
from mindspore import mint

from hyper_parallel.core.ops.expands import implements
from hyper_parallel.core.ops.rules.matmul import EinsumRule
from hyper_parallel.core.ops.rules.reductions import ReductionRule, _with_first

__all__ = []

_FLOATS = (ms.float16, ms.float32, ms.float64, ms.bfloat16)


@implements("mindspore", ReductionRule, "expand_mean")
def _reductionrule_expand_mean(rule, func, args, kwargs, plan):
    """Local sum over the reduced dims divided by the global number of reduced elements."""
    x = args[0]
    dims, keepdim = plan.decision.extra["dims"], plan.decision.extra["keepdim"]
    dtype = kwargs.get("dtype")
    if dtype is None and x.dtype not in _FLOATS:
        return func(*args, **kwargs)  # MindSpore's own error or integer semantics
    count = 1
    for d in dims:
        count *= plan.call.tensors[0].shape[d]
    total = mint.sum(x, dim=tuple(dims), keepdim=keepdim, dtype=dtype)
    return total / count


@implements("mindspore", ReductionRule, "expand_extreme")
def _reductionrule_expand_extreme(rule, func, args, kwargs, plan):
    """amax/amin: an empty local shard reduces to the identity element (-inf / +inf)."""
    x = args[0]
    dims = plan.decision.extra["dims"]
    if any(x.shape[d] == 0 for d in dims):
        shape = tuple(1 if i in dims else s for i, s in enumerate(x.shape))
        x = mint.full(shape, float("-inf") if rule.reduce == "max" else float("inf"), dtype=x.dtype)
        args = _with_first(args, x)
    return func(*args, **kwargs)


@implements("mindspore", EinsumRule, "add_bias_once")
def _einsumrule_add_bias_once(rule, func, args, kwargs, plan):
    """Output is Partial: run without the bias term, add it on mesh coordinate 0 only."""
    return rule.bias_once(func, args, kwargs, plan, mint)
