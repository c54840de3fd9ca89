# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ST: ``python -m hyper_parallel.trainer._torch.torchrun`` (what ``hp-train`` launches one node through) is torchrun
with the same arguments and failure report: every rank runs and its output arrives, success exits 0 (without the
interpreter teardown), a failing rank exits 1 with torchrun's "Root Cause" report naming it."""
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent('''
    import os, sys
    rank = int(os.environ["RANK"])
    print(f"rank {rank} of {os.environ['WORLD_SIZE']} ran", flush=True)
    sys.exit(int(sys.argv[1]) if rank == 1 else 0)
''')


def _launch(script, code):
    return subprocess.run([sys.executable, "-m", "hyper_parallel.trainer._torch.torchrun", "--standalone",
                           "--nproc_per_node", "2", str(script), str(code)], capture_output=True, text=True,
                          timeout=300, check=False)


def test_fast_torchrun_succeeds_and_fails_as_torchrun(tmp_path):
    script = tmp_path / "rank.py"
    script.write_text(SCRIPT)
    ok = _launch(script, 0)
    assert ok.returncode == 0, ok.stderr[-3000:]
    assert "rank 0 of 2 ran" in ok.stdout and "rank 1 of 2 ran" in ok.stdout, ok.stdout
    bad = _launch(script, 3)
    assert bad.returncode == 1, (bad.returncode, bad.stderr[-3000:])
    assert "Root Cause" in bad.stderr and "exitcode  : 3" in bad.stderr and "rank      : 1" in bad.stderr, \
        bad.stderr[-3000:]
