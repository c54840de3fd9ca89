# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``make multinode``: FSDP x TP over two torchrun "nodes" on localhost (2 ranks each: dp_shard 2 x tp 2), a
checkpoint every 3 steps; node 1 (its agent and its workers) is SIGKILLed mid-run and a replacement agent joins
the c10d rendezvous; the surviving agent restarts its workers (``--max-restarts``), every rank resumes from the
newest checkpoint, and the per-step losses of the finished run equal one process."""
import os
import time

from tests.st.torch import multinode as mn


def test_fsdp_tp_two_nodes_survive_a_killed_node(tmp_path, tmp_path_factory):
    out = str(tmp_path / "run")
    cache = str(tmp_path_factory.mktemp("cache"))
    steps = 12
    values = mn.overrides(out, cache, job__nproc=4, parallelism__tp=2, parallelism__dp_shard=2,
                          training__steps=steps, checkpoint__enable=True, checkpoint__interval=3,
                          checkpoint__async_mode="disabled", checkpoint__resume=True, checkpoint__keep_latest_k=0)
    args = mn.cli_args("tp.toml", values)
    port = mn.free_port()
    logs = [open(tmp_path / name, "w+", encoding="utf-8")  # pylint: disable=consider-using-with
            for name in ("node0.log", "node1.log", "node1-replacement.log")]
    try:
        node0 = mn.torchrun_agent(0, port, 2, args, logs[0], max_restarts=2)
        node1 = mn.hp_train_agent(1, port, args, logs[1], max_restarts=2)
        mn.wait_for_step(out, 5, [node0, node1], timeout=400)
        mn.kill_node(node1)
        killed_after = max(r["step"] for r in mn.metrics(out))
        time.sleep(1.0)
        replacement = mn.hp_train_agent(1, port, args, logs[2], max_restarts=2)
        texts = mn.finish([node0, replacement], [logs[0], logs[2]], timeout=600)
    finally:
        for log in logs:
            log.close()
    both = "\n".join(texts)
    assert "resumed from" in both and os.path.isdir(os.path.join(out, "checkpoints")), both[-3000:]
    rows = mn.metrics(out)
    seen = [r["step"] for r in rows]
    assert seen.count(steps) == 1 and len(seen) > steps, seen  # some steps ran twice: after the resume
    resumed_at = seen[seen.index(killed_after) + 1] if killed_after in seen[:-1] else None
    got = mn.final_losses(out)
    want = mn.one_process_losses("tp.toml", values)
    assert sorted(got) == list(range(1, steps + 1)), got
    bad = {s: (got[s], want[s]) for s in want if abs(got[s] - want[s]) > 2e-5 * abs(want[s])}
    assert not bad, bad
    print(f"node 1 killed after step {killed_after}; the run went on at step {resumed_at}; steps seen {seen}")
