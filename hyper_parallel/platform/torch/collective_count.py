# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""How many collectives a piece of code issued on this rank: :class:`CollectiveCounter`.

``with CollectiveCounter() as c: ...`` wraps the ``torch.distributed`` collectives and point-to-point calls
(:data:`COUNTED`) for the duration of the block and counts each call by name; ``c.total`` and ``c.by_op`` give the
result. Every library path calls them as ``torch.distributed.<name>`` (``dist.all_reduce(...)``), which is what is
wrapped; a call made inside a counted one is not counted again. The counter is per process and not
re-entrant-safe across threads that start or leave blocks concurrently (the trainer uses one per step).
"""
from __future__ import annotations

import collections
import functools
from typing import Any, Callable, Dict

import torch.distributed as dist

__all__ = ["CollectiveCounter", "COUNTED"]

#: the ``torch.distributed`` functions counted (those that exist in the installed torch). ``isend`` / ``irecv`` are not
#: wrapped: ``P2POp`` checks that its op *is* ``torch.distributed.isend`` / ``irecv``; batched point-to-point
#: (``batch_isend_irecv``, what the pipeline uses) counts once per batch
COUNTED = ("all_reduce", "all_reduce_coalesced", "all_gather", "all_gather_into_tensor", "all_gather_single",
           "all_gather_coalesced", "all_gather_object", "reduce_scatter", "reduce_scatter_tensor",
           "reduce_scatter_single", "all_to_all", "all_to_all_single", "broadcast", "broadcast_object_list",
           "reduce", "gather", "scatter", "barrier", "send", "recv", "batch_isend_irecv")


class CollectiveCounter:
    """Context manager counting the ``torch.distributed`` calls of :data:`COUNTED` made inside it."""

    def __init__(self) -> None:
        self.by_op: Dict[str, int] = collections.Counter()
        self._saved: Dict[str, Callable[..., Any]] = {}
        self._depth = 0

    @property
    def total(self) -> int:
        """All counted calls."""
        return sum(self.by_op.values())

    def _wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def counted(*args, **kwargs):
            if not self._depth:
                self.by_op[name] += 1
            self._depth += 1
            try:
                return fn(*args, **kwargs)
            finally:
                self._depth -= 1
        return counted

    def __enter__(self) -> "CollectiveCounter":
        for name in COUNTED:
            fn = getattr(dist, name, None)
            if fn is not None:
                self._saved[name] = fn
                setattr(dist, name, self._wrap(name, fn))
        return self

    def __exit__(self, *exc: Any) -> None:
        for name, fn in self._saved.items():
            setattr(dist, name, fn)
        self._saved.clear()
