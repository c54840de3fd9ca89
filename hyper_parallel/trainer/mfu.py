# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Model FLOPs utilisation (pure arithmetic; the backends count the parameters and measure the peak).

``flops_per_token`` is TorchTitan's estimate: ``6 * N_matmul + 12 * L * H * S`` where ``N_matmul`` is the
parameters that take part in a matmul for one token: all of them minus the input embedding (a table lookup,
unless it is tied to the output projection) and, in MoE layers, minus the experts a token is not routed to
(``1 - top_k / num_experts`` of the routed experts' parameters).

``mfu = flops_per_token * tokens / (seconds * world_size * peak_per_rank)``: the model's FLOPs of the step over
what the ranks could have done in the step's wall time. ``peak_per_rank`` is the single-thread matmul
throughput times the rank's intra-op threads (:func:`peak_from_single_thread`): a multi-threaded
measurement on a shared CPU is at the mercy of the scheduler (a rank with 2 threads on a loaded 2-core machine
measured 2 GFLOP/s against 140 with 1 thread), which made MFU read 144-590 %.
"""
from __future__ import annotations

__all__ = ["flops_per_token", "mfu", "peak_from_single_thread"]


def flops_per_token(n_params: int, layers: int, hidden: int, seq_len: int, *, n_embedding: int = 0,
                    n_routed_experts: int = 0, top_k: int = 0, num_experts: int = 0) -> float:
    """Training FLOPs per token (forward + backward): ``6 * N_matmul + 12 * layers * hidden * seq_len``.

    ``n_embedding``: the input embedding's parameters (0 when tied to the output projection);
    ``n_routed_experts``: the parameters of every routed expert of every MoE layer, of which a token uses
    ``top_k / num_experts``."""
    if min(n_params, layers, hidden, seq_len, n_embedding, n_routed_experts) < 0:
        raise ValueError("flops_per_token: counts must be >= 0")
    idle = 0.0
    if n_routed_experts:
        if not 0 < top_k <= num_experts:
            raise ValueError(f"flops_per_token: need 0 < top_k <= num_experts, got {top_k}, {num_experts}")
        idle = n_routed_experts * (1.0 - top_k / num_experts)
    active = n_params - n_embedding - idle
    if active < 0:
        raise ValueError(f"flops_per_token: the embedding and idle experts ({n_embedding + idle:g}) exceed "
                         f"n_params {n_params}")
    return 6.0 * active + 12.0 * layers * hidden * seq_len


def mfu(flops_token: float, tokens: int, seconds: float, world_size: int, peak_per_rank: float) -> float:
    """The fraction of the ranks' peak that one step of ``tokens`` tokens in ``seconds`` used (0 without a
    peak or a time)."""
    if seconds <= 0 or peak_per_rank <= 0 or world_size < 1:
        return 0.0
    return flops_token * tokens / (seconds * world_size * peak_per_rank)


def peak_from_single_thread(single_thread_flops: float, threads: int) -> float:
    """A rank's peak: the single-thread matmul FLOP/s times its intra-op threads."""
    return single_thread_flops * max(1, int(threads))
