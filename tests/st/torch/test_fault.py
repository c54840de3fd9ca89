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


def _case_group_made_by_torch_reports_its_timeout():
    import datetime
    import torch
    import torch.distributed as dist
    import hyper_parallel as hp
    from hyper_parallel.platform import get_platform
    from hyper_parallel.platform.base import P2POp
    plat = get_platform("torch")
    group = dist.new_group([0, 1], timeout=datetime.timedelta(seconds=2))  # made by torch, not by hp
    errors = []
    if dist.get_rank() == 0:  # rank 1 never takes part: rank 0 times out after the group's 2 s
        try:
            plat.batch_isend_irecv([P2POp("recv", torch.zeros(1), 1, group, 5)])[0].wait()
        except hp.CollectiveError as exc:
            errors.append(str(exc))
        try:
            plat.all_reduce(torch.ones(1), "sum", group)
        except hp.CollectiveError as exc:
            errors.append(str(exc))
    dist.barrier()
    from hyper_parallel.core.process_group import collective_timeout_seconds
    return errors, collective_timeout_seconds()


def test_collective_error_reports_the_timeout_of_a_group_made_outside_hyper_parallel():
    results = get_pool(2).run(_case_group_made_by_torch_reports_its_timeout, timeout=60)
    errors, pool_timeout = results[0]
    assert pool_timeout != 2.0  # the world's timeout differs, so the message must come from the group
    assert len(errors) == 2, errors
    assert "recv from rank 1" in errors[0] and "collective timeout 2 s" in errors[0], errors[0]
    assert "all_reduce over ranks (0, 1)" in errors[1] and "collective timeout 2 s" in errors[1], errors[1]
    assert results[1] == ([], pool_timeout)
