# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ST (2 gloo ranks under torchrun, run 3 times): ``destroy_process_group()`` while an FSDP model is still alive
frees gloo's groups and worker threads, and every rank exits 0 with no "terminate called" in its stderr.

The FSDP units kept their shard / replicate groups (and the mesh-order table its unsorted groups) until
interpreter exit, where tearing gloo's threads down could abort a rank (SIGABRT, "terminate called without an
active exception") after the script had finished."""
import json
import subprocess
import sys
import textwrap

SCRIPT = '''
import json, os, sys
import torch
import hyper_parallel as hp
from hyper_parallel.fsdp._torch.fully_shard import fully_shard

def gloo_threads():
    names = [open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task")]
    return sorted(n for n in names if "gloo" in n)

hp.init_process_group("gloo")
mesh = hp.init_device_mesh("cpu", (2,), mesh_dim_names=("dp",))
model = fully_shard(torch.nn.Linear(4, 4), mesh=mesh)
model(torch.ones(2, 4)).sum().backward()
before = gloo_threads()
hp.destroy_process_group()
with open(os.path.join(sys.argv[1], f"rank{os.environ['RANK']}.json"), "w") as fh:
    json.dump({"rank": int(os.environ["RANK"]), "before": before, "after": gloo_threads(),
               "model_alive": model is not None}, fh)
'''


def test_destroy_with_a_live_fsdp_model_frees_gloo_threads_and_every_rank_exits_0(tmp_path):
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent(SCRIPT))
    for attempt in range(3):
        out = tmp_path / f"attempt{attempt}"
        out.mkdir()
        proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                               str(script), str(out)], capture_output=True, text=True, timeout=240, check=False)
        assert proc.returncode == 0, (attempt, proc.stderr[-3000:])
        assert "terminate called" not in proc.stderr, (attempt, proc.stderr[-3000:])
        rows = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
        assert [r["rank"] for r in rows] == [0, 1], rows
        for row in rows:
            assert row["before"] and row["model_alive"], row  # the check needs live threads and a live model
            assert row["after"] == [], row
