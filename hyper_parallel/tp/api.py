# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``parallelize_module``: apply TP styles to submodules chosen by fnmatch globs."""
from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Dict, Union

from hyper_parallel.tp.style import ParallelStyle

__all__ = ["parallelize_module"]


def parallelize_module(module, device_mesh, parallelize_plan: Union[ParallelStyle, Dict[str, ParallelStyle]]):
    """Apply ``parallelize_plan`` to ``module`` in place and return it.

    ``parallelize_plan`` is a style (applied to ``module`` itself) or a dict whose keys are fnmatch
    globs over submodule names (``"layers.*.attention.wq"``). A key that matches no submodule is an
    error naming the key, so a typo never silently leaves a layer unsharded.
    """
    if isinstance(parallelize_plan, ParallelStyle):
        return parallelize_plan.apply(module, device_mesh)
    if not isinstance(parallelize_plan, dict):
        raise TypeError(f"parallelize_module(parallelize_plan): expected a ParallelStyle or a dict of "
                        f"glob -> ParallelStyle, got {type(parallelize_plan).__name__}")
    names = [name for name, _ in module.named_modules() if name]
    for pattern, style in parallelize_plan.items():
        if not isinstance(style, ParallelStyle):
            raise TypeError(f"parallelize_module: plan[{pattern!r}] must be a ParallelStyle, got "
                            f"{type(style).__name__}")
        hits = [n for n in names if fnmatchcase(n, pattern)]
        if not hits:
            raise ValueError(f"parallelize_module: plan key {pattern!r} matches no submodule of "
                             f"{type(module).__name__} (first names: {names[:8]})")
        for name in hits:
            style.apply(module.get_submodule(name), device_mesh)
    return module
