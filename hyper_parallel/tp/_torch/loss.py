# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Loss parallel: cross-entropy on vocabulary-sharded logits without gathering them.

With logits ``Shard(-1)`` on a 1-D mesh, each rank holds a slice of the vocabulary. The loss needs
only three all-reduces of per-token scalars (max, sum of exponentials, target logit / mean logit
for label smoothing), never the logits themselves. Gradients flow through the differentiable
all-reduce (its adjoint under the gradient convention is the identity), so the backward needs no
communication at all: ``softmax - one_hot`` stays sharded.
"""
from __future__ import annotations

import contextlib
from typing import Optional

import torch.nn.functional as F

from hyper_parallel.platform import get_platform
from hyper_parallel.platform.torch import dtensor as _dt
from hyper_parallel.platform.torch.dispatch import install_registry
from hyper_parallel.platform.torch.dtensor import DTensor
from hyper_parallel.tp.loss_args import check_vocab_parallel_args, cross_entropy_call

__all__ = ["vocab_parallel_cross_entropy", "loss_parallel"]


def vocab_parallel_cross_entropy(logits, target, *, ignore_index: int = -100, reduction: str = "mean",
                                 label_smoothing: float = 0.0):
    """Cross-entropy over class dim -1 of a ``Shard(-1)`` DTensor ``logits``; ``target`` holds class ids
    (plain tensor or replicated DTensor, shape = logits shape without the last dim). Returns a plain
    (replicated) tensor."""
    check_vocab_parallel_args(logits, reduction, DTensor)
    plat = get_platform("torch")
    mesh = logits.device_mesh
    group = mesh.get_group(0)
    vocab = logits.shape[-1]
    local = logits.to_local().float()
    start = logits.spec.local_shape_and_offset(mesh.get_coordinate())[1][-1]
    if isinstance(target, DTensor):
        target = target.full_tensor()
    # max for stability: not differentiated (any constant works)
    gmax = plat.all_reduce(local.detach().amax(-1), "max", group)
    shifted = local - gmax.unsqueeze(-1)
    sum_exp = plat.all_reduce(shifted.exp().sum(-1), "sum", group)
    lse = sum_exp.log()
    valid = target != ignore_index
    in_range = (target >= start) & (target < start + local.shape[-1]) & valid
    idx = (target - start).clamp(0, max(local.shape[-1] - 1, 0)).unsqueeze(-1)
    picked = shifted.gather(-1, idx).squeeze(-1) * in_range
    target_logit = plat.all_reduce(picked, "sum", group)
    nll = lse - target_logit
    if label_smoothing > 0:
        mean_logit = plat.all_reduce(shifted.sum(-1), "sum", group) / vocab
        nll = (1 - label_smoothing) * nll + label_smoothing * (lse - mean_logit)
    nll = nll * valid
    if reduction == "none":
        return nll
    total = nll.sum()
    if reduction == "sum":
        return total
    return total / valid.sum().clamp(min=1).to(total.dtype)


@contextlib.contextmanager
def loss_parallel():
    """Inside, ``F.cross_entropy`` on ``Shard(-1)`` DTensor logits runs vocabulary-parallel."""
    install_registry()
    previous: Optional[object] = _dt.DISPATCH_TABLE.get(F.cross_entropy)

    def handler(func, args, kwargs):  # pylint: disable=unused-argument
        logits, target, options = cross_entropy_call(
            args, kwargs, ("weight", "size_average", "ignore_index", "reduce", "reduction", "label_smoothing"),
            ("weight", "size_average", "reduce"), "F.cross_entropy")
        return vocab_parallel_cross_entropy(logits, target, **options)

    _dt.DISPATCH_TABLE[F.cross_entropy] = handler
    try:
        yield
    finally:
        if previous is None:
            _dt.DISPATCH_TABLE.pop(F.cross_entropy, None)
        else:
            _dt.DISPATCH_TABLE[F.cross_entropy] = previous
