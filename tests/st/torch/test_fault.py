# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ST: fault behaviour of the library's collectives — a rank dies mid-redistribute and the survivor
fails with a ``CollectiveError`` naming the collective and its group, within the collective timeout."""
import os
import time

import pytest

from hyper_parallel.testing import MultiRankError, get_pool


def _case_rank_dies_during_redistribute():
    import torch
    import torch.distributed as dist
    import hyper_parallel as hp
    from hyper_parallel import Replicate, Shard
    mesh = hp.init_device_mesh("cpu", (2,))
    d = hp.distribute_tensor(torch.ones(64, 8), mesh, [Shard(0)])
    if dist.get_rank() == 1:
        time.sleep(0.5)  # let rank 0 enter the all-gather first
        os._exit(7)
    started = time.monotonic()
    try:
        d.redistribute(placements=[Replicate()])
    except hp.CollectiveError as exc:
        elapsed = time.monotonic() - started
        raise hp.CollectiveError(f"{exc} [after {elapsed:.1f} s]") from exc


def _case_sum():
    import torch
    import torch.distributed as dist
    t = torch.ones(1)
    dist.all_reduce(t)
    return t.item()


def test_rank_death_gives_clear_collective_error():
    pool = get_pool(2, collective_timeout=3.0)
    with pytest.raises(MultiRankError) as info:
        pool.run(_case_rank_dies_during_redistribute, case="rank-death-redistribute", timeout=30)
    err = info.value
    assert err.died == {1: 7}
    assert "rank 1 died (exit code 7)" in str(err)
    assert list(err.failures) == [0], str(err)
    survivor = err.failures[0]
    assert "CollectiveError" in survivor and "all_gather over ranks (0, 1) failed" in survivor, survivor
    assert "a peer rank may have died" in survivor
    print(survivor)
    # the pool recovers for the next case
    assert pool.run(_case_sum, timeout=30) == [2.0, 2.0]
