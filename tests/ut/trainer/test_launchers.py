# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT: which launcher started hp-train (torchrun, srun, msrun, none), the rank variables of a task srun started,
the torchrun command lines hp-train builds (one node, one node of several), and the srun + torchrun command line
scripts/slurm/train.sbatch builds inside an allocation (``scontrol`` answered by a stand-in that prints what
Slurm 22.05 prints; the real submission is ``make multinode``)."""
import os
import shlex
import subprocess
import sys

import pytest

from hyper_parallel.trainer.launcher import detect_launcher, srun_rank_env, torchrun_command

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def test_detect_launcher():
    torchrun = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1", "GROUP_WORLD_SIZE": "2",
                "TORCHELASTIC_RUN_ID": "x"}
    got = detect_launcher(torchrun)
    assert (got.name, got.world_size, got.nnodes, got.node_rank) == ("torchrun", 4, 2, 1)
    assert got.describe() == "launcher: torchrun (2 nodes, this is node 1, world 4)"
    srun = {"SLURM_PROCID": "2", "SLURM_NTASKS": "4", "SLURM_NNODES": "2", "SLURM_NODEID": "1", "SLURM_LOCALID": "0"}
    assert detect_launcher(srun).name == "srun"
    assert detect_launcher(dict(srun, **torchrun)).name == "torchrun"  # srun + torchrun: torchrun set the ranks
    assert detect_launcher({"MS_ROLE": "MS_WORKER", "MS_WORKER_NUM": "4",
                            "MS_NODE_ID": "3"}).describe() == "launcher: msrun (rank 3, world 4)"
    assert detect_launcher({"RANK": "0", "WORLD_SIZE": "2"}).name == "env"
    assert not detect_launcher({}).outside and "launches torchrun itself" in detect_launcher({}).describe()
    assert detect_launcher({"SLURM_PROCID": "0", "SLURM_NTASKS": "1"}).name == "none"  # sbatch's own shell


def test_srun_rank_env():
    env = {"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1", "SLURM_NNODES": "2",
           "SLURM_NTASKS_PER_NODE": "2(x2)", "SLURM_LAUNCH_NODE_IPADDR": "10.0.0.5"}
    assert srun_rank_env(env) == {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
                                  "MASTER_ADDR": "10.0.0.5", "MASTER_PORT": "29500"}
    assert srun_rank_env(dict(env, MASTER_ADDR="n1", MASTER_PORT="1234"))["MASTER_ADDR"] == "n1"
    with pytest.raises(ValueError, match="SLURM_LOCALID"):
        srun_rank_env({"SLURM_PROCID": "0", "SLURM_NTASKS": "2"})


def test_torchrun_commands():
    one = torchrun_command("py", 4, ["-m", "hyper_parallel.trainer.cli", "--config", "c.toml"], max_restarts=1)
    assert one == ["py", "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "4", "--max-restarts", "1",
                   "-m", "hyper_parallel.trainer.cli", "--config", "c.toml"]
    two = torchrun_command("py", 4, ["-m", "hyper_parallel.trainer.cli"], nnodes=2, node_rank=1,
                           rdzv_endpoint="h:29400", rdzv_id="r")
    assert two[3:] == ["--nnodes", "2", "--nproc_per_node", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "h:29400",
                       "--rdzv-id", "r", "--node-rank", "1", "-m", "hyper_parallel.trainer.cli"]
    fast = torchrun_command("py", 2, ["-m", "x"], module="hyper_parallel.trainer._torch.torchrun")
    assert fast == ["py", "-m", "hyper_parallel.trainer._torch.torchrun", "--standalone", "--nproc_per_node", "2",
                    "-m", "x"]
    with pytest.raises(ValueError, match="split evenly"):
        torchrun_command("py", 3, [], nnodes=2, rdzv_endpoint="h:1")
    with pytest.raises(ValueError, match="--rdzv-endpoint"):
        torchrun_command("py", 4, [], nnodes=2)


def test_hp_train_multi_node_flags_are_checked_before_launch(tmp_path):
    res = subprocess.run([sys.executable, "-m", "hyper_parallel.trainer.cli", "--config",
                          os.path.join(ROOT, "configs", "tp.toml"), "--nnodes", "2"], cwd=str(tmp_path),
                         env={k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")},
                         capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "--rdzv-endpoint" in res.stderr, res.stderr


SCONTROL = """#!/bin/sh
# stand-in for Slurm 22.05's scontrol: the two answers train.sbatch asks for
case "$1 $2" in
  "show hostnames") printf 'gpu-a17\\ngpu-a18\\n' ;;
  "show node") echo "NodeName=$3 Arch=x86_64 CoresPerSocket=32 CPUAlloc=0 NodeAddr=10.1.2.17 NodeHostName=$3 State=IDLE" ;;
  *) exit 1 ;;
esac
"""


def test_sbatch_script_command_line(tmp_path):
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "scontrol").write_text(SCONTROL, encoding="utf-8")
    (shim / "scontrol").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "HP_"))}
    env.update(PATH=f"{shim}:{env['PATH']}", SLURM_JOB_NUM_NODES="2", SLURM_JOB_NODELIST="gpu-a[17-18]",
               SLURM_JOB_ID="4242", HP_DRY_RUN="1", HP_NPROC_PER_NODE="8", HP_PYTHON="/opt/venv/bin/python")
    res = subprocess.run(["bash", os.path.join(ROOT, "scripts", "slurm", "train.sbatch"), "configs/x.toml",
                          "--training.steps", "5"], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 0, res.stderr
    first, line = res.stdout.strip().splitlines()
    assert first == "hp-train on 2 nodes x 8 ranks, rendezvous 10.1.2.17:29500"
    assert shlex.split(line) == [
        "srun", "--nodes", "2", "--ntasks-per-node", "1", "--kill-on-bad-exit=1", "/opt/venv/bin/python", "-m",
        "torch.distributed.run", "--nnodes", "2", "--nproc_per_node", "8", "--rdzv-id", "4242", "--rdzv-backend",
        "c10d", "--rdzv-endpoint", "10.1.2.17:29500", "--max-restarts", "0", "-m", "hyper_parallel.trainer.cli",
        "--config", "configs/x.toml", "--job.nproc", "16", "--training.steps", "5"]
    del env["SLURM_JOB_NUM_NODES"]
    res = subprocess.run(["bash", os.path.join(ROOT, "scripts", "slurm", "train.sbatch"), "c.toml"], env=env,
                         capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode != 0 and "not inside a Slurm allocation" in res.stderr


def test_hp_train_launches_one_node_through_the_fast_torchrun_and_several_through_torchrun():
    from types import SimpleNamespace
    from hyper_parallel.trainer.cli import FAST_TORCHRUN, launch_command
    from hyper_parallel.trainer.config import load_config
    cfg = load_config(None, [("job.nproc", 4)])
    one = launch_command(cfg, ["--job.nproc", "4"])
    assert one[1:5] == ["-m", FAST_TORCHRUN, "--standalone", "--nproc_per_node"]
    many = launch_command(cfg, ["--job.nproc", "4", "--nnodes", "2"],
                          args=SimpleNamespace(nnodes=2, node_rank=0, rdzv_endpoint="h:1", rdzv_id="r"))
    assert many[1:4] == ["-m", "torch.distributed.run", "--nnodes"] and "--nnodes" not in many[many.index("-m", 3):]


def test_exit_rank_runs_atexit_flushes_and_exits_with_the_code(tmp_path):
    """A launched rank (RANK set) ends through exit_rank: atexit handlers run (activation swap files are removed
    by one), buffered output reaches the pipe, the exit status is main's; without RANK it is a plain exit."""
    marker = tmp_path / "atexit_ran"
    code = ("import atexit, sys\n"
            f"atexit.register(lambda: open({str(marker)!r}, 'w').write('ok'))\n"
            "from hyper_parallel.trainer.cli import exit_rank\n"
            "sys.stdout.write('buffered, no newline')\n"
            "exit_rank(3)\n")
    for env in (dict(os.environ, RANK="0"), {k: v for k, v in os.environ.items() if k != "RANK"}):
        marker.unlink(missing_ok=True)
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120,
                             check=False)
        assert res.returncode == 3 and res.stdout == "buffered, no newline", (res.returncode, res.stdout, res.stderr)
        assert marker.read_text() == "ok"
