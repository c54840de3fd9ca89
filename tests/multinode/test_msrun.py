# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``make multinode``: MindSpore's ``msrun`` with two node ranks, each node a network of its own. On one host
msrun cannot play two nodes over loopback: every msrun whose ``--master_addr`` is a local address starts the
scheduler (so both do, and the second fails on the port), and a non-local alias such as 127.0.0.2 does not reach
the scheduler bound to 127.0.0.1. So node 1 runs in a Linux network namespace joined to this host by a veth pair
(10.77.x.1 here, 10.77.x.2 there): node 0's msrun starts the scheduler on 10.77.x.1, node 1's reaches it over the
link, as on two machines. FSDP over the two nodes trains 3 steps equal to one MindSpore process.

A killed node is not resumed by msrun: its restart path (``stop_and_restart``) runs only under Huawei's MindX DL
cluster agent (``enable_mindx``), which is not available here; without it the job fails and is relaunched with
``checkpoint.resume = true`` (what the other ST of the MindSpore trainer checks on one node). Needs root (``ip
netns``)."""
import json
import os
import shutil
import subprocess
import sys

from tests.st.torch import multinode as mn

STEPS = 3


def _ip(*args, ns=None):
    cmd = (["ip", "netns", "exec", ns] if ns else []) + ["ip", *args]
    subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=30)


def _netns(tag):
    """A namespace ``hpms<tag>`` linked to this host; returns (namespace, host address, namespace address)."""
    ns, host_if, ns_if = f"hpms{tag}", f"hpm{tag}a", f"hpm{tag}b"
    net = f"10.77.{tag % 250}"
    _ip("netns", "add", ns)
    _ip("link", "add", host_if, "type", "veth", "peer", "name", ns_if)
    _ip("link", "set", ns_if, "netns", ns)
    _ip("addr", "add", f"{net}.1/24", "dev", host_if)
    _ip("link", "set", host_if, "up")
    _ip("addr", "add", f"{net}.2/24", "dev", ns_if, ns=ns)
    _ip("link", "set", ns_if, "up", ns=ns)
    _ip("link", "set", "lo", "up", ns=ns)
    return ns, host_if, f"{net}.1"


def _args(out, cache):
    return ["--config", os.path.join(mn.ROOT, "configs", "mindspore_tp_fsdp.toml"), "--job.nproc", "2",
            "--parallelism.tp", "1", "--parallelism.dp_shard", "2", "--training.steps", str(STEPS),
            "--training.seq_len", "32", "--training.global_batch", "4", "--optimizer.warmup_steps", "1",
            "--data.max_corpus_mb", "0.3", "--metrics.progress", "false", "--metrics.plot", "false",
            "--job.out_dir", out, "--data.cache_dir", cache, "--demo.resume_steps", "0", "--demo.compare_steps", "0"]


def _losses(out):
    with open(os.path.join(out, "metrics.jsonl"), encoding="utf-8") as fh:
        return [json.loads(line)["loss"] for line in fh if line.strip()]


def test_msrun_two_node_ranks_equal_one_process(tmp_path, tmp_path_factory):
    assert shutil.which("ip") and os.geteuid() == 0, "needs root and iproute2 (ip netns) for the second node"
    cache = str(tmp_path_factory.mktemp("ms_cache"))
    hp_train = os.path.join(os.path.dirname(sys.executable), "hp-train")
    msrun = os.path.join(os.path.dirname(sys.executable), "msrun")
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MS_ROLE")}
    env.update(GLOG_v="3", OMP_NUM_THREADS="1", PATH=os.path.dirname(sys.executable) + os.pathsep + env["PATH"])
    one = subprocess.run([sys.executable, "-m", "hyper_parallel.trainer.cli",
                          *_args(str(tmp_path / "one"), cache), "--job.nproc", "1", "--parallelism.dp_shard", "1"],
                         cwd=mn.ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert one.returncode == 0, one.stdout[-3000:] + one.stderr[-3000:]
    tag = os.getpid() % 200 + 20
    ns, host_if, master = _netns(tag)
    out, port = str(tmp_path / "two"), str(mn.free_port())
    try:
        common = ["--worker_num", "2", "--local_worker_num", "1", "--master_addr", master, "--master_port", port,
                  "--join", "True", "--cluster_time_out", "300"]
        procs = []
        for rank, prefix in ((0, []), (1, ["ip", "netns", "exec", ns, "env", f"PATH={env['PATH']}"])):
            log = open(tmp_path / f"node{rank}.out", "w+", encoding="utf-8")  # pylint: disable=consider-using-with
            procs.append((subprocess.Popen(  # pylint: disable=consider-using-with
                prefix + [msrun, *common, "--node_rank", str(rank), "--log_dir", str(tmp_path / f"node{rank}"),
                          hp_train, *_args(out, cache)], cwd=mn.ROOT, env=env, stdout=log, stderr=subprocess.STDOUT),
                log))
        codes = [p.wait(timeout=900) for p, _ in procs]
        for _, log in procs:
            log.close()
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False, timeout=30)
        subprocess.run(["ip", "link", "del", host_if], check=False, capture_output=True, timeout=30)
    worker0 = (tmp_path / "node0" / "worker_0.log").read_text(encoding="utf-8", errors="replace")
    assert codes == [0, 0], (codes, worker0[-3000:])
    assert "launcher: msrun (rank 0, world 2)" in worker0 and "on 2 ranks, mesh {'dp_shard': 2}" in worker0
    two, single = _losses(out), _losses(str(tmp_path / "one"))
    assert len(two) == len(single) == STEPS
    for a, b in zip(two, single):
        assert abs(a - b) <= 2e-5 * abs(b), (two, single)
