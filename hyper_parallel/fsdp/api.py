# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Pure parts of FSDP: the policies, ``reshard_after_forward`` validation and the flat-buffer layout.

Nothing here imports a framework; dtypes are whatever objects the backend uses (``torch.bfloat16``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence, Tuple

from hyper_parallel.core.placement import chunk_sizes

__all__ = ["MixedPrecisionPolicy", "OffloadPolicy", "CPUOffloadPolicy", "FlatLayout", "post_forward_group_size"]


@dataclass(frozen=True)
class MixedPrecisionPolicy:
    """Dtypes of the compute path (FSDP2 semantics).

    Args:
        param_dtype: dtype of the unsharded parameters used in forward/backward (the all-gather runs
            in it); ``None`` keeps the parameters' own dtype.
        reduce_dtype: dtype of the gradient reduction; ``None`` means ``param_dtype`` (or the
            parameters' dtype). Reduced gradients are cast back to the sharded parameters' dtype.
        output_dtype: dtype the module's floating-point outputs are cast to; ``None`` leaves them.
        cast_forward_inputs: cast floating-point forward inputs to ``param_dtype``.
    """

    param_dtype: Any = None
    reduce_dtype: Any = None
    output_dtype: Any = None
    cast_forward_inputs: bool = True


@dataclass(frozen=True)
class OffloadPolicy:
    """No offloading: sharded parameters, gradients and optimizer states stay on the compute device."""


@dataclass(frozen=True)
class CPUOffloadPolicy(OffloadPolicy):
    """Keep sharded parameters and gradients (hence the optimizer states) on the CPU.

    Each unshard copies the local shard to the compute device before the all-gather, and each
    reduced gradient shard is copied back. ``pin_memory`` pins the CPU buffers (only where an
    accelerator exists) so that those copies are asynchronous.
    """

    pin_memory: bool = True


def post_forward_group_size(reshard_after_forward: Any, shard_size: int) -> int:
    """Size of the group a unit's parameters are resharded over after forward.

    ``True`` -> ``shard_size`` (fully resharded), ``False`` -> 1 (kept unsharded), an int ``k`` ->
    ``k`` (each rank keeps ``1/k`` of the unit; backward all-gathers within ``k`` ranks only).
    ``k`` must divide ``shard_size``.
    """
    if isinstance(reshard_after_forward, bool):
        return shard_size if reshard_after_forward else 1
    if not isinstance(reshard_after_forward, int):
        raise TypeError(f"fully_shard(reshard_after_forward): expected True, False or an int, got "
                        f"{reshard_after_forward!r}")
    k = reshard_after_forward
    if k < 1 or k > shard_size or shard_size % k:
        raise ValueError(f"fully_shard(reshard_after_forward={k}): an int must be a divisor of the shard "
                         f"group size {shard_size} (1 <= k <= {shard_size})")
    return k


class FlatLayout:
    """Where each parameter's local shard lives in a unit's flat buffer (one per dtype).

    Parameter ``i`` of shape ``(d0, *rest)`` is sharded on dim 0 with ``torch.chunk`` sizes over
    ``world`` ranks. Every rank reserves the same padded *slot* of ``ceil(d0 / world) * prod(rest)``
    elements for it, so the sharded buffer of every rank has ``total`` elements and the all-gather
    output is rank-major: ``[rank 0: slot 0, slot 1, ... | rank 1: ...]``. The unsharded buffer is
    parameter-major: parameter ``i`` occupies ``world * slots[i]`` elements from
    ``world * offsets[i]``; its first ``d0 * prod(rest)`` elements are the full parameter.
    """

    __slots__ = ("shapes", "world", "rows", "inner", "slots", "offsets", "total")

    def __init__(self, shapes: Sequence[Sequence[int]], world: int) -> None:
        if world <= 0:
            raise ValueError(f"FlatLayout(world): expected a positive group size, got {world}")
        self.shapes = tuple(tuple(int(s) for s in shape) for shape in shapes)
        self.world = world
        rows, inner, slots, offsets = [], [], [], []
        total = 0
        for i, shape in enumerate(self.shapes):
            if not shape:
                raise ValueError(f"FlatLayout(shapes[{i}]): a 0-dimensional parameter cannot be sharded on dim 0")
            r = -(-shape[0] // world)
            n = 1
            for s in shape[1:]:
                n *= s
            rows.append(r)
            inner.append(n)
            slots.append(r * n)
            offsets.append(total)
            total += r * n
        self.rows: Tuple[int, ...] = tuple(rows)
        self.inner: Tuple[int, ...] = tuple(inner)
        self.slots: Tuple[int, ...] = tuple(slots)
        self.offsets: Tuple[int, ...] = tuple(offsets)
        self.total = total

    def local_shape(self, i: int, index: int) -> Tuple[int, ...]:
        """Shape of parameter ``i``'s shard on rank ``index`` (``torch.chunk`` sizes, maybe empty)."""
        shape = self.shapes[i]
        return (chunk_sizes(shape[0], self.world)[index],) + shape[1:]

    def local_numel(self, i: int, index: int) -> int:
        """Element count of parameter ``i``'s shard on rank ``index``."""
        return self.local_shape(i, index)[0] * self.inner[i]

    def full_numel(self, i: int) -> int:
        """Element count of the whole parameter ``i``."""
        return self.shapes[i][0] * self.inner[i]

    def unsharded_range(self, i: int) -> Tuple[int, int]:
        """``(offset, padded length)`` of parameter ``i`` in the unsharded (parameter-major) buffer."""
        return self.world * self.offsets[i], self.world * self.slots[i]

    def post_forward_range(self, k: int, position: int) -> Tuple[int, int]:
        """``(offset, length)`` of the gathered buffer a rank at ``position`` of a ``k``-rank group
        keeps after forward when resharding to ``k`` ranks (the gathered buffer has ``world * total``)."""
        if k <= 0 or self.world % k:
            raise ValueError(f"FlatLayout.post_forward_range(k={k}): k must divide the group size {self.world}")
        length = self.world * self.total // k
        return position * length, length

    def __repr__(self) -> str:
        return f"FlatLayout(world={self.world}, shapes={list(self.shapes)}, total={self.total})"


def dtype_groups(dtypes: Sequence[Any]) -> Tuple[Tuple[Any, Tuple[int, ...]], ...]:
    """Indices grouped by dtype, in order of first appearance: one flat buffer per group."""
    order: list = []
    groups: dict = {}
    for i, d in enumerate(dtypes):
        if d not in groups:
            groups[d] = []
            order.append(d)
        groups[d].append(i)
    return tuple((d, tuple(groups[d])) for d in order)


def resolve_reduce_dtype(policy: Optional[MixedPrecisionPolicy], param_dtype: Any) -> Any:
    """The reduction dtype of a bucket whose compute dtype is ``param_dtype``."""
    if policy is None or policy.reduce_dtype is None:
        return param_dtype
    return policy.reduce_dtype
