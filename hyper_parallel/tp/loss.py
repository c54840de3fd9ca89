# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Loss parallel, by backend: ``vocab_parallel_cross_entropy`` follows its logits' backend; ``loss_parallel()``
enters the context of every backend whose framework is loaded (torch: ``F.cross_entropy`` on DTensors;
MindSpore: ``mint.nn.functional.cross_entropy`` through its dispatcher). Imports no framework itself."""
from __future__ import annotations

import contextlib
import importlib
import sys

__all__ = ["vocab_parallel_cross_entropy", "loss_parallel"]

_IMPLEMENTATIONS = {"torch": "hyper_parallel.tp._torch.loss", "mindspore": "hyper_parallel.tp._mindspore.loss"}


def vocab_parallel_cross_entropy(logits, target, *, ignore_index: int = -100, reduction: str = "mean",
                                 label_smoothing: float = 0.0):
    """Cross-entropy over class dim -1 of ``Shard(-1)`` DTensor logits without gathering them (torch or
    MindSpore, by the logits' type); returns a plain replicated tensor."""
    from hyper_parallel.platform import platform_of
    plat = platform_of(logits)
    if plat is None or plat.name not in _IMPLEMENTATIONS:
        raise ValueError(f"vocab_parallel_cross_entropy(logits): expected a Shard(-1) DTensor, got "
                         f"{type(logits).__name__}")
    impl = importlib.import_module(_IMPLEMENTATIONS[plat.name])
    return impl.vocab_parallel_cross_entropy(logits, target, ignore_index=ignore_index, reduction=reduction,
                                             label_smoothing=label_smoothing)


@contextlib.contextmanager
def loss_parallel():
    """Inside, cross-entropy on ``Shard(-1)`` DTensor logits runs vocabulary-parallel (each loaded backend)."""
    with contextlib.ExitStack() as stack:
        for framework, module in _IMPLEMENTATIONS.items():
            if framework in sys.modules:
                stack.enter_context(importlib.import_module(module).loss_parallel())
        yield
