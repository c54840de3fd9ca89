# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ST: ``hyper_parallel.integration.transformers`` under a real ``torchrun --nproc_per_node 2`` (gloo) equals the
plain ``transformers.Trainer`` on one process: per-step gradient norms, logged losses and the final weights, for
FSDP with gradient accumulation and clipping, TP 2 with selective recompute, FSDP with activation swap to disk,
a save at step 2 + resume to step 4 (and its Hugging Face export loaded by ``from_pretrained``), and the
LlamaFactory trainer class built with LlamaFactory's keywords. One torchrun launch runs every case
(``hf_trainer_job.py``); the reference runs in this process's subprocess without torchrun."""
import os
import subprocess
import sys

import pytest
import torch

JOB = os.path.join(os.path.dirname(__file__), "hf_trainer_job.py")
TIMEOUT = 420
CASES = ["fsdp", "tp2_selective", "fsdp_swap", "resume", "lf"]


def _run(cmd, out):
    env = dict(os.environ, PYTHONPATH=os.path.dirname(__file__), OMP_NUM_THREADS="1", TRANSFORMERS_VERBOSITY="error")
    proc = subprocess.run(cmd + [JOB, str(out)], env=env, capture_output=True, text=True, timeout=TIMEOUT,
                          check=False)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n" \
                                 f"{proc.stderr[-6000:]}"


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("hf_trainer")
    _run([sys.executable], out)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    _run(torchrun, out)
    ref = torch.load(out / "reference.pt", weights_only=False)
    return ref, {name: torch.load(out / f"{name}.pt", weights_only=False) for name in CASES + ["main_names"]}


def _max_diff(a, b):
    assert sorted(a) == sorted(b)
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)


@pytest.mark.st
@pytest.mark.parametrize("case", CASES)
def test_two_ranks_equal_one_process(results, case):
    ref, got = results[0], results[1][case]
    assert len(ref["norms"]) == 4 and len(got["norms"]) == 4
    for a, b in zip(got["norms"], ref["norms"]):
        assert a == pytest.approx(b, rel=2e-5, abs=1e-6)
    assert got["losses"] == pytest.approx(ref["losses"], abs=2e-4)  # transformers logs losses rounded to 4 digits
    # the weights equal the reference's: AdamW turns fp32 noise in near-zero gradients into up to ~1% of lr
    assert _max_diff(ref["weights"], got["weights"]) < 1e-5


@pytest.mark.st
def test_layouts_really_applied(results):
    got = results[1]
    assert got["fsdp"]["class"].startswith("FSDP")
    assert got["tp2_selective"]["class"] == "LlamaForCausalLM"  # dp = 1: TP only, no fully_shard unit
    assert got["tp2_selective"]["activation"]["layers"] == {"model.layers.0": "selective-op",
                                                            "model.layers.1": "selective-op"}
    swap = got["fsdp_swap"]["activation"]["swap"]
    assert swap["swapped_tensors"] > 0 and swap["bytes_in"] == swap["bytes_out"] > 0
    assert set(got["lf"]["activation"]["layers"].values()) == {"full"}


@pytest.mark.st
def test_checkpoint_folder_and_export_load_in_transformers(results):
    import transformers
    got = results[1]["resume"]
    assert {"hyper_parallel", "scheduler.pt", "trainer_state.json", "model.safetensors"} <= set(got["ckpt_files"])
    model = transformers.AutoModelForCausalLM.from_pretrained(got["export"])
    assert type(model).__name__ == "LlamaForCausalLM"
    assert _max_diff({k: v for k, v in model.state_dict().items()}, got["weights"]) == 0.0


@pytest.mark.st
def test_llamafactory_main_branch_names(results):
    got = results[1]["main_names"]
    assert got["is_hsdp_module"] and got["loaded"] and not got["missing_loads"]
    assert got["resume_diff"] == 0.0  # the loaded model + optimizer continue exactly like the saved ones
    assert got["sched"] == 1
    assert got["ranks"] == (0, 0, (0,), 0)  # rank 0's record: cp rank, dp rank, its CP group, platform rank
