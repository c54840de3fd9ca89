# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Loss parallel on MindSpore: cross-entropy over vocabulary-sharded (``Shard(-1)``) logits without
gathering them (the torch formulas of ``tp/_torch/loss.py``; three all-reduces of ``[tokens]`` values:
max, sum of exponentials, target logit)."""
from __future__ import annotations

import contextlib

import mindspore as ms
from mindspore import mint, ops

from hyper_parallel.platform.mindspore import dispatch as _dispatch
from hyper_parallel.platform.mindspore.collectives import raw_all_reduce
from hyper_parallel.platform.mindspore.dtensor import DTensor
from hyper_parallel.platform.mindspore.platform import PLATFORM
from hyper_parallel.tp.loss_args import check_vocab_parallel_args, cross_entropy_call

__all__ = ["vocab_parallel_cross_entropy", "loss_parallel"]


def vocab_parallel_cross_entropy(logits, target, *, ignore_index: int = -100, reduction: str = "mean",
                                 label_smoothing: float = 0.0):
    """Cross-entropy over class dim -1 of a ``Shard(-1)`` MindSpore DTensor ``logits``; ``target`` holds class
    ids (plain tensor or replicated DTensor, shape = logits shape without the last dim). Returns a plain
    (replicated) MindSpore tensor; differentiable with respect to the local logits."""
    check_vocab_parallel_args(logits, reduction, DTensor)
    mesh = logits.device_mesh
    group = mesh.get_group(0)
    vocab = logits.shape[-1]
    local = logits.to_local().astype(ms.float32)
    start = logits.spec.local_shape_and_offset(mesh.get_coordinate())[1][-1]
    if isinstance(target, DTensor):
        target = target.full_tensor()
    # max for stability: not differentiated (any constant works); an empty shard contributes -inf
    if local.shape[-1]:
        local_max = local.max(axis=-1)
    else:
        local_max = ops.full(tuple(local.shape[:-1]), float("-inf"), dtype=ms.float32)
    gmax = raw_all_reduce(ops.stop_gradient(local_max), "max", group)
    shifted = local - gmax.unsqueeze(-1)
    sum_exp = PLATFORM.all_reduce(mint.exp(shifted).sum(-1), "sum", group)
    lse = mint.log(sum_exp)
    valid = target != ignore_index
    width = local.shape[-1]
    in_range = mint.logical_and(mint.logical_and(target >= start, target < start + width), valid)
    idx = mint.clamp(target - start, 0, max(width - 1, 0)).astype(ms.int64).unsqueeze(-1)
    picked = (mint.gather(shifted, -1, idx).squeeze(-1) if width else ops.zeros_like(lse)) * in_range.astype(
        ms.float32)
    target_logit = PLATFORM.all_reduce(picked, "sum", group)
    nll = lse - target_logit
    if label_smoothing > 0:
        mean_logit = PLATFORM.all_reduce(shifted.sum(-1), "sum", group) / vocab
        nll = (1 - label_smoothing) * nll + label_smoothing * (lse - mean_logit)
    nll = nll * valid.astype(ms.float32)
    if reduction == "none":
        return nll
    total = nll.sum()
    if reduction == "sum":
        return total
    return total / mint.clamp(valid.astype(ms.float32).sum(), min=1.0)


def _handler(func, args, kwargs):  # pylint: disable=unused-argument
    logits, target, options = cross_entropy_call(
        args, kwargs, ("weight", "ignore_index", "reduction", "label_smoothing"), ("weight",), "cross_entropy")
    return vocab_parallel_cross_entropy(logits, target, **options)


@contextlib.contextmanager
def loss_parallel():
    """Inside, ``mint.nn.functional.cross_entropy`` on ``Shard(-1)`` DTensor logits, called through the
    MindSpore dispatcher (``dispatch.mint.nn.functional.cross_entropy`` / ``dispatch.call``), runs
    vocabulary-parallel."""
    _dispatch.install_registry()
    func = mint.nn.functional.cross_entropy
    name = "mindspore.mint.nn.functional.cross_entropy"
    table, by_name = _dispatch._TABLE, _dispatch._BY_NAME  # pylint: disable=protected-access
    previous, previous_name = table.get(func), by_name.get(name)
    table[func] = _handler
    by_name[name] = (func, _handler)
    try:
        yield
    finally:
        for store, key, old in ((table, func, previous), (by_name, name, previous_name)):
            if old is None:
                store.pop(key, None)
            else:
                store[key] = old
