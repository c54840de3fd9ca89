# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``make multinode``: scripts/slurm/train.sbatch submitted to a real two-node Slurm cluster on this host
(scripts/slurm/local_cluster.sh: slurmctld + two slurmd of Debian's slurm-wlm, auth/none, private ports):
srun starts one torchrun agent per node, the agents meet at the first node's c10d endpoint, and FSDP over the
two nodes trains 3 steps equal to one process. Needs slurm-wlm installed (``apt-get install slurm-wlm``)."""
import os
import shutil
import subprocess
import sys

from tests.st.torch import multinode as mn

SCRIPTS = os.path.join(mn.ROOT, "scripts", "slurm")


def test_sbatch_two_nodes_equals_one_process(tmp_path, tmp_path_factory):
    assert shutil.which("slurmctld") and shutil.which("sbatch"), \
        "Slurm is not installed: apt-get install slurm-wlm (or run the other multinode tests)"
    cluster = tmp_path / "cluster"
    env = dict(mn.env(), HP_SLURM_PORT=str(mn.free_port()))
    subprocess.run([os.path.join(SCRIPTS, "local_cluster.sh"), "start", str(cluster)], env=env, check=True,
                   timeout=120)
    try:
        env.update(SLURM_CONF=str(cluster / "slurm.conf"), HP_PYTHON=sys.executable,
                   HP_RDZV_PORT=str(mn.free_port()))
        out = str(tmp_path / "run")
        values = mn.overrides(out, str(tmp_path_factory.mktemp("cache")), parallelism__tp=1, parallelism__dp_shard=2,
                              training__steps=3)
        args = mn.cli_args("tp.toml", values)[2:]  # the config is the script's first argument
        log = tmp_path / "job.out"
        res = subprocess.run(["sbatch", "--wait", "--nodes", "2", f"--output={log}", f"--chdir={mn.ROOT}",
                              os.path.join(SCRIPTS, "train.sbatch"), "configs/tp.toml", *args], env=env,
                             capture_output=True, text=True, timeout=900, check=False)
        text = log.read_text(encoding="utf-8") if log.exists() else ""
        assert res.returncode == 0, res.stdout + res.stderr + text[-3000:]
    finally:
        subprocess.run([os.path.join(SCRIPTS, "local_cluster.sh"), "stop", str(cluster)], env=env, check=False,
                       timeout=60)
    assert "hp-train on 2 nodes x 1 ranks" in text and "launcher: torchrun (2 nodes" in text, text[-3000:]
    got, want = mn.final_losses(out), mn.one_process_losses("tp.toml", values)
    assert sorted(got) == [1, 2, 3], got
    for step, loss in want.items():
        assert abs(got[step] - loss) <= 2e-5 * abs(loss), (step, got[step], loss)
