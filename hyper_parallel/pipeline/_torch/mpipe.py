# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Mpipe on torch: permute a batch into the balanced microbatch order and put the merged output back."""
from __future__ import annotations

from typing import Sequence

import torch

from hyper_parallel.pipeline.microbatch import BatchDimSpec, merge_entries

__all__ = ["permute_batch", "unpermute"]


def _take(value, spec, order: torch.Tensor, what: str):
    if spec is None or not isinstance(value, torch.Tensor):
        return value
    dim = spec.dim
    if value.shape[dim] != order.numel():
        raise ValueError(f"ScheduleMpipe.step: {what} has {value.shape[dim]} rows along dim {dim} but sample_costs "
                         f"names {order.numel()} samples")
    return value.index_select(dim, order.to(value.device))


def permute_batch(order: Sequence[int], args, kwargs, target, args_spec, kwargs_spec):
    """``args`` / ``kwargs`` / ``target`` with their batch rows (along the chunk specs' dims) in ``order``."""
    idx = torch.tensor(list(order), dtype=torch.long)
    specs = args_spec if args_spec is not None else [BatchDimSpec(0)] * len(args)
    args = tuple(_take(a, s, idx, f"input argument {i}") for i, (a, s) in enumerate(zip(args, specs)))
    kw_specs = kwargs_spec or {}
    kwargs = {k: _take(v, kw_specs.get(k, BatchDimSpec(0)), idx, f"keyword input {k!r}") for k, v in kwargs.items()}
    target = _take(target, BatchDimSpec(0), idx, "target")
    return args, kwargs, target


def unpermute(out, order: Sequence[int], merge_spec):
    """The merged last-stage output with its rows back in the caller's order (outputs concatenated along a
    ``BatchDimSpec``; reduced or replicated outputs are left as they are)."""
    if out is None:
        return None
    inverse = torch.empty(len(order), dtype=torch.long)
    inverse[torch.tensor(list(order), dtype=torch.long)] = torch.arange(len(order))
    single = isinstance(out, torch.Tensor)
    items = [out] if single else list(out)
    entries = merge_entries(merge_spec, len(items))
    back = [_take(t, e, inverse, f"output {i}") if isinstance(e, BatchDimSpec) else t
            for i, (t, e) in enumerate(zip(items, entries))]
    return back[0] if single else type(out)(back)
