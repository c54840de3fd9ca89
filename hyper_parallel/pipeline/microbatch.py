# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Microbatch split/merge specs and size arithmetic (pure Python).

``BatchDimSpec(dim)`` (HyperParallel's name; torch calls it ``TensorChunkSpec``) says along which
dimension an argument is split into microbatches and its outputs are concatenated back. ``None`` in
a spec position (or a non-tensor argument) means "pass the same value to every microbatch".
Microbatch sizes follow ``torch.tensor_split``: the first ``size % m`` microbatches hold one more.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List

__all__ = ["BatchDimSpec", "TensorChunkSpec", "microbatch_sizes", "merge_entries"]


@dataclass(frozen=True)
class BatchDimSpec:
    """Split along ``dim`` (default 0) into microbatches; concatenate outputs along it."""

    dim: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.dim, int) or isinstance(self.dim, bool):
            raise TypeError(f"BatchDimSpec(dim): expected an int, got {self.dim!r}")

    @property
    def split_dim(self) -> int:
        """torch's name for ``dim``."""
        return self.dim

    def __str__(self) -> str:
        return f"BatchDimSpec({self.dim})"


#: torch's name, so code written for ``torch.distributed.pipelining`` runs unchanged
TensorChunkSpec = BatchDimSpec


def microbatch_sizes(size: int, n_microbatches: int, what: str = "batch", *, even: bool = False) -> List[int]:
    """Sizes of ``n_microbatches`` chunks of ``size`` rows; ``even=True`` demands equal chunks.

    Raises ``ValueError`` naming ``what`` when a microbatch would be empty or (with ``even``) unequal."""
    if n_microbatches < 1:
        raise ValueError(f"n_microbatches must be >= 1, got {n_microbatches}")
    if size < n_microbatches:
        raise ValueError(f"{what}: size {size} along the batch dim cannot be split into {n_microbatches} "
                         f"microbatches (each needs at least one row)")
    if even and size % n_microbatches:
        raise ValueError(f"{what}: size {size} along the batch dim is not divisible by n_microbatches="
                         f"{n_microbatches}; pass a batch whose size is a multiple of {n_microbatches}")
    base, extra = divmod(size, n_microbatches)
    return [base + (1 if i < extra else 0) for i in range(n_microbatches)]


def merge_entries(spec, n_outputs: int) -> List[object]:
    """One merge rule per last-stage output from ``output_merge_spec`` (torch's meaning):

    * ``None`` -> ``BatchDimSpec(0)`` for every output;
    * a ``BatchDimSpec`` -> that spec for every output;
    * a tuple/list with one entry per output, each a ``BatchDimSpec`` (concatenate along its dim), a
      reducer (an object with ``init_value`` and ``reduce_fn(acc, value)``, like torch's
      ``_CustomReducer``: folded over the microbatches in order), or anything else (torch's
      ``_Replicate``, ``None``): the output is the same in every microbatch and is returned once.
    """
    if spec is None:
        return [BatchDimSpec(0)] * n_outputs
    if isinstance(spec, BatchDimSpec):
        return [spec] * n_outputs
    if isinstance(spec, (tuple, list)):
        if len(spec) != n_outputs:
            raise ValueError(f"output_merge_spec has {len(spec)} entries but the last stage returns "
                             f"{n_outputs} output(s); give one entry per output")
        return list(spec)
    if n_outputs == 1:
        return [spec]
    raise TypeError(f"output_merge_spec: expected None, a BatchDimSpec or a tuple/list with one entry per output "
                    f"({n_outputs}), got {type(spec).__name__}")
