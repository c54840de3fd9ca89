# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Forward+backward tokens/s of each model's ``small`` flavor, ours vs Hugging Face ``transformers`` (eager
attention) on one process, same weights (HF ``save_pretrained`` -> our adapter) and inputs; rounds of the
two interleaved so machine noise hits both alike. Prints the ratio ours / HF and the load average.

    .venv/bin/python benchmarks/models.py [--batch 4] [--seq 128] [--rounds 5] [--iters 3]
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import torch
import transformers

from hyper_parallel.checkpoint import load_hf
from hyper_parallel.models import get_model_spec

MODELS = ("llama3", "qwen3", "qwen3_moe", "deepseek_v3")


def _hf(adapter):
    cfg = dict(adapter.hf_config())
    model_type = cfg.pop("model_type")
    cfg.pop("architectures")
    return transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(model_type, **cfg),
                                                         attn_implementation="eager", dtype=torch.float32)


def _step(model, ids, labels, hf: bool):
    logits = model(input_ids=ids).logits if hf else model(ids)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
    loss.backward()
    model.zero_grad(set_to_none=True)


def main() -> None:
    """Run the comparison and print one row per model."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iters", type=int, default=3)
    args = parser.parse_args()
    torch.manual_seed(0)
    print(f"load average {os.getloadavg()[0]:.1f}; batch {args.batch} x seq {args.seq}; torch {torch.__version__}, "
          f"transformers {transformers.__version__}")
    print(f"{'model':<12} {'ours tok/s':>11} {'HF tok/s':>10} {'ours/HF':>8}")
    for name in MODELS:
        spec = get_model_spec(name)
        config = spec.config("small")
        adapter = spec.state_dict_adapter(config)
        hf = _hf(adapter)
        with tempfile.TemporaryDirectory() as tmp:
            hf.save_pretrained(tmp)
            ours = spec.build("small")
            load_hf(ours, tmp, adapter)
        ids = torch.randint(0, config.vocab_size, (args.batch, args.seq))
        labels = torch.randint(0, config.vocab_size, (args.batch, args.seq))
        runs = {"ours": lambda m=ours, i=ids, y=labels: _step(m, i, y, False),
                "hf": lambda m=hf, i=ids, y=labels: _step(m, i, y, True)}
        for fn in runs.values():
            fn()
        times = {k: [] for k in runs}
        for _ in range(args.rounds):
            for key, fn in runs.items():
                start = time.perf_counter()
                for _ in range(args.iters):
                    fn()
                times[key].append((time.perf_counter() - start) / args.iters)
        tokens = args.batch * args.seq
        ours_tps, hf_tps = (tokens / statistics.median(times[k]) for k in ("ours", "hf"))
        print(f"{name:<12} {ours_tps:>11.0f} {hf_tps:>10.0f} {ours_tps / hf_tps:>7.2f}x")


if __name__ == "__main__":
    main()
