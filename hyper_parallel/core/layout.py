# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""HyperParallel-style ``Layout``: device matrix + alias names + tensor map, derived from placements.

``Layout((2, 4), ("dp", "tp"))("dp", "None")`` describes a 2-D tensor whose dim 0 is sharded over
the ``dp`` mesh dim and dim 1 is not sharded. It converts to and from placements; placements stay
the canonical form (a Layout is only a view, never kept in sync by hand).
"""
from __future__ import annotations

from typing import Dict, Optional, Sequence, Tuple, Union

from hyper_parallel.core.placement import Partial, Placement, Replicate, Shard

__all__ = ["Layout"]

_NONE = "None"
Axis = Union[str, Tuple[str, ...]]


class Layout:
    """Device matrix with alias names; call it with one axis per tensor dim to bind a tensor map.

    Args:
        device_matrix: mesh shape, e.g. ``(2, 4)``.
        alias_name: one name per mesh dim, e.g. ``("dp", "tp")``.
        rank_list: optional global ranks (row-major); default ``range(prod(device_matrix))``.
    """

    def __init__(self, device_matrix: Sequence[int], alias_name: Sequence[str],
                 rank_list: Optional[Sequence[int]] = None) -> None:
        self.device_matrix = tuple(int(d) for d in device_matrix)
        self.alias_name = tuple(alias_name)
        if len(self.alias_name) != len(self.device_matrix):
            raise ValueError(f"Layout: alias_name {self.alias_name} needs one name per device_matrix dim "
                             f"{self.device_matrix}")
        if _NONE in self.alias_name or len(set(self.alias_name)) != len(self.alias_name):
            raise ValueError(f"Layout: alias names must be unique and not 'None', got {self.alias_name}")
        self.rank_list = tuple(rank_list) if rank_list is not None else None
        self.tensor_axes: Optional[Tuple[Axis, ...]] = None
        self.partial: Dict[str, str] = {}

    def _check_axis(self, axis: Axis, used: list) -> None:
        names = (axis,) if isinstance(axis, str) else tuple(axis)
        for n in names:
            if n == _NONE:
                continue
            if n not in self.alias_name:
                raise ValueError(f"Layout: unknown alias {n!r}; known {self.alias_name}")
            if n in used:
                raise ValueError(f"Layout: alias {n!r} shards more than one tensor dim")
            used.append(n)
        idx = [self.alias_name.index(n) for n in names if n != _NONE]
        if idx != sorted(idx):
            raise ValueError(f"Layout: tensor axis {names} must list mesh dims outermost first "
                             f"({[self.alias_name[i] for i in sorted(idx)]})")

    def __call__(self, *tensor_map: Axis, partial: Optional[Dict[str, str]] = None) -> "Layout":
        out = Layout(self.device_matrix, self.alias_name, self.rank_list)
        used: list = []
        for axis in tensor_map:
            self._check_axis(axis, used)
        for name, op in (partial or {}).items():
            if name not in self.alias_name or name in used:
                raise ValueError(f"Layout: partial alias {name!r} must be a mesh dim not used in the tensor map")
            Partial(op)
        out.tensor_axes = tuple(tensor_map)
        out.partial = dict(partial or {})
        return out

    @property
    def placements(self) -> Tuple[Placement, ...]:
        """The canonical placements (one per mesh dim)."""
        if self.tensor_axes is None:
            raise ValueError("Layout: call the layout with a tensor map first, e.g. layout('dp', 'None')")
        out = []
        for name in self.alias_name:
            p: Placement = Partial(self.partial[name]) if name in self.partial else Replicate()
            for t, axis in enumerate(self.tensor_axes):
                names = (axis,) if isinstance(axis, str) else tuple(axis)
                if name in names:
                    p = Shard(t)
            out.append(p)
        return tuple(out)

    @property
    def tensor_map(self) -> Tuple[object, ...]:
        """MindSpore-style tensor map: mesh dims counted from the right, -1 = not sharded."""
        nd = len(self.device_matrix)
        out = []
        for axis in self.tensor_axes or ():
            names = [n for n in ((axis,) if isinstance(axis, str) else axis) if n != _NONE]
            idx = [nd - 1 - self.alias_name.index(n) for n in names]
            out.append(-1 if not idx else (idx[0] if len(idx) == 1 else tuple(idx)))
        return tuple(out)

    @classmethod
    def from_placements(cls, device_matrix: Sequence[int], alias_name: Sequence[str],
                        placements: Sequence[Placement], tensor_ndim: int) -> "Layout":
        """The Layout view of ``placements`` for a tensor of rank ``tensor_ndim``."""
        base = cls(device_matrix, alias_name)
        axes = [[] for _ in range(tensor_ndim)]
        partial = {}
        for name, p in zip(base.alias_name, placements):
            if isinstance(p, Shard):
                axes[p.dim % tensor_ndim].append(name)
            elif isinstance(p, Partial):
                partial[name] = p.reduce_op
        tmap = [(_NONE if not a else (a[0] if len(a) == 1 else tuple(a))) for a in axes]
        return base(*tmap, partial=partial)

    def __repr__(self) -> str:
        return (f"Layout(device_matrix={self.device_matrix}, alias_name={self.alias_name}, "
                f"tensor_map={self.tensor_axes})")
