# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""A 2-rank job for the kill -9 test: checkpoint step 1, then start step 2 and stall rank 1 right after its
data file is written (it leaves a marker file and waits to be killed by the test).

    RANK=r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=p python -m tests.st.torch.checkpoint_crash_job FOLDER

(``test_checkpoint_crash.py`` forks the two ranks from the test process and calls :func:`main`.)
"""
import os
import sys
import time


def main(folder: str) -> int:
    """Run the job; returns the exit status."""
    import torch
    import torch.distributed as dist
    import hyper_parallel as hp
    from hyper_parallel import Shard
    from hyper_parallel import checkpoint as ckpt
    from hyper_parallel.checkpoint._torch import storage
    hp.init_process_group("gloo", timeout=20)
    rank = dist.get_rank()
    mesh = hp.init_device_mesh("cpu", (2,))
    manager = ckpt.CheckpointManager(folder, interval=1, keep_latest_k=1)
    weight = hp.distribute_tensor(torch.arange(40.0).reshape(8, 5), mesh, [Shard(0)])
    states = {"model": {"w": weight}, "step": 1}
    manager.save(1, states)
    original = storage.FileSystemWriter.write_data

    def stalled(self, plan, planner):
        out = original(self, plan, planner)
        if rank == 1:
            with open(os.path.join(folder, "rank1-wrote-step2"), "w", encoding="utf-8") as f:
                f.write(plan.storage_data.staging)
            time.sleep(120)  # killed here by the test
        return out

    storage.FileSystemWriter.write_data = stalled
    with torch.no_grad():
        weight.add_(100.0)
    states["step"] = 2
    manager.save(2, states)  # never completes: rank 1 dies inside it
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
