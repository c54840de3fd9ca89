# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The framework-free argument handling of loss parallel, shared by ``tp/_torch/loss.py`` and
``tp/_mindspore/loss.py``: validating ``vocab_parallel_cross_entropy``'s inputs and turning an intercepted
``cross_entropy(...)`` call into its arguments. Nothing here imports a framework."""
from __future__ import annotations

from typing import Any, Dict, Sequence, Tuple

from hyper_parallel.core.placement import Shard

__all__ = ["REDUCTIONS", "check_vocab_parallel_args", "cross_entropy_call"]

REDUCTIONS = ("mean", "sum", "none")


def check_vocab_parallel_args(logits: Any, reduction: str, dtensor_type: type) -> None:
    """``reduction`` is mean/sum/none and ``logits`` a ``dtensor_type`` sharded ``Shard(-1)`` on a 1-D mesh."""
    if reduction not in REDUCTIONS:
        raise ValueError(f"vocab_parallel_cross_entropy(reduction={reduction!r}): expected mean, sum or none")
    if not isinstance(logits, dtensor_type) or logits.device_mesh.ndim != 1 or \
            logits.placements != (Shard(logits.ndim - 1),):
        raise ValueError("vocab_parallel_cross_entropy: logits must be a DTensor sharded Shard(-1) on a 1-D mesh, "
                         f"got {getattr(logits, 'placements', type(logits).__name__)}")


def cross_entropy_call(args: Sequence[Any], kwargs: Dict[str, Any], positional: Sequence[str],
                       unsupported: Sequence[str], function: str) -> Tuple[Any, Any, Dict[str, Any]]:
    """``(logits, target, options)`` of an intercepted ``function(logits, target, *args, **kwargs)`` call, where
    ``positional`` names the parameters after ``target`` in order; ``options`` are the keyword arguments of
    ``vocab_parallel_cross_entropy``. Refuses the ``unsupported`` arguments and logits that are not
    ``(N, C)``."""
    logits, target = args[0], args[1]
    extra = dict(kwargs)
    for name, value in zip(positional, args[2:]):
        extra[name] = value
    for name in unsupported:
        if extra.get(name) is not None:
            raise ValueError(f"loss_parallel cross_entropy: argument {name!r} is not supported")
    if logits.ndim != 2:
        raise ValueError(f"loss_parallel cross_entropy: pass (N, C) logits ({function}'s class dim is 1); for "
                         "(B, S, V) call vocab_parallel_cross_entropy(logits, target), class dim -1")
    return logits, target, {"ignore_index": extra.get("ignore_index", -100),
                            "reduction": extra.get("reduction", "mean"),
                            "label_smoothing": extra.get("label_smoothing", 0.0)}
