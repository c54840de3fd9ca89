# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Token dispatch planning, backend-free: permutation by expert, the count exchange, capacity and the
choice of the expert kernel.

The dispatch of one MoE call on ``ep`` ranks, each owning ``L = E / ep`` consecutive experts:

1. *permute*: the ``N * k`` routed slots of the rank's ``N`` tokens are ordered by expert (stable,
   so token order is kept inside an expert) -> ``counts[e]`` slots per expert;
2. *count exchange*: one all-to-all of ``counts`` (``L`` entries to each rank) tells every rank how
   many rows each source sends to each of its local experts: ``recv[src][local_e]``;
3. *token exchange*: rows go out with ``input_splits[dst] = sum(counts of dst's experts)`` and come in
   with ``output_splits[src] = sum(recv[src])``, source-major;
4. *regroup*: the received rows are reordered expert-major (all sources of local expert 0, then 1 ...)
   so that one grouped matmul runs every local expert; :class:`ExchangePlan` holds that order as
   chunks of the source-major buffer.

The combine runs the same steps backwards. Only the split sizes cross to the host: step 2 is where
the host waits (the token exchange needs its split sizes before it can be issued).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from hyper_parallel.moe.api import check_expert_parallel

__all__ = ["ExchangePlan", "input_splits", "exchange_plan", "permutation_order", "capacity",
           "expert_kernel", "GROUPED_MM_DTYPES"]


def input_splits(counts: Sequence[int], ep: int) -> List[int]:
    """Rows sent to each of the ``ep`` ranks: the slots of its ``E / ep`` experts."""
    local = check_expert_parallel(len(counts), ep)
    return [sum(counts[r * local:(r + 1) * local]) for r in range(ep)]


@dataclass(frozen=True)
class ExchangePlan:
    """What a rank receives in one dispatch and how to regroup it by local expert.

    Attributes:
        output_splits: rows from each source rank (source-major receive buffer).
        tokens_per_expert: rows of each local expert after the regroup.
        chunk_starts / chunk_lengths: the regrouped buffer is the concatenation of these chunks of
            the receive buffer (expert-major: for each local expert, one chunk per source rank).
    """

    output_splits: Tuple[int, ...]
    tokens_per_expert: Tuple[int, ...]
    chunk_starts: Tuple[int, ...]
    chunk_lengths: Tuple[int, ...]

    @property
    def total(self) -> int:
        """Rows received."""
        return sum(self.output_splits)

    def regroup_index(self) -> List[int]:
        """Row ``i`` of the regrouped buffer is row ``regroup_index()[i]`` of the receive buffer
        (reference form; the backends build the same index with vector ops)."""
        out: List[int] = []
        for start, length in zip(self.chunk_starts, self.chunk_lengths):
            out.extend(range(start, start + length))
        return out


def exchange_plan(recv_counts: Sequence[Sequence[int]]) -> ExchangePlan:
    """Plan from the count exchange: ``recv_counts[src][e]`` rows from rank ``src`` for local expert ``e``."""
    if not recv_counts:
        raise ValueError("exchange_plan(recv_counts): expected one row per source rank, got none")
    local = len(recv_counts[0])
    if any(len(row) != local for row in recv_counts):
        raise ValueError(f"exchange_plan(recv_counts): rows of unequal length {[len(r) for r in recv_counts]}")
    if any(c < 0 for row in recv_counts for c in row):
        raise ValueError(f"exchange_plan(recv_counts): negative count in {recv_counts}")
    output = tuple(sum(row) for row in recv_counts)
    src_offset = [sum(output[:s]) for s in range(len(output))]
    starts, lengths = [], []
    for e in range(local):
        for src, row in enumerate(recv_counts):
            starts.append(src_offset[src] + sum(row[:e]))
            lengths.append(row[e])
    per_expert = tuple(sum(row[e] for row in recv_counts) for e in range(local))
    return ExchangePlan(output, per_expert, tuple(starts), tuple(lengths))


def permutation_order(experts: Sequence[Sequence[int]], num_experts: int,
                      capacity_per_expert: Optional[int] = None) -> Tuple[List[int], List[int]]:
    """Reference permutation: ``(slots, counts)``. ``slots`` lists the kept routed slots
    (``token * k + j``) ordered by expert, token order inside an expert; with a capacity only the first
    ``capacity_per_expert`` slots of each expert are kept. ``counts[e]`` = kept slots of expert ``e``."""
    k = len(experts[0]) if experts else 0
    by_expert: List[List[int]] = [[] for _ in range(num_experts)]
    for t, row in enumerate(experts):
        for j, e in enumerate(row):
            by_expert[e].append(t * k + j)
    if capacity_per_expert is not None:
        by_expert = [slots[:capacity_per_expert] for slots in by_expert]
    return [s for slots in by_expert for s in slots], [len(s) for s in by_expert]


def capacity(num_tokens: int, top_k: int, num_experts: int, capacity_factor: Optional[float]) -> Optional[int]:
    """Slots one expert takes per call: ``ceil(factor * tokens * k / E)``; ``None`` (dropless) without a factor."""
    if capacity_factor is None:
        return None
    return int(math.ceil(capacity_factor * num_tokens * top_k / num_experts))


#: dtypes ``torch._grouped_mm`` accepts (CPU: all three; CUDA: bfloat16 on SM >= 80)
GROUPED_MM_DTYPES = {"cpu": ("float32", "bfloat16", "float16"), "cuda": ("bfloat16",)}


def expert_kernel(device_type: str, dtype_name: str, itemsize: int, dim: int, hidden_dim: int,
                  available: bool = True) -> Tuple[str, str]:
    """``("grouped_mm" | "loop", reason)``: whether the experts can run as grouped matmuls.

    ``torch._grouped_mm`` needs a supported dtype on the device and every non-unit stride of its
    operands (``dim`` and the local ``hidden_dim`` rows, weights transposed) to be a multiple of 16
    bytes; otherwise (and where the kernel does not exist, e.g. MindSpore) the experts run one matmul
    per expert.
    """
    if not available:
        return "loop", "no grouped matmul kernel on this backend"
    allowed = GROUPED_MM_DTYPES.get(device_type)
    if allowed is None:
        return "loop", f"no grouped matmul kernel for device {device_type!r}"
    if dtype_name not in allowed:
        return "loop", f"grouped matmul on {device_type} takes {allowed}, not {dtype_name}"
    for name, n in (("dim", dim), ("hidden_dim", hidden_dim)):
        if (n * itemsize) % 16:
            return "loop", (f"{name}={n} x {itemsize} bytes is not a multiple of 16 bytes (the grouped matmul's "
                            "stride rule)")
    return "grouped_mm", "grouped matmul"
