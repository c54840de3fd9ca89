# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``make multinode``: MindSpore's ``msrun`` with two node ranks, each node a network of its own. On one host
msrun cannot play two nodes over loopback: every msrun whose ``--master_addr`` is a local address starts the
scheduler (so both do, and the second fails on the port), and a non-local alias such as 127.0.0.2 does not reach
the scheduler bound to 127.0.0.1. So node 1 runs in a Linux network namespace joined to this host by a veth pair
(10.77.x.1 here, 10.77.x.2 there): node 0's msrun starts the scheduler on 10.77.x.1, node 1's reaches it over the
link, as on two machines. FSDP over the two nodes trains 3 steps equal to one MindSpore process.

A killed node is not resumed by msrun itself: its restart path (``stop_and_restart``) runs only under Huawei's
MindX DL cluster agent (``enable_mindx``), which is not available here. Without it the job is relaunched with
``checkpoint.resume = true`` — what a cluster scheduler (Slurm's ``--requeue``, a Kubernetes Job's restart policy)
does. ``test_msrun_killed_node_relaunches_and_resumes`` SIGKILLs node 1's msrun and its worker mid-run, measures
how node 0 reacts, relaunches both nodes, and checks that the resumed run's losses equal one process. Needs root
(``ip netns``)."""
import json
import os
import shutil
import subprocess
import sys
import time

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


def _args(out, cache, steps=STEPS, *extra):
    return ["--config", os.path.join(mn.ROOT, "configs", "mindspore_tp_fsdp.toml"), "--job.nproc", "2",
            "--parallelism.tp", "1", "--parallelism.dp_shard", "2", "--training.steps", str(steps), *extra,
            "--training.seq_len", "32", "--training.global_batch", "4", "--optimizer.warmup_steps", "1",
            "--data.max_corpus_mb", "0.3", "--metrics.progress", "false", "--metrics.plot", "false",
            "--job.out_dir", out, "--data.cache_dir", cache, "--demo.resume_steps", "0", "--demo.compare_steps", "0"]


def _losses(out):
    with open(os.path.join(out, "metrics.jsonl"), encoding="utf-8") as fh:
        return [json.loads(line)["loss"] for line in fh if line.strip()]


def _env():
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MS_ROLE")}
    env.update(GLOG_v="3", OMP_NUM_THREADS="1", PATH=os.path.dirname(sys.executable) + os.pathsep + env["PATH"])
    return env


def _one_process(tmp_path, cache, env, args):
    one = subprocess.run([sys.executable, "-m", "hyper_parallel.trainer.cli", *args, "--job.nproc", "1",
                          "--parallelism.dp_shard", "1"],
                         cwd=mn.ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert one.returncode == 0, one.stdout[-3000:] + one.stderr[-3000:]


class _Nodes:
    """A namespace for node 1 (see the module docstring); :meth:`start` launches both nodes' msrun."""

    def __init__(self, tmp_path, env):
        self.tmp, self.env = tmp_path, env
        self.tag = os.getpid() % 200 + 20
        self.ns, self.host_if, self.master = _netns(self.tag)
        self.exe = os.path.dirname(sys.executable)

    def start(self, args, name):
        """Both nodes' msrun on a fresh port, logs ``<name>-node<r>.out`` and msrun logs ``<name>-node<r>/``."""
        port = str(mn.free_port())
        common = ["--worker_num", "2", "--local_worker_num", "1", "--master_addr", self.master, "--master_port",
                  port, "--join", "True", "--cluster_time_out", "300"]
        procs = []
        for rank, prefix in ((0, []), (1, ["ip", "netns", "exec", self.ns, "env", f"PATH={self.env['PATH']}"])):
            log = open(self.tmp / f"{name}-node{rank}.out", "w+", encoding="utf-8")  # noqa  # pylint: disable=R1732
            procs.append((subprocess.Popen(  # pylint: disable=consider-using-with
                prefix + [os.path.join(self.exe, "msrun"), *common, "--node_rank", str(rank), "--log_dir",
                          str(self.tmp / f"{name}-node{rank}"), os.path.join(self.exe, "hp-train"), *args],
                cwd=mn.ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT), log))
        return procs

    def worker_log(self, name, rank=0):
        return (self.tmp / f"{name}-node{rank}" / f"worker_{rank}.log").read_text(encoding="utf-8", errors="replace")

    def close(self):
        subprocess.run(["ip", "netns", "del", self.ns], check=False, timeout=30)
        subprocess.run(["ip", "link", "del", self.host_if], check=False, capture_output=True, timeout=30)


def _wait(procs, timeout):
    codes = [p.wait(timeout=timeout) for p, _ in procs]
    for _, log in procs:
        log.close()
    return codes


def test_msrun_two_node_ranks_equal_one_process(tmp_path, tmp_path_factory):
    assert shutil.which("ip") and os.geteuid() == 0, "needs root and iproute2 (ip netns) for the second node"
    cache, env = str(tmp_path_factory.mktemp("ms_cache")), _env()
    _one_process(tmp_path, cache, env, _args(str(tmp_path / "one"), cache))
    nodes = _Nodes(tmp_path, env)
    out = str(tmp_path / "two")
    try:
        codes = _wait(nodes.start(_args(out, cache), "run"), timeout=900)
    finally:
        nodes.close()
    worker0 = nodes.worker_log("run")
    assert codes == [0, 0], (codes, worker0[-3000:])
    assert "launcher: msrun (rank 0, world 2)" in worker0 and "on 2 ranks, mesh {'dp_shard': 2}" in worker0
    two, single = _losses(out), _losses(str(tmp_path / "one"))
    assert len(two) == len(single) == STEPS
    for a, b in zip(two, single):
        assert abs(a - b) <= 2e-5 * abs(b), (two, single)


def test_msrun_killed_node_relaunches_and_resumes(tmp_path, tmp_path_factory):
    assert shutil.which("ip") and os.geteuid() == 0, "needs root and iproute2 (ip netns) for the second node"
    steps = 6
    cache, env = str(tmp_path_factory.mktemp("ms_cache")), _env()
    ckpt = ["--checkpoint.enable", "true", "--checkpoint.interval", "2", "--checkpoint.resume", "true",
            "--checkpoint.keep_latest_k", "0"]
    _one_process(tmp_path, cache, env, _args(str(tmp_path / "one"), cache, steps))
    nodes = _Nodes(tmp_path, env)
    out = str(tmp_path / "two")
    try:
        first = nodes.start(_args(out, cache, steps, *ckpt), "first")
        mn.wait_for_step(out, 3, [p for p, _ in first], timeout=600)
        killed_after = max(r["step"] for r in mn.metrics(out))
        mn.kill_node(first[1][0])
        start = time.monotonic()
        try:
            node0 = first[0][0].wait(timeout=120)
            reaction = f"node 0's msrun exited {node0} after {time.monotonic() - start:.1f} s"
        except subprocess.TimeoutExpired:  # what the scheduler does with a job that lost a node
            mn.kill_node(first[0][0])
            node0 = None
            reaction = "node 0's msrun still waited after 120 s and was ended (as a cluster scheduler would)"
        for _, log in first:
            log.close()
        assert node0 != 0, "node 0 reported success although node 1 was killed mid-run"
        codes = _wait(nodes.start(_args(out, cache, steps, *ckpt), "again"), timeout=900)
    finally:
        nodes.close()
    worker0 = nodes.worker_log("again")
    assert codes == [0, 0], (codes, worker0[-3000:])
    assert "resumed from" in worker0, worker0[-3000:]
    got = mn.final_losses(out)
    single = _losses(str(tmp_path / "one"))
    assert sorted(got) == list(range(1, steps + 1)), got
    bad = {s: (got[s], single[s - 1]) for s in got if abs(got[s] - single[s - 1]) > 2e-5 * abs(single[s - 1])}
    assert not bad, bad
    print(f"msrun: node 1 killed after step {killed_after}; {reaction}; relaunched, resumed, losses equal one "
          f"process at {steps} steps")
