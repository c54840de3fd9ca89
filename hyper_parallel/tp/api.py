# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``parallelize_module``: apply TP styles to sub-modules chosen by fnmatch globs (torch modules and
MindSpore cells alike)."""
from __future__ import annotations

from typing import Dict, Union

from hyper_parallel.core.patterns import select
from hyper_parallel.platform import platform_for_module
from hyper_parallel.tp.style import ParallelStyle

__all__ = ["parallelize_module"]

def parallelize_module(module, device_mesh, parallelize_plan: Union[ParallelStyle, Dict[str, ParallelStyle]]):
    """Apply ``parallelize_plan`` to ``module`` (a ``torch.nn.Module`` or a ``mindspore.nn.Cell``) in place
    and return it.

    ``parallelize_plan`` is a style (applied to ``module`` itself) or a dict whose keys are fnmatch
    globs over sub-module names (``"layers.*.attention.wq"``). A key that matches no sub-module is an
    error naming the key, so a typo never silently leaves a layer unsharded.
    """
    if isinstance(parallelize_plan, ParallelStyle):
        return parallelize_plan.apply(module, device_mesh)
    if not isinstance(parallelize_plan, dict):
        raise TypeError(f"parallelize_module(parallelize_plan): expected a ParallelStyle or a dict of "
                        f"glob -> ParallelStyle, got {type(parallelize_plan).__name__}")
    plat = platform_for_module(module)
    subs = {name: sub for name, sub in getattr(module, plat.submodules_method)() if name}
    names = list(subs)
    for pattern, style in parallelize_plan.items():
        if not isinstance(style, ParallelStyle):
            raise TypeError(f"parallelize_module: plan[{pattern!r}] must be a ParallelStyle, got "
                            f"{type(style).__name__}")
        hits = select(names, pattern, f"parallelize_module: plan key {pattern!r} matches no {plat.submodule_word} of "
                                      f"{type(module).__name__} (first names: {names[:8]})")
        for name in hits:
            style.apply(subs[name], device_mesh)
    return module
