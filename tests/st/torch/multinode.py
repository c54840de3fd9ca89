# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Helpers of the multi-node tests: torchrun agents on localhost acting as nodes of a c10d rendezvous, the
trainer's command line, the metrics it wrote, and one process training the same global batches."""
import json
import os
import signal
import socket
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
HP_TRAIN = [sys.executable, "-m", "hyper_parallel.trainer.cli"]


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def overrides(out, cache, **extra):
    """Small data, 1 intra-op thread per rank (every "node" shares this machine), no demo phases."""
    base = {"job.out_dir": out, "data.cache_dir": cache, "data.max_corpus_mb": 0.3, "training.seq_len": 32,
            "training.global_batch": 4, "optimizer.total_steps": 100, "metrics.progress": False,
            "metrics.plot": False, "metrics.eval_every": 0, "demo.resume_steps": 0, "demo.compare_steps": 0,
            "job.threads": 1}
    base.update({k.replace("__", "."): v for k, v in extra.items()})
    return base


def cli_args(config, values):
    args = ["--config", os.path.join(ROOT, "configs", config)]
    for key, value in values.items():
        args += [f"--{key}", str(value).lower() if isinstance(value, bool) else str(value)]
    return args


def env():
    """The environment of an agent: no launcher variables of an enclosing job; a fresh bootstrap store per
    rendezvous round (a replaced node must not read the keys of the round before)."""
    out = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
           and not k.startswith("TORCHELASTIC_")}
    out.update(TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1", HYPER_PARALLEL_COLLECTIVE_TIMEOUT="300")
    return out


def torchrun_agent(node_rank, port, nproc_per_node, args, log, max_restarts=0, run_id="hp-mn"):
    """A torchrun agent (an outside launcher) running hp-train as node ``node_rank`` of 2."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc_per_node", str(nproc_per_node),
           "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", run_id,
           "--node-rank", str(node_rank), "--max-restarts", str(max_restarts), "-m", "hyper_parallel.trainer.cli",
           *args]
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env(), cwd=ROOT)  # noqa


def hp_train_agent(node_rank, port, args, log, max_restarts=0, run_id="hp-mn"):
    """hp-train launching itself as node ``node_rank`` of 2 (``--nnodes 2 --rdzv-endpoint``)."""
    cmd = HP_TRAIN + args + ["--nnodes", "2", "--node-rank", str(node_rank), "--rdzv-endpoint", f"127.0.0.1:{port}",
                             "--rdzv-id", run_id, "--max-restarts", str(max_restarts)]
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env(), cwd=ROOT)  # noqa


def descendants(pid):
    """Every process below ``pid`` (Linux /proc)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/task/{p}/children", encoding="ascii") as fh:
                kids = [int(x) for x in fh.read().split()]
        except OSError:
            kids = []
        out += kids
        todo += kids
    return out


def kill_node(proc):
    """SIGKILL an agent and its workers at once (a node lost)."""
    victims = [proc.pid] + descendants(proc.pid)
    for pid in victims:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()


def metrics(out):
    path = os.path.join(out, "metrics.jsonl")
    if not os.path.isfile(path):
        return []
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def wait_for_step(out, step, procs, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(r["step"] >= step for r in metrics(out)):
            return
        if all(p.poll() is not None for p in procs):
            raise AssertionError(f"the agents ended before step {step}")
        time.sleep(0.2)
    raise AssertionError(f"no step {step} within {timeout} s")


def finish(procs, logs, timeout):
    """Wait for every agent; on a failure or a timeout, the logs' tails in the assertion."""
    deadline = time.monotonic() + timeout
    try:
        for p in procs:
            p.wait(timeout=max(1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        pass
    texts = []
    for log in logs:
        log.flush()
        with open(log.name, encoding="utf-8", errors="replace") as fh:
            texts.append(fh.read())
    for p in procs:
        if p.poll() is None:
            kill_node(p)
    codes = [p.returncode for p in procs]
    assert codes == [0] * len(procs), f"exit codes {codes}\n" + "\n----\n".join(t[-3000:] for t in texts)
    return texts


def one_process_losses(config, values):
    """Losses of one process (no process group, every degree 1) training the same global batches."""
    from hyper_parallel.trainer.api import LLMTrainer, derived_config
    from hyper_parallel.trainer.config import load_config
    cfg = load_config(os.path.join(ROOT, "configs", config), list(values.items()))
    single = derived_config(cfg, parallelism={"dp_replicate": 1, "dp_shard": -1, "tp": 1, "cp": 1, "ep": 1, "pp": 1},
                            checkpoint={"enable": False}, metrics={"jsonl": False},
                            job={"out_dir": values["job.out_dir"] + "_single"})
    return {m["step"]: m["loss"] for m in LLMTrainer(single, distributed=False).train()}


def final_losses(out):
    """step -> loss of the last attempt that ran it (a resumed run repeats the steps after its checkpoint)."""
    return {r["step"]: r["loss"] for r in metrics(out)}
