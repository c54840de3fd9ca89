# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""How loss and expert balance move with the bias speed and the auxiliary-loss coefficient (not a timed benchmark).

Trains ``configs/demo.toml``'s model and data (debug_moe Llama, 4 experts top-2 in 2 MoE layers, global batch 8 x
128 tokens, 60 steps) on one process per setting — the global token counts are the same as on the demo's 2
ranks — and records each step's loss and per-layer expert loads. Settings run as parallel processes
(``--jobs``); ``--plot-only DIR`` redraws from the JSON results. Writes ``DIR/<setting>.json`` and the plot
(default ``docs/moe_balance.png``), prints a table: final loss (mean of the last 5 steps), worst max/mean and
lowest min/mean over steps 20..60.

    python benchmarks/moe_balance.py --out runs/moe_balance --jobs 4      # ~2 CPU-minutes per setting
    python benchmarks/moe_balance.py --model qwen3_moe:debug --settings flavor,sinkhorn --out runs/bal_qwen
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

#: name -> [moe] section overrides (``flavor`` = debug_moe's own: expert bias at the library default rate)
SETTINGS = {
    "bias 3e-2": {"load_balance": "expert_bias", "bias_update_rate": 3e-2},
    "bias 1e-1": {"load_balance": "expert_bias", "bias_update_rate": 1e-1},
    "bias 1e-2 + aux 1e-2": {"load_balance": "expert_bias+aux_loss", "bias_update_rate": 1e-2,
                             "aux_loss_coeff": 1e-2},
    "aux 1e-2": {"load_balance": "aux_loss", "aux_loss_coeff": 1e-2},
    "bias 1e-2": {"load_balance": "expert_bias", "bias_update_rate": 1e-2},
    "bias 1e-3 (old default)": {"load_balance": "expert_bias", "bias_update_rate": 1e-3},
    "none": {"load_balance": "none"},
    "sinkhorn": {"load_balance": "sinkhorn"},
    "aux 1e-1": {"load_balance": "aux_loss", "aux_loss_coeff": 1e-1},
    "aux 3e-2": {"load_balance": "aux_loss", "aux_loss_coeff": 3e-2},
    "bias 1e-2 + aux 1e-1": {"load_balance": "expert_bias+aux_loss", "bias_update_rate": 1e-2,
                             "aux_loss_coeff": 1e-1},
    "flavor": {"load_balance": "flavor"},  # the model flavor's own balancing (debug_moe: expert bias 1e-2)
}
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name).strip("_")


def run_one(name: str, out: str, steps: int, model: str = "") -> None:
    """Train one setting on this process (``model``: ``NAME:FLAVOR`` instead of the demo's); write
    ``out/<slug>.json``."""
    import io  # pylint: disable=import-outside-toplevel
    import torch  # pylint: disable=import-outside-toplevel
    from rich.console import Console  # pylint: disable=import-outside-toplevel
    from hyper_parallel.trainer.api import LLMTrainer  # pylint: disable=import-outside-toplevel
    from hyper_parallel.trainer.config import load_config  # pylint: disable=import-outside-toplevel
    torch.set_num_threads(1)
    overrides = [("checkpoint.enable", False), ("metrics.eval_every", 0), ("metrics.plot", False),
                 ("metrics.jsonl", False), ("metrics.progress", False), ("demo.resume_steps", 0),
                 ("demo.compare_steps", 0), ("demo.balance_from", 0), ("parallelism.ep", 1),
                 ("training.steps", steps), ("job.out_dir", os.path.join(out, "run_" + _slug(name)))]
    overrides += [(f"moe.{k}", v) for k, v in SETTINGS[name].items()]
    if model:
        overrides += [("model.name", model.split(":")[0]), ("model.flavor", model.split(":")[1])]
    cfg = load_config(os.path.join(ROOT, "configs", "demo.toml"), overrides)
    start = time.time()
    trainer = LLMTrainer(cfg, distributed=False, console=Console(file=io.StringIO()))
    trainer.setup()
    torch.set_num_threads(1)  # the settings run side by side: one thread each (2 threads on a busy machine crawl)
    hist = trainer.train(resume=False)
    rec = [{"step": m["step"], "loss": m["loss"],
            "moe": {k: {"load": v["load"], "mm": v["max_over_mean"]} for k, v in m.get("moe", {}).items()}}
           for m in hist]
    with open(os.path.join(out, _slug(name) + ".json"), "w", encoding="utf-8") as fh:
        json.dump({"name": name, "moe": SETTINGS[name], "hist": rec, "time": time.time() - start}, fh)


def summarize(rec: dict, start: int = 20) -> dict:
    """Final loss (mean of the last 5 steps), worst max/mean and lowest min/mean from ``start`` on."""
    late = [h for h in rec["hist"] if h["step"] >= start]
    ratios, lows = [], []
    for h in late:
        for layer in h["moe"].values():
            mean = sum(layer["load"]) / len(layer["load"])
            ratios.append(max(layer["load"]) / mean)
            lows.append(min(layer["load"]) / mean)
    last = [h["loss"] for h in rec["hist"][-5:]]
    return {"final_loss": sum(last) / len(last), "max_over_mean": max(ratios), "min_over_mean": min(lows)}


def plot(records: list, path: str) -> None:
    """Loss and worst-layer max/mean per step for every setting."""
    import matplotlib  # pylint: disable=import-outside-toplevel
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(14, 3.8))
    for rec in records:
        steps = [h["step"] for h in rec["hist"]]
        ax1.plot(steps, [h["loss"] for h in rec["hist"]], label=rec["name"])
        worst, low = [], []
        for h in rec["hist"]:
            loads = list(h["moe"].values())
            worst.append(max(max(v["load"]) * len(v["load"]) / sum(v["load"]) for v in loads))
            low.append(min(min(v["load"]) * len(v["load"]) / sum(v["load"]) for v in loads))
        ax2.plot(steps, worst, label=rec["name"])
        ax3.plot(steps, low, label=rec["name"])
    ax1.set_ylabel("train loss")
    ax2.set_ylabel("max/mean expert load (worst layer)")
    ax2.axhline(1.3, color="grey", ls="--", lw=0.8)
    ax3.set_ylabel("min/mean expert load (worst layer)")
    ax3.axhline(0.25, color="grey", ls="--", lw=0.8)
    for ax in (ax1, ax2, ax3):
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    ax1.legend(fontsize=7)
    fig.suptitle("debug_moe on the demo data: expert-bias speed and auxiliary-loss coefficient")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _run_all(args) -> None:
    """Every setting as its own process, ``args.jobs`` at a time."""
    pending, running = _chosen(args), []
    while pending or running:
        while pending and len(running) < args.jobs:
            name = pending.pop(0)
            running.append(subprocess.Popen([sys.executable, __file__, "--out", args.out, "--steps",  # noqa  # pylint: disable=R1732
                                             str(args.steps), "--only", name, "--model", args.model]))
        running[0].wait()
        running = [p for p in running if p.poll() is None]


def _chosen(args) -> list:
    names = [n.strip() for n in args.settings.split(",") if n.strip()] or list(SETTINGS)
    unknown = [n for n in names if n not in SETTINGS]
    if unknown:
        raise SystemExit(f"--settings: unknown {unknown}; expected names from {list(SETTINGS)}")
    return names


def main() -> None:
    """Run the settings (or one with ``--only``), then print the table and draw the plot."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", default="runs/moe_balance")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--only", default="", help="run one setting (internal: the worker processes)")
    parser.add_argument("--model", default="", help="NAME:FLAVOR instead of the demo's llama3:debug_moe")
    parser.add_argument("--settings", default="", help="comma-separated setting names (default: all)")
    parser.add_argument("--plot-only", action="store_true", help="redraw from the JSON results in --out")
    parser.add_argument("--plot", default=os.path.join(ROOT, "docs", "moe_balance.png"))
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if args.only:
        run_one(args.only, args.out, args.steps, args.model)
        return
    if not args.plot_only:
        _run_all(args)
    records = []
    for name in _chosen(args):
        path = os.path.join(args.out, _slug(name) + ".json")
        if os.path.exists(path):
            with open(path, encoding="utf-8") as fh:
                records.append(json.load(fh))
    print(f"{'setting':28s} {'final loss':>10s} {'max/mean':>9s} {'min/mean':>9s}   (steps 20..end, worst layer)")
    for rec in records:
        s = summarize(rec)
        print(f"{rec['name']:28s} {s['final_loss']:10.4f} {s['max_over_mean']:9.3f} {s['min_over_mean']:9.3f}")
    if records:
        plot(records, args.plot)
        print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
