# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ST: ``hp-train --job.backend mindspore`` with the models beyond Llama 3, 2 steps each (debug flavors, 32-token
sequences, 4 per batch): DeepSeek-V3 (MLA, MoE with group-limited routing and expert-bias balancing) on 2
MindSpore ranks with FSDP (one cluster launch, started by hp-train) against the same config on one MindSpore
process; Qwen3 (QK-norm, tied embeddings) on one MindSpore process against the torch trainer on one process
(the MindSpore backend starts from the torch model's weights for the seed). Qwen3-MoE trains on MindSpore in
``tests/ut/mindspore/test_no_torch_on_mindspore.py`` (with torch blocked)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "mindspore_tp_fsdp.toml"
SMALL = ["--training.steps", "2", "--training.seq_len", "32", "--training.global_batch", "4",
         "--optimizer.warmup_steps", "1", "--metrics.progress", "false", "--parallelism.tp", "1"]
LAUNCH_TIMEOUT_S = 420


def _hp_train(out: Path, *extra: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "hyper_parallel.trainer.cli", "--config", str(CONFIG), *SMALL,
           "--job.out_dir", str(out), *extra]
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MS_ROLE")}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=LAUNCH_TIMEOUT_S,
                          check=False)
    assert proc.returncode == 0, f"hp-train {extra} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}"
    return proc


def _metric(out: Path, key: str = "loss"):
    lines = (out / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line)[key] for line in lines]


def test_deepseek_v3_fsdp_on_two_mindspore_ranks_equals_one_process(tmp_path):
    model = ["--model.name", "deepseek_v3", "--model.flavor", "debug"]
    two = _hp_train(tmp_path / "two", *model, "--job.nproc", "2", "--parallelism.dp_shard", "2")
    assert "deepseek_v3/debug on 2 ranks" in two.stdout, two.stdout[-2000:]
    _hp_train(tmp_path / "one", *model, "--job.nproc", "1", "--parallelism.dp_shard", "1")
    losses, want = _metric(tmp_path / "two"), _metric(tmp_path / "one")
    assert len(losses) == 2 and losses[0] > 6.0 and losses[0] != losses[1]
    np.testing.assert_allclose(losses, want, rtol=1e-5)
    np.testing.assert_allclose(_metric(tmp_path / "two", "grad_norm"), _metric(tmp_path / "one", "grad_norm"),
                               rtol=1e-4)


def test_qwen3_on_mindspore_matches_the_torch_trainer(tmp_path):
    from hyper_parallel.trainer.api import LLMTrainer
    from hyper_parallel.trainer.cli import _parser
    from hyper_parallel.trainer.config import load_config, parse_overrides
    model = ["--model.name", "qwen3", "--model.flavor", "debug", "--job.nproc", "1", "--parallelism.dp_shard", "1"]
    _hp_train(tmp_path / "ms", *model)
    _, rest = _parser().parse_known_args(SMALL + model)
    overrides = parse_overrides(rest) + [("job.backend", "torch"), ("job.out_dir", str(tmp_path / "torch"))]
    trainer = LLMTrainer(load_config(str(CONFIG), overrides), distributed=False)
    try:
        history = trainer.train(resume=False)
    finally:
        trainer.close()
    np.testing.assert_allclose(_metric(tmp_path / "ms"), [m["loss"] for m in history], rtol=1e-4)
    np.testing.assert_allclose(_metric(tmp_path / "ms", "grad_norm"), [m["grad_norm"] for m in history], rtol=1e-3)
