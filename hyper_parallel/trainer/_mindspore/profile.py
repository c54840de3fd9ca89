# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The MindSpore trainer's profiler (``metrics.profile_steps``): Python's ``cProfile`` over the chosen steps,
written as the raw ``pstats`` file plus a JSON breakdown of where the time went, by layer:

* ``mindspore_kernels``: self time of MindSpore's C++ entry points (op launches, kernels, ``asnumpy``, the
  communication calls) -- what PyNative costs;
* ``mindspore_python``: MindSpore's own Python (``mindspore/`` files: ``Cell.__call__``, ``value_and_grad``);
* ``dtensor_dispatch``: ``hyper_parallel/core``, ``platform/mindspore`` (but collectives), ``tp``, ``shard``;
* ``collectives``: ``platform/mindspore/collectives.py``;
* ``fsdp``, ``model`` (``hyper_parallel/models``), ``trainer`` (``trainer``, ``optim``), ``other``.

Each category has ``self_s`` (time spent in its own functions) and ``inclusive_s`` (time under its
outermost functions, callees of any layer included: e.g. the collectives' inclusive time holds the
communication itself). Pure standard library; MindSpore's own profiler needs a device timeline that its
CPU backend does not write.
"""
from __future__ import annotations

import cProfile
import json
import pstats
from typing import Any, Dict, Tuple

__all__ = ["CATEGORIES", "category_of", "breakdown", "start", "stop"]

CATEGORIES = ("mindspore_kernels", "mindspore_python", "dtensor_dispatch", "collectives", "fsdp", "model",
              "trainer", "other")

_RULES = (("/hyper_parallel/platform/mindspore/collectives.py", "collectives"),
          ("/hyper_parallel/fsdp/", "fsdp"), ("/hyper_parallel/models/", "model"),
          ("/hyper_parallel/trainer/", "trainer"), ("/hyper_parallel/optim/", "trainer"),
          ("/hyper_parallel/", "dtensor_dispatch"), ("/mindspore/", "mindspore_python"))


def category_of(func: Tuple[str, int, str]) -> str:
    """The category of a ``pstats`` function key ``(file, line, name)``."""
    path, _, name = func
    if path == "~":  # a builtin: MindSpore's C++ when its name says so
        return "mindspore_kernels" if any(k in name for k in ("mindspore", "_c_expression", "TensorPy")) else "other"
    path = path.replace("\\", "/")
    for part, cat in _RULES:
        if part in path:
            return cat
    return "other"


def breakdown(stats: pstats.Stats) -> Dict[str, Any]:
    """``{"total_s", "categories": {cat: {"self_s", "inclusive_s"}}, "top": [...]}`` from profiler stats."""
    raw = stats.stats  # type: ignore[attr-defined]  # {func: (cc, nc, tt, ct, callers)}
    cats = {c: {"self_s": 0.0, "inclusive_s": 0.0} for c in CATEGORIES}
    for func, (_, _, tt, ct, callers) in raw.items():
        cat = category_of(func)
        cats[cat]["self_s"] += tt
        if not any(category_of(c) == cat for c in callers):  # outermost in its category
            cats[cat]["inclusive_s"] += ct
    total = sum(c["self_s"] for c in cats.values())
    top = sorted(raw.items(), key=lambda kv: kv[1][2], reverse=True)[:25]
    return {"total_s": total, "categories": {k: {n: round(v, 4) for n, v in d.items()} for k, d in cats.items()},
            "top": [{"func": f"{f[0]}:{f[1]}({f[2]})", "category": category_of(f), "calls": v[1],
                     "self_s": round(v[2], 4), "inclusive_s": round(v[3], 4)} for f, v in top]}


def start() -> cProfile.Profile:
    """A started profiler."""
    prof = cProfile.Profile()
    prof.enable()
    return prof


def stop(prof: cProfile.Profile, path: str) -> Dict[str, Any]:
    """Stop ``prof``; write the breakdown to ``path`` (JSON) and the raw stats next to it (``.pstats``)."""
    prof.disable()
    stats = pstats.Stats(prof)
    base = path[:-5] if path.endswith(".json") else path
    stats.dump_stats(base + ".pstats")
    out = breakdown(stats)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)
    return out
