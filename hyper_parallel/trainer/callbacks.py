# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Trainer callbacks: the :class:`Callback` protocol and the built-in logging, checkpoint, evaluation, MoE
monitor and profiler callbacks. Each hook gets the trainer; ``metrics`` is the step's dict (callbacks may add
keys: the logging callback, registered last, writes what the others added)."""
from __future__ import annotations

import json
import os
import time
from typing import Any, Dict, List, Optional, Sequence

__all__ = ["Callback", "LoggingCallback", "CheckpointCallback", "EvalCallback", "MoeMonitorCallback",
           "ProfilerCallback", "write_plot", "write_moe_plot"]


class Callback:
    """Base class of trainer callbacks (every hook is optional; the defaults do nothing)."""

    def on_train_begin(self, trainer: Any) -> None:
        """Before the first step (after a resume, ``trainer.step`` is the step loaded)."""

    def on_step_begin(self, trainer: Any, step: int) -> None:
        """Before step ``step`` (1-based) runs."""

    def on_step_end(self, trainer: Any, step: int, metrics: Dict[str, Any]) -> None:
        """After step ``step``; ``metrics`` holds loss, lr, grad_norm, tokens/s, ... (add keys to log them)."""

    def on_eval(self, trainer: Any, step: int, metrics: Dict[str, Any]) -> None:
        """After an evaluation at ``step`` (``metrics["eval_loss"]``)."""

    def on_save(self, trainer: Any, step: int, path: str) -> None:
        """After the checkpoint of ``step`` was written (async: handed to the background writer) at ``path``."""

    def on_train_end(self, trainer: Any) -> None:
        """After the last step (also on a demo's resume phase)."""


def write_plot(records: Sequence[Dict[str, Any]], path: str, title: str = "") -> str:
    """Loss (and eval loss) and tokens/s per step as a PNG at ``path``; returns ``path``."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
    steps = [r["step"] for r in records if "loss" in r]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    ax1.plot(steps, [r["loss"] for r in records if "loss" in r], label="train loss")
    evals = [(r["step"], r["eval_loss"]) for r in records if "eval_loss" in r]
    if evals:
        ax1.plot(*zip(*evals), "o-", label="eval loss")
    ax1.set_xlabel("step")
    ax1.set_ylabel("loss")
    ax1.legend()
    ax1.grid(alpha=0.3)
    ax2.plot(steps, [r.get("tokens_per_s", 0.0) for r in records if "loss" in r], color="tab:green")
    ax2.set_xlabel("step")
    ax2.set_ylabel("tokens/s")
    ax2.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


class LoggingCallback(Callback):
    """Rank 0: a rich progress bar (step, loss, tokens/s, estimated MFU, peak memory), ``metrics.jsonl``,
    TensorBoard scalars when ``tensorboard`` is installed and asked for, and ``loss.png`` at the end."""

    def __init__(self, out_dir: str, *, log_every: int = 1, progress: bool = True, jsonl: bool = True,
                 plot: bool = True, tensorboard: bool = False, title: str = "") -> None:
        self.out_dir = out_dir
        self.log_every = log_every
        self.progress = progress
        self.jsonl = jsonl
        self.plot = plot
        self.tensorboard = tensorboard
        self.title = title
        self.records: List[Dict[str, Any]] = []
        self.metrics_path = os.path.join(out_dir, "metrics.jsonl")
        self.plot_path = os.path.join(out_dir, "loss.png")
        self._bar = None
        self._task = None
        self._tb = None
        self._fh = None

    def on_train_begin(self, trainer: Any) -> None:
        if not trainer.is_logging_rank:
            return
        os.makedirs(self.out_dir, exist_ok=True)
        if self.jsonl:
            self._fh = open(self.metrics_path, "a", encoding="utf-8")  # pylint: disable=consider-using-with
        if self.tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter  # pylint: disable=import-outside-toplevel
                self._tb = SummaryWriter(os.path.join(self.out_dir, "tb"))
            except ImportError:
                trainer.log("metrics.tensorboard: tensorboard is not installed; skipping TensorBoard scalars")
        if self.progress:
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,  # noqa
                                       TimeElapsedColumn)
            self._bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[info]}"), TimeElapsedColumn(),
                                 console=trainer.console, transient=False)
            self._bar.start()
            self._task = self._bar.add_task(self.title or "train", total=trainer.total_steps,
                                            completed=trainer.step, info="")

    def on_step_end(self, trainer: Any, step: int, metrics: Dict[str, Any]) -> None:
        if not trainer.is_logging_rank:
            return
        record = {k: v for k, v in metrics.items() if isinstance(v, (int, float, str, list, dict))}
        self.records.append(record)
        if self._fh is not None:
            self._fh.write(json.dumps(record) + "\n")
            self._fh.flush()
        if self._tb is not None:
            for k, v in record.items():
                if isinstance(v, (int, float)):
                    self._tb.add_scalar(k, v, step)
        if step % self.log_every and step != trainer.total_steps:
            return
        info = (f"loss {metrics['loss']:.4f}  {metrics['tokens_per_s']:,.0f} tok/s  mfu {metrics['mfu'] * 100:.1f}%  "
                f"mem {metrics['peak_mem_mib']:.0f} MiB")
        if self._bar is not None:
            self._bar.update(self._task, completed=step, info=info)
        else:
            trainer.log(f"step {step}/{trainer.total_steps}  {info}")

    def on_eval(self, trainer: Any, step: int, metrics: Dict[str, Any]) -> None:
        if trainer.is_logging_rank and self._bar is None:
            trainer.log(f"step {step}: eval loss {metrics['eval_loss']:.4f}")

    def on_train_end(self, trainer: Any) -> None:
        if not trainer.is_logging_rank:
            return
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        if self._tb is not None:
            self._tb.close()
        if self.plot and self.records:
            write_plot(self.records, self.plot_path, self.title)
            trainer.log(f"metrics: {self.metrics_path}   plot: {self.plot_path}")


class CheckpointCallback(Callback):
    """Saves through a ``hyper_parallel.checkpoint.CheckpointManager`` when due (its ``interval``, and the
    last step); waits for the pending async save at the end."""

    def __init__(self, manager: Any, save_last: bool = True) -> None:
        self.manager = manager
        self.save_last = save_last

    def on_step_end(self, trainer: Any, step: int, metrics: Dict[str, Any]) -> None:
        last = self.save_last and step == trainer.total_steps
        if self.manager.save(step, last_step=last):
            metrics["checkpoint"] = self.manager.checkpoint_path(step)
            for cb in trainer.callbacks:
                cb.on_save(trainer, step, self.manager.checkpoint_path(step))

    def on_train_end(self, trainer: Any) -> None:
        self.manager.wait()


class EvalCallback(Callback):
    """Held-out loss over ``batches`` evaluation batches every ``every`` steps (and at the last step)."""

    def __init__(self, every: int, batches: int = 2) -> None:
        self.every = every
        self.batches = batches

    def on_step_end(self, trainer: Any, step: int, metrics: Dict[str, Any]) -> None:
        if step % self.every and step != trainer.total_steps:
            return
        metrics["eval_loss"] = trainer.evaluate(self.batches)
        for cb in trainer.callbacks:
            cb.on_eval(trainer, step, metrics)


class MoeMonitorCallback(Callback):
    """Watches the expert load of every MoE layer.

    Per step: each layer's global load per expert, max/mean, min/mean and expert-bias norm go into the
    metrics (``metrics["moe"][layer]``, plus ``moe_max_over_mean`` / ``moe_min_over_mean``: the worst layer's).
    It warns once per layer and kind, in one line naming the layer and the expert, when an expert's load
    stays below ``min_load`` x the mean for ``steps`` consecutive steps ("starved") or the layer's max/mean
    stays above ``max_over_mean`` for ``steps`` steps ("overloaded"); the warnings are kept in
    ``self.warnings`` and logged with ``metrics["moe_warning"]``. At the end: a table of the last step and
    ``moe_load.png`` (max/mean and min/mean per layer over the steps) in ``out_dir`` when given.
    """

    def __init__(self, min_load: float = 0.25, max_over_mean: float = 1.5, steps: int = 5,
                 out_dir: Optional[str] = None) -> None:
        if not 0 < min_load < 1 or max_over_mean < 1 or steps < 1:
            raise ValueError(f"MoeMonitorCallback: expected 0 < min_load < 1, max_over_mean >= 1, steps >= 1; got "
                             f"min_load={min_load}, max_over_mean={max_over_mean}, steps={steps}")
        self.min_load, self.max_over_mean, self.steps, self.out_dir = min_load, max_over_mean, steps, out_dir
        self.last: Dict[str, Any] = {}
        self.first: Optional[float] = None
        self.history: List[Dict[str, Any]] = []
        self.warnings: List[str] = []
        self._low: Dict[tuple, int] = {}
        self._high: Dict[str, int] = {}
        self._warned: set = set()

    def _check(self, step: int, name: str, layer: Dict[str, Any]) -> List[str]:
        load = layer["load"]
        mean = sum(load) / max(1, len(load))
        out = []
        for e, c in enumerate(load):
            key = (name, e)
            self._low[key] = self._low.get(key, 0) + 1 if mean and c < self.min_load * mean else 0
            if self._low[key] >= self.steps and (name, "low") not in self._warned:
                self._warned.add((name, "low"))
                out.append(f"MoE monitor: step {step}: layer {name} expert {e} starved: load below "
                           f"{self.min_load:g} x mean for {self.steps} steps (now {c} vs mean {mean:.0f})")
        ratio = layer["max_over_mean"]
        self._high[name] = self._high.get(name, 0) + 1 if ratio > self.max_over_mean else 0
        if self._high[name] >= self.steps and (name, "high") not in self._warned:
            self._warned.add((name, "high"))
            busiest = max(range(len(load)), key=load.__getitem__)
            out.append(f"MoE monitor: step {step}: layer {name} expert {busiest} overloaded: max/mean above "
                       f"{self.max_over_mean:g} for {self.steps} steps (now {ratio:.2f})")
        return out

    def on_step_end(self, trainer: Any, step: int, metrics: Dict[str, Any]) -> None:
        layers = trainer.backend.moe_stats()
        if not layers:
            return
        for layer in layers.values():
            mean = sum(layer["load"]) / max(1, len(layer["load"]))
            layer["min_over_mean"] = min(layer["load"]) / mean if mean else 0.0
        metrics["moe"] = layers
        worst = max(layer["max_over_mean"] for layer in layers.values())
        metrics["moe_max_over_mean"] = worst
        metrics["moe_min_over_mean"] = min(layer["min_over_mean"] for layer in layers.values())
        if self.first is None:
            self.first = worst
        self.last = layers
        self.history.append({"step": step, **{n: (v["max_over_mean"], v["min_over_mean"]) for n, v in layers.items()}})
        new = [w for name, layer in layers.items() for w in self._check(step, name, layer)]
        if new:
            metrics["moe_warning"] = new
            self.warnings.extend(new)
            for line in new:
                trainer.log(f"[yellow]{line}[/yellow]")

    def on_train_end(self, trainer: Any) -> None:
        if not (self.last and trainer.is_logging_rank):
            return
        from rich.table import Table  # pylint: disable=import-outside-toplevel
        table = Table(title="MoE expert load (last step)")
        for col in ("layer", "tokens per expert", "max/mean", "min/mean", "bias norm"):
            table.add_column(col)
        for name, layer in self.last.items():
            table.add_row(name, " ".join(str(c) for c in layer["load"]), f"{layer['max_over_mean']:.2f}",
                          f"{layer['min_over_mean']:.2f}", f"{layer['bias_norm']:.4f}")
        trainer.console.print(table)
        if self.out_dir and self.history:
            os.makedirs(self.out_dir, exist_ok=True)
            path = write_moe_plot(self.history, os.path.join(self.out_dir, "moe_load.png"))
            trainer.log(f"MoE load plot: {path}")


def write_moe_plot(history: Sequence[Dict[str, Any]], path: str) -> str:
    """max/mean and min/mean expert load per MoE layer over the steps (``history``: one dict per step,
    ``{"step": n, layer: (max_over_mean, min_over_mean), ...}``) as a PNG at ``path``; returns ``path``."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
    steps = [h["step"] for h in history]
    names = [k for k in history[0] if k != "step"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    for name in names:
        ax1.plot(steps, [h[name][0] for h in history], label=name)
        ax2.plot(steps, [h[name][1] for h in history], label=name)
    ax1.set_ylabel("max / mean expert load")
    ax2.set_ylabel("min / mean expert load")
    for ax in (ax1, ax2):
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


class ProfilerCallback(Callback):
    """A torch profiler trace (Chrome JSON) of the chosen steps, written to ``<out_dir>/profile/``."""

    def __init__(self, steps: Sequence[int], out_dir: str) -> None:
        self.steps = sorted(set(int(s) for s in steps))
        self.out_dir = os.path.join(out_dir, "profile")
        self._prof = None
        self.paths: List[str] = []

    def on_step_begin(self, trainer: Any, step: int) -> None:
        if step in self.steps and self._prof is None:
            self._prof = trainer.backend.start_profiler()

    def on_step_end(self, trainer: Any, step: int, metrics: Dict[str, Any]) -> None:
        if self._prof is None or (step + 1 in self.steps and step != trainer.total_steps):
            return
        os.makedirs(self.out_dir, exist_ok=True)
        path = os.path.join(self.out_dir, f"trace-rank{trainer.rank}-step{step}-{int(time.time())}.json")
        trainer.backend.stop_profiler(self._prof, path)
        self._prof = None
        self.paths.append(path)
        metrics["profile_trace"] = path
