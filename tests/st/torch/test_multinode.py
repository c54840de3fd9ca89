# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ST (the cheap representative of ``make multinode``): two torchrun agents on localhost as two nodes of a c10d
rendezvous, one started as an outside launcher (``torchrun ... -m hyper_parallel.trainer.cli``), the other by
``hp-train --nnodes 2 --rdzv-endpoint`` launching itself; FSDP over the two "nodes" trains 3 steps equal to one
process, and each hp-train says which launcher it detected."""
from tests.st.torch import multinode as mn


def test_two_node_torchrun_fsdp_equals_one_process(tmp_path, trainer_cache_dir):
    out = str(tmp_path / "run")
    values = mn.overrides(out, trainer_cache_dir, job__nproc=2, parallelism__tp=1, parallelism__dp_shard=2,
                          training__steps=3)
    args = mn.cli_args("tp.toml", values)
    port = mn.free_port()
    with open(tmp_path / "node0.log", "w+", encoding="utf-8") as log0, \
            open(tmp_path / "node1.log", "w+", encoding="utf-8") as log1:
        procs = [mn.torchrun_agent(0, port, 1, args, log0), mn.hp_train_agent(1, port, args, log1)]
        node0, node1 = mn.finish(procs, [log0, log1], timeout=300)
    both = node0 + node1
    assert "hp-train: launcher: none; starting -m torch.distributed.run --nnodes" in node1, node1[-2000:]
    assert "launcher: torchrun (2 nodes, this is node" in both and "1 intra-op threads per rank" in both, both[-3000:]
    got = mn.final_losses(out)
    want = mn.one_process_losses("tp.toml", values)
    assert sorted(got) == [1, 2, 3], got
    for step, loss in want.items():
        assert abs(got[step] - loss) <= 2e-5 * abs(loss), (step, got[step], loss)
