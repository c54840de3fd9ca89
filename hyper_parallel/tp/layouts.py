# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Layout arguments of the TP styles (pure; the styles and both backends' implementations use it)."""
from __future__ import annotations

from typing import Any, Optional, Sequence, Tuple, Union

from hyper_parallel.core.placement import Placement

__all__ = ["Layouts", "as_layouts", "one_layout", "check_one_dim_mesh"]

Layouts = Union[None, Placement, Sequence[Optional[Placement]]]


def as_layouts(layouts: Layouts) -> Optional[Tuple[Optional[Placement], ...]]:
    """``layouts`` (``None``, one placement, or one per position) as a tuple (``None`` stays ``None``)."""
    if layouts is None:
        return None
    if isinstance(layouts, Placement):
        return (layouts,)
    return tuple(layouts)


def one_layout(layouts: Layouts, style: str) -> Optional[Placement]:
    """The single layout of a 1-D-mesh style (``None`` when unset); more than one is an error."""
    found = as_layouts(layouts)
    if not found:
        return None
    if len(found) != 1:
        raise ValueError(f"{style}: TP styles take one layout per 1-D mesh, got {found}")
    return found[0]


def check_one_dim_mesh(mesh: Any, style: str) -> None:
    """TP styles work on a 1-D mesh (a slice of a larger one)."""
    if mesh.ndim != 1:
        raise ValueError(f"{style}: expected a 1-D device mesh (slice it, e.g. mesh['tp']), got {mesh}")
