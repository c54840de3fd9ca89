# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT (one subprocess): the MindSpore models and ``hp-train --job.backend mindspore`` never import torch.

A fresh interpreter installs a ``sys.meta_path`` finder that raises ``ImportError`` for ``torch`` (and every
``torch.*``), then builds each MindSpore model (Llama 3, Qwen3, Qwen3-MoE, DeepSeek-V3), runs a forward and a
backward, round-trips its weights through the model family's Hugging Face adapter (NumPy values: the experts
stacked and split without torch) and trains Qwen3-MoE for 2 steps with ``hp-train`` on one rank. The finder
records every attempt with the function that made it: the models make none; the trainer makes exactly one, its
documented optional probe ``torch_initial_weights`` (start from the torch run's weights when torch is
installed), which falls back to the MindSpore init."""
import json
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(r'''
    import importlib.abc, json, sys, traceback
    blocked = []

    class NoTorch(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "torch" or name.startswith("torch."):
                ours = [f.name for f in traceback.extract_stack() if "hyper_parallel" in f.filename]
                blocked.append([name, ours[-1] if ours else "?"])
                raise ImportError(f"torch is blocked in this test (import of {name!r})")
            return None

    sys.meta_path.insert(0, NoTorch())
    import numpy as np
    import mindspore as ms
    ms.set_context(mode=ms.PYNATIVE_MODE)
    ms.set_device("CPU")
    from hyper_parallel.models import get_model_spec
    out = {}
    for name in ("llama3", "qwen3", "qwen3_moe", "deepseek_v3"):
        spec = get_model_spec(name, backend="mindspore")
        model = spec.model_cls(spec.flavors["debug"], seed=1)
        ids = ms.Tensor(np.random.default_rng(0).integers(0, 256, (2, 9)).astype(np.int32))
        params = model.trainable_params()
        loss, grads = ms.value_and_grad(lambda a: spec.loss_fn(model(a[:, :-1]), a[:, 1:]), None, params)(ids)
        adapter = spec.state_dict_adapter(model.config)
        mine = {n: p.asnumpy() for n, p in model.parameters_and_names()}
        back = adapter.from_hf(adapter.to_hf(mine))
        same = all(np.array_equal(back[n], v) for n, v in mine.items())
        out[name] = [float(loss.asnumpy()), len(grads), all(np.isfinite(g.asnumpy()).all() for g in grads), same]
    models_blocked = list(blocked)
    from hyper_parallel.trainer.cli import main
    code = main(["--config", "configs/mindspore_tp_fsdp.toml", "--job.nproc", "1", "--parallelism.tp", "1",
                 "--parallelism.dp_shard", "1", "--model.name", "qwen3_moe", "--training.steps", "2", "--optimizer.warmup_steps", "1",
                 "--training.global_batch", "2", "--training.seq_len", "16", "--job.out_dir", sys.argv[1]])
    print("RESULT", json.dumps({"models": out, "train_exit": code, "models_blocked": models_blocked,
                                "blocked": blocked,
                                "torch_loaded": sorted(m for m in sys.modules if m.split(".")[0] == "torch")}))
''')


def test_mindspore_models_and_trainer_run_with_torch_blocked(tmp_path):
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "run")], capture_output=True, text=True,
                          timeout=600, check=False)
    lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(lines[-1][len("RESULT "):])
    assert result["models_blocked"] == [] and result["torch_loaded"] == [], result
    assert result["blocked"] == [["torch", "torch_initial_weights"]], result
    assert result["train_exit"] == 0
    for name, (loss, n_grads, finite, same) in result["models"].items():
        assert 4.0 < loss < 7.0 and n_grads > 10 and finite and same, (name, result["models"][name])
    history = [json.loads(l) for l in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines() if l.strip()]
    losses = [m["loss"] for m in history if "loss" in m]
    assert len(losses) == 2 and all(4.0 < v < 8.0 for v in losses), history
