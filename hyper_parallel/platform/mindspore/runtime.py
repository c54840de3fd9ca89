# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""MindSpore runtime settings for small-op CPU work: synchronous op launch, one dispatch thread, ``threads``
kernel threads.

MindSpore 2.10's PyNative runs every op through an asynchronous pipeline (``frontend_queue`` ->
``backend_queue`` -> ``ActorThread``/``KernelThread`` workers, plus ``bprop_queue`` for the backward). For
the small ops of a debug-size model the queue hand-offs cost more than the kernels, and the idle workers spin:
measured on the llama3 ``debug`` step (one process, 8 x 64 tokens, ``docs/mindspore.md``), launch blocking
alone took the PyNative step from 5.0 s to 1.0 s at load ~19, and together with one dispatch thread and one
kernel thread to 0.71 s (MindSpore's defaults: 5 dispatch threads, 25 CPU kernel threads). :func:`configure`
applies them once per process, before the first op:

* ``mindspore.runtime.launch_blocking()``: each op runs to completion on the calling thread (no async queue);
* ``mindspore.runtime.dispatch_threads_num(1)``: the runtime's dispatch threads (default 5);
* ``mindspore.device_context.cpu.op_tuning.threads_num(threads)``: the CPU kernels' thread pool.

``HP_MS_RUNTIME=default`` in the environment leaves MindSpore's defaults (to measure them). The settings
change no result: the same kernels run in the same order.
"""
from __future__ import annotations

import contextlib
import os
from typing import Dict, Iterator, Optional

__all__ = ["configure", "ENV", "jit_cells", "replaying", "is_replaying"]

_REPLAY = [0]


@contextlib.contextmanager
def replaying() -> Iterator[None]:
    """Mark a forward that runs again what already ran (a MindSpore pipeline stage's backward recomputes the
    microbatch's forward under ``mindspore.vjp``; its shape inference runs one on placeholder inputs): cells with
    host-side statistics (the MoE blocks' ``tokens_per_expert``) leave them alone inside (:func:`is_replaying`)."""
    _REPLAY[0] += 1
    try:
        yield
    finally:
        _REPLAY[0] -= 1


def is_replaying() -> bool:
    """Whether a :func:`replaying` block is open."""
    return _REPLAY[0] > 0

#: ``fast`` (default) applies the settings, ``default`` leaves MindSpore's
ENV = "HP_MS_RUNTIME"
_APPLIED: Dict[str, object] = {}


def configure(threads: int = 1, mode: Optional[str] = None) -> Dict[str, object]:
    """Apply the settings above once per process (later calls return what was applied); ``mode`` overrides
    ``$HP_MS_RUNTIME`` (``"fast"`` or ``"default"``). Returns ``{setting: value}`` of what is in force."""
    if _APPLIED:
        return dict(_APPLIED)
    mode = mode or os.environ.get(ENV, "fast")
    if mode not in ("fast", "default"):
        raise ValueError(f"{ENV}={mode!r}: expected 'fast' or 'default'")
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"configure(threads={threads!r}): expected a positive int")
    import mindspore as ms  # pylint: disable=import-outside-toplevel
    from mindspore.device_context.cpu import op_tuning  # pylint: disable=import-outside-toplevel
    _APPLIED["mode"] = mode
    if mode == "default":
        return dict(_APPLIED)
    conf = op_tuning.RuntimeConf.get_instance()
    if not conf.is_launch_blocking():
        ms.runtime.launch_blocking()
    _APPLIED["launch_blocking"] = True
    if not conf.is_dispatch_threads_num_configured():
        ms.runtime.dispatch_threads_num(1)
        _APPLIED["dispatch_threads_num"] = 1
    if not conf.is_op_threads_num_configured():
        op_tuning.threads_num(threads)
        _APPLIED["threads_num"] = threads
    return dict(_APPLIED)


def jit_cells(cells) -> int:
    """Run each cell's ``construct`` under ``mindspore.jit`` (graph mode per cell inside PyNative: one compiled
    forward and backward graph instead of one launch per op; ``value_and_grad`` differentiates through it).
    The cells must hold their own ``Parameter`` s: a cell whose parameters ``fully_shard`` or a TP style manage
    (shadowed by gathered values, or a replaced ``construct``) is refused. Returns how many cells were wrapped.
    Measured on the llama3 ``debug`` step (one process): about 3x faster than PyNative op by op."""
    import mindspore as ms  # pylint: disable=import-outside-toplevel
    n = 0
    for cell in cells:
        managed = [name or "." for name, c in cell.cells_and_names() if any(k.startswith("_hp_") for k in c.__dict__)]
        if managed:
            raise ValueError(f"jit_cells: {type(cell).__name__} has cells managed by fully_shard / tensor parallel "
                             f"({managed}); mindspore.jit needs cells that hold their own Parameters")
        cell.construct = ms.jit(cell.construct)
        n += 1
    return n
