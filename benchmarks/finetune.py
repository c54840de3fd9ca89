# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Fine-tuning benchmark (not a test; ``make bench-finetune``), 2 CPU ranks, FSDP:

1. ``[model] init_from`` (meta build, each rank reads only its shards) against a full load (every rank builds
   the whole model and reads every tensor, then FSDP shards it): time to the end of the first step and peak
   resident memory per rank, on a ~170M-parameter Llama written by transformers;
2. SFT throughput in real (non-pad) tokens per second with and without packing (the tiny Llama,
   examples/finetune/sft.jsonl, seq_len 256).

Each measurement runs in a fresh torchrun job; modes alternate over ``--rounds`` rounds (interleaved, so machine
load drifts hit both sides). Prints a table and the ratios; ``--json`` writes the raw numbers.
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SFT = os.path.join(ROOT, "examples", "finetune", "sft.jsonl")
BIG = dict(vocab_multiple=1024, config={"hidden_size": 768, "intermediate_size": 2048, "num_hidden_layers": 6,
                                        "num_attention_heads": 12, "num_key_value_heads": 6, "head_dim": 64,
                                        "vocab_size": 32768})


def _config(folder, out, **extra):
    from hyper_parallel.trainer.config import load_config
    overrides = {"model.init_from": f"hf:{folder}", "job.out_dir": out, "data.source": "files", "data.paths": [SFT],
                 "data.format": "messages", "data.eval_fraction": 0.1, "training.global_batch": 4,
                 "metrics.progress": False, "metrics.plot": False, "metrics.jsonl": False, "parallelism.dp_shard": 2}
    overrides.update(extra)
    return load_config(None, list(overrides.items()))


def _patch_full_load():
    """The comparison path: every rank materialises the whole model and reads every tensor before FSDP."""
    import hyper_parallel.trainer._torch.finetune as ft
    from hyper_parallel.checkpoint import load_hf
    from hyper_parallel.trainer.models import model_spec
    meta_build = ft.build_from_hf

    def full_build(backend, vocab_size):
        meta_build(backend, vocab_size)  # sets backend.hf_config
        spec = model_spec(backend.config.model.name)
        model = spec.model_cls(backend.hf_config)
        load_hf(model, backend.config.model.init_from[3:], spec.state_dict_adapter(backend.hf_config))
        return model

    ft.build_from_hf = full_build
    ft.load_from_hf = lambda backend, parts: None


def worker(mode, folder, out) -> None:
    """One torchrun job: ``init_from`` / ``full`` (first step) or ``packed`` / ``unpacked`` (throughput)."""
    import torch.distributed as dist
    from hyper_parallel.trainer.api import LLMTrainer
    start = time.perf_counter()
    if mode == "full":
        _patch_full_load()
    if mode in ("init_from", "full"):
        cfg = _config(folder, out, **{"training.steps": 1, "training.seq_len": 128})
    else:
        cfg = _config(folder, out, **{"training.steps": 8, "training.seq_len": 256,
                                      "data.packing": mode == "packed"})
    trainer = LLMTrainer(cfg)
    trainer.setup()
    loaded = [None] * dist.get_world_size()  # the high-water mark once the weights are in place
    dist.all_gather_object(loaded, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    setup_s = time.perf_counter() - start
    history = trainer.train()
    first_step = time.perf_counter() - start
    mem = [None] * dist.get_world_size()
    dist.all_gather_object(mem, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    ds = trainer.dataset
    real = sum(sum(1 for d in ds.sequence(i)["doc_ids"] if d >= 0) for i in range(ds.num_train))
    per_row = real / ds.num_train
    timed = history[1:]  # the first step compiles nothing here, but pays first-touch costs
    tps = per_row * cfg.training.global_batch * len(timed) / sum(m["step_s"] for m in timed) if timed else 0.0
    if dist.get_rank() == 0:
        print("RESULT " + json.dumps({"mode": mode, "first_step_s": first_step, "peak_rss_mib": mem,
                                      "setup_s": setup_s, "loaded_rss_mib": loaded,
                                      "real_tokens_per_s": tps, "rows": ds.num_train,
                                      "fill": per_row / cfg.training.seq_len}), flush=True)
    trainer.close()


def _run(mode, folder, out):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", __file__,
           "--worker", mode, "--folder", folder, "--out", out]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=False)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"{mode}: no result (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")


def main() -> None:
    """Run the benchmark (or one worker job with --worker)."""
    p = argparse.ArgumentParser()
    p.add_argument("--worker")
    p.add_argument("--folder")
    p.add_argument("--out")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--json")
    args = p.parse_args()
    if args.worker:
        worker(args.worker, args.folder, args.out)
        return
    from hyper_parallel.testing.hf_models import make_tiny_model, sft_texts
    tmp = tempfile.mkdtemp(prefix="hp_bench_ft_")
    texts = list(sft_texts(SFT))
    big = make_tiny_model(os.path.join(tmp, "big"), texts, **BIG)
    tiny = make_tiny_model(os.path.join(tmp, "tiny"), texts)
    results = []
    for r in range(args.rounds):
        for mode, folder in (("init_from", big), ("full", big), ("packed", tiny), ("unpacked", tiny)):
            res = _run(mode, folder, os.path.join(tmp, f"{mode}{r}"))
            results.append(res)
            print(json.dumps(res), flush=True)
    _report(results, args.rounds, args.json)


def _report(results, rounds, json_path) -> None:
    """The summary lines (and the JSON file) of the interleaved rounds."""
    load = os.getloadavg()
    by = {m: [x for x in results if x["mode"] == m] for m in ("init_from", "full", "packed", "unpacked")}

    def best(mode, key, pick=min):
        return pick(x[key] for x in by[mode])
    print(f"\nload average {load[0]:.1f}; {rounds} interleaved rounds; 2 ranks FSDP (CPU, gloo)")
    for mode in ("init_from", "full"):
        print(f"{mode:>9}: setup {best(mode, 'setup_s'):.1f} s, first step done {best(mode, 'first_step_s'):.1f} s, "
              f"peak RSS per rank after loading "
              f"{[round(v) for v in min((x['loaded_rss_mib'] for x in by[mode]), key=max)]} MiB, after the first step "
              f"{[round(v) for v in min((x['peak_rss_mib'] for x in by[mode]), key=max)]} MiB")
    print(f"loaded RSS ratio full / init_from: {max(min((x['loaded_rss_mib'] for x in by['full']), key=max)) / max(min((x['loaded_rss_mib'] for x in by['init_from']), key=max)):.2f}x")  # noqa: E501  # pylint: disable=line-too-long
    for mode in ("packed", "unpacked"):
        print(f"{mode:>9}: {best(mode, 'real_tokens_per_s', max):,.0f} real tokens/s, {by[mode][0]['rows']} rows "
              f"({by[mode][0]['fill'] * 100:.0f}% of positions real)")
    print(f"packing speed-up (real tokens/s): {best('packed', 'real_tokens_per_s', max) / best('unpacked', 'real_tokens_per_s', max):.2f}x")  # noqa: E501  # pylint: disable=line-too-long
    if json_path:
        with open(json_path, "w", encoding="utf-8") as fh:
            json.dump({"results": results, "load": load}, fh, indent=1)


if __name__ == "__main__":
    main()
