# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ST: kill -9 of a rank in the middle of a checkpoint save (a real 2-process job, killed from outside):
the previous checkpoint stays ``latest`` and loads, the partial one is never published, and the next
manager on the folder removes it."""
import os
import signal
import socket
import time

def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank, port, folder):
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port), HYPER_PARALLEL_BACKEND="torch")
    from tests.st.torch.checkpoint_crash_job import main
    os._exit(main(folder))


def _spawn(folder):
    """The 2-rank job, forked from this process (torch is imported here already: starting is cheap)."""
    import multiprocessing
    import hyper_parallel.checkpoint._torch.api  # noqa: F401  # pylint: disable=unused-import
    ctx = multiprocessing.get_context("fork")
    port = _free_port()
    procs = [ctx.Process(target=_rank_main, args=(rank, port, str(folder)), daemon=True) for rank in range(2)]
    for p in procs:
        p.start()
    return procs


def _wait_for(path, procs, timeout):
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if any(p.exitcode is not None for p in procs) or time.monotonic() > deadline:
            for p in procs:
                p.kill()
            raise AssertionError(f"the job never reached the stall point (exit codes {[p.exitcode for p in procs]}; "
                                 "its output is above)")
        time.sleep(0.05)


def test_kill_9_mid_save_keeps_previous_checkpoint(tmp_path):
    import torch
    from hyper_parallel import checkpoint as ckpt
    folder = tmp_path / "run"
    procs = _spawn(folder)
    _wait_for(folder / "rank1-wrote-step2", procs, timeout=240)
    staging = (folder / "rank1-wrote-step2").read_text()
    os.kill(procs[1].pid, signal.SIGKILL)
    procs[1].join(30)
    assert procs[1].exitcode == -signal.SIGKILL
    # rank 0 is blocked in the save's collective; a launcher (torchrun) kills the rest of the job when
    # one rank dies: so do we, after a grace period in which it could (wrongly) publish something
    procs[0].join(2)
    if procs[0].exitcode is None:
        procs[0].kill()
        procs[0].join(30)


    # the partial save exists only as a hidden staging folder, never published and never latest
    assert os.path.isdir(staging) and os.path.basename(staging).startswith(".step-00000002.tmp-")
    assert os.path.exists(os.path.join(staging, "__1_0.safetensors"))
    assert not os.path.exists(os.path.join(staging, "metadata.json"))
    assert not (folder / "step-00000002").exists()
    assert (folder / "latest").read_text().strip() == "step-00000001"

    # a new run (one process, no process group) resumes from step 1 with the values of step 1
    manager = ckpt.CheckpointManager(folder, interval=1, keep_latest_k=1)
    assert not os.path.exists(staging)
    state = {"model": {"w": torch.zeros(8, 5)}, "step": 0}
    assert manager.load(state) == 1
    assert torch.equal(state["model"]["w"], torch.arange(40.0).reshape(8, 5)) and state["step"] == 1
