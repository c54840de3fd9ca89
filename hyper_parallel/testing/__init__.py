# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Testing helpers: run a function or a pytest test body on N gloo ranks in reused processes.

Importing this package is cheap (standard library only); torch is imported in the workers.

Example::

    from hyper_parallel.testing import multi_rank

    @pytest.mark.parametrize("n", [1, 5])
    @multi_rank(world_size=2, timeout=30)
    def test_all_reduce(n):
        import torch, torch.distributed as dist
        t = torch.full((n,), float(dist.get_rank() + 1))
        dist.all_reduce(t)
        assert torch.equal(t, torch.full((n,), 3.0))
"""
from hyper_parallel.testing.multiprocess import (
    COLLECTIVE_TIMEOUT_ENV,
    MultiRankError,
    MultiRankTimeout,
    PoolStartupError,
    WorkerPool,
    default_collective_timeout,
    get_pool,
    multi_rank,
    run_on_ranks,
    shutdown_pools,
)

__all__ = [
    "COLLECTIVE_TIMEOUT_ENV",
    "MultiRankError",
    "MultiRankTimeout",
    "PoolStartupError",
    "WorkerPool",
    "default_collective_timeout",
    "get_pool",
    "multi_rank",
    "run_on_ranks",
    "shutdown_pools",
]
