# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT: ``destroy_process_group()`` frees the backend's groups even while meshes and DTensors stay alive.

A mesh, its compiled redistribute steps and the dispatch cache used to keep gloo's process group (and its
worker threads) alive until interpreter exit, where tearing the threads down could abort the process
("terminate called without an active exception", exit -6) after the script had finished its work."""
import json
import subprocess
import sys
import textwrap

SCRIPT = '''
import json, os, sys
import torch
import hyper_parallel as hp

def threads():
    return sorted(open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task"))

hp.init_process_group("gloo", rank=0, world_size=1, init_method="file://" + sys.argv[1])
mesh = hp.init_device_mesh("cpu", (1,))
dx = hp.distribute_tensor(torch.arange(8.0).reshape(2, 4), mesh, [hp.Shard(0)])
full = torch.exp(dx).full_tensor()
before = [t for t in threads() if "gloo" in t]
hp.destroy_process_group()
after = [t for t in threads() if "gloo" in t]
try:
    mesh.get_group()
    error = ""
except RuntimeError as exc:
    error = str(exc)
print(json.dumps({"before": before, "after": after, "error": error,
                  "equal": bool(torch.equal(full, torch.exp(torch.arange(8.0).reshape(2, 4))))}))
'''


def test_destroy_process_group_frees_gloo_threads_while_mesh_and_dtensor_live(tmp_path):
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent(SCRIPT))
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "store")], capture_output=True, text=True,
                          timeout=180, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["equal"]
    assert out["before"], "the check needs gloo's worker threads to exist before destroy"
    assert out["after"] == [], out
    assert "destroyed by destroy_process_group()" in out["error"], out["error"]
