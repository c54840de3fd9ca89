# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``LLMTrainer``: one config drives one run — the loop, data, callbacks, checkpoint/resume, fault injection.

The framework work (process group, meshes, model, parallelisation, optimizer, one train step) is done by a
*trainer backend* chosen by ``[job] backend``: ``"torch"`` is ``hyper_parallel.trainer._torch.backend``;
another backend registers itself with :func:`register_backend` (a factory ``f(trainer) -> backend``; the
object implements the methods of :class:`TrainerBackend`). The loop itself is backend-free.
"""
from __future__ import annotations

import copy
import importlib
import os
import shutil
import signal
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

from hyper_parallel.trainer.callbacks import (Callback, CheckpointCallback, EvalCallback, LoggingCallback,
                                              MoeMonitorCallback, ProfilerCallback)
from hyper_parallel.trainer.config import JobConfig, config_to_dict, micro_batches
from hyper_parallel.trainer.data import DistributedBatchLoader, prepare_dataset
from hyper_parallel.trainer.mfu import mfu

__all__ = ["LLMTrainer", "TrainerBackend", "register_backend", "get_backend_factory", "TrainState"]

_BACKENDS: Dict[str, Any] = {"torch": "hyper_parallel.trainer._torch.backend:TorchTrainerBackend"}


class TrainerBackend:
    """What a trainer backend implements (documentation class; backends need not inherit from it).

    ``setup(dataset)`` (process group, ``ParallelDims`` meshes, model sized to ``dataset.vocab_size``,
    parallelisation, optimizer, scheduler), ``train_step(rows) -> dict`` (``loss``, ``grad_norm``, ``lr``,
    ``compute_s``: the seconds inside forward/backward/optimizer; optional ``collectives``: the count of
    collectives the step issued on this rank), ``eval_loss(rows) -> float``,
    ``checkpoint_states() -> dict`` (the ``Stateful`` s of model, optimizer, scheduler, RNG), ``barrier()``,
    ``rank``, ``world_size``, ``dp_rank``, ``dp_size``, ``flops_per_token``, ``peak_flops``,
    ``peak_memory_mib()``, ``moe_stats() -> dict``, ``start_profiler()``, ``stop_profiler(p, path)``,
    ``shutdown(failed=False)`` (``failed``: leaving on an exception, no closing barrier).
    """

    name = "abstract"


def register_backend(name: str, factory: "str | Callable[[Any], Any]") -> None:
    """Register a trainer backend: ``factory`` is ``f(trainer)`` or ``"module:ClassName"``."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"register_backend(name): expected a non-empty string, got {name!r}")
    _BACKENDS[name] = factory


register_backend("mindspore", "hyper_parallel.trainer._mindspore.backend:MindSporeTrainerBackend")


def get_backend_factory(name: str) -> Callable[[Any], Any]:
    """The factory registered for ``name`` (``[job] backend``)."""
    factory = _BACKENDS.get(name)
    if factory is None:
        raise ValueError(f"job.backend: no trainer backend {name!r}; registered: {sorted(_BACKENDS)}")
    if isinstance(factory, str):
        module, _, cls = factory.partition(":")
        factory = getattr(importlib.import_module(module), cls)
    return factory


class TrainState:
    """The loop's own state in the checkpoint (the step and the loss history)."""

    def __init__(self, trainer: "LLMTrainer") -> None:
        self.trainer = trainer

    def state_dict(self) -> Dict[str, Any]:
        """``{"step": n, "schedule_steps": the LR schedule's length}``."""
        return {"step": self.trainer.step, "schedule_steps": self.trainer.schedule_steps}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Restore the step; keep the checkpoint's schedule length for the resume banner."""
        self.trainer.step = int(state["step"])
        self.trainer.saved_schedule_steps = state.get("schedule_steps")


class LLMTrainer:
    """Train a causal language model as ``config`` says.

    Args:
        config: a :class:`hyper_parallel.trainer.config.JobConfig` (``load_config(path)``).
        callbacks: extra :class:`Callback` s (run before the built-in logging callback).
        distributed: False trains on this process alone (no process group; every degree must be 1).
        console: a ``rich.console.Console`` for output (default: stdout).

    ``train()`` runs steps ``step+1 .. training.steps`` and returns the per-step metrics of this run.
    """

    def __init__(self, config: JobConfig, callbacks: Sequence[Callback] = (), *, distributed: bool = True,
                 console: Any = None) -> None:
        from rich.console import Console  # pylint: disable=import-outside-toplevel
        self.config = config
        self.distributed = distributed
        self.console = console or Console(highlight=False)
        if not self.console.is_terminal:
            self.console.width = max(self.console.width, 120)
        self.step = 0
        self.history: List[Dict[str, Any]] = []
        self.backend = get_backend_factory(config.job.backend)(self)
        self.dataset = None
        self.loader: Optional[DistributedBatchLoader] = None
        self.eval_loader: Optional[DistributedBatchLoader] = None
        self.checkpointer = None
        self.user_callbacks = list(callbacks)
        self.callbacks: List[Callback] = []
        self.total_steps = config.training.steps
        self.schedule_steps = int(config.optimizer.get("total_steps", config.training.steps))
        self.saved_schedule_steps: Optional[int] = None
        self._ready = False

    # ------------------------------------------------------------------ identity
    @property
    def rank(self) -> int:
        """This process's global rank."""
        return self.backend.rank

    @property
    def is_logging_rank(self) -> bool:
        """Rank 0 logs, plots and writes the metrics file."""
        return self.backend.rank == 0

    def log(self, message: str) -> None:
        """Print ``message`` on the logging rank."""
        if self.is_logging_rank:
            self.console.print(message)

    # ------------------------------------------------------------------ setup
    def _load_data(self) -> None:
        from hyper_parallel.trainer.finetune import prepare_sft, tokenizer_spec  # noqa  # pylint: disable=C0415
        d, t = self.config.data, self.config.training
        if d.format != "stream":  # SFT records (hyper_parallel.trainer.sft): every rank reads them
            self.dataset = prepare_sft(self.config)
            return
        kwargs = dict(text_key=d.text_key, tokenizer=tokenizer_spec(self.config), vocab_size=d.vocab_size,
                      max_corpus_mb=d.max_corpus_mb, cache_dir=d.cache_dir, seq_len=t.seq_len,
                      eval_fraction=d.eval_fraction)
        if self.backend.rank == 0:  # trains and caches the tokenizer once
            self.dataset = prepare_dataset(d.source, d.paths, **kwargs)
        self.backend.barrier()
        if self.backend.rank != 0:
            self.dataset = prepare_dataset(d.source, d.paths, **kwargs)

    def setup(self) -> None:
        """Start the backend, load the data, build model/optimizer, callbacks and the checkpoint manager;
        resume from the latest checkpoint when ``checkpoint.resume``."""
        if self._ready:
            return
        cfg = self.config
        self.backend.init_distributed()
        self._load_data()
        self.backend.setup(self.dataset)
        t = cfg.training  # its split over the data-parallel ranks: checked by the backend (check_global_batch)
        self.loader = DistributedBatchLoader(self.dataset, t.global_batch, dp_rank=self.backend.dp_rank,
                                             dp_size=self.backend.dp_size, seed=cfg.job.seed,
                                             micro_batches=micro_batches(cfg, self._pp_degree()))
        self.eval_loader = DistributedBatchLoader(self.dataset, t.global_batch, dp_rank=self.backend.dp_rank,
                                                  dp_size=self.backend.dp_size, seed=cfg.job.seed, split="eval")
        self.callbacks = list(self.user_callbacks)
        if cfg.checkpoint.enable:
            from hyper_parallel.checkpoint import CheckpointManager  # pylint: disable=import-outside-toplevel
            self._fresh_folder()
            states = dict(self.backend.checkpoint_states(), data=self.loader, trainer=TrainState(self))
            self.checkpointer = CheckpointManager(cfg.checkpoint_folder, interval=cfg.checkpoint.interval,
                                                  keep_latest_k=cfg.checkpoint.keep_latest_k,
                                                  async_mode=cfg.checkpoint.async_mode, states=states,
                                                  backend=cfg.job.backend)
            self.callbacks.append(CheckpointCallback(self.checkpointer))
        m = cfg.metrics
        if m.eval_every:
            self.callbacks.append(EvalCallback(m.eval_every, m.eval_batches))
        if m.moe_monitor and self.backend.moe_stats():
            self.callbacks.append(MoeMonitorCallback(cfg.moe.warn_min_load, cfg.moe.warn_max_over_mean,
                                                     cfg.moe.warn_steps, out_dir=cfg.job.out_dir if m.plot else None))
        if m.profile_steps:
            self.callbacks.append(ProfilerCallback(m.profile_steps, cfg.job.out_dir))
        if m.wandb:
            from hyper_parallel.trainer.loggers import WandbCallback  # pylint: disable=import-outside-toplevel
            self.callbacks.append(WandbCallback(cfg.job.out_dir, m.wandb, m.wandb_project, config_to_dict(cfg)))
        self.callbacks.append(LoggingCallback(cfg.job.out_dir, log_every=m.log_every, progress=m.progress,
                                              jsonl=m.jsonl, plot=m.plot, tensorboard=m.tensorboard,
                                              title=f"{cfg.job.name}: {cfg.model.name}/{cfg.model.flavor}"))
        self._ready = True

    def _pp_degree(self) -> int:
        """The backend's pipeline degree (``parallelism.pp`` resolved), or the config's."""
        dims = getattr(self.backend, "dims", None)
        return int(getattr(dims, "pp", None) or self.config.parallelism.pp)

    def _fresh_folder(self) -> None:
        """A run that does not resume must not mix with an earlier run's checkpoints (retention and ``latest``
        would pick theirs): refuse, or delete them with ``checkpoint.overwrite``."""
        cfg = self.config
        folder = cfg.checkpoint_folder
        if cfg.checkpoint.resume or not os.path.isdir(folder):
            return
        old = sorted(n for n in os.listdir(folder) if n.startswith("step-") or n == "latest")
        if not old:
            return
        if not cfg.checkpoint.overwrite:
            raise ValueError(f"checkpoint.folder {folder} holds checkpoints of an earlier run ({', '.join(old[:3])}"
                             f"...) and checkpoint.resume is false: set checkpoint.resume = true to continue it, or "
                             f"checkpoint.overwrite = true to delete them")
        self.backend.barrier()
        if self.backend.rank == 0:
            self.log(f"checkpoint.overwrite: deleting {len(old)} entries of an earlier run in {folder}")
            for name in old:
                path = os.path.join(folder, name)
                if os.path.isdir(path):
                    shutil.rmtree(path)
                else:
                    os.remove(path)
        self.backend.barrier()

    def resume(self, step: Optional[int] = None) -> Optional[int]:
        """Load the checkpoint of ``step`` (default: the latest); returns the step loaded or None."""
        if self.checkpointer is None:
            raise ValueError("LLMTrainer.resume: checkpoint.enable is false")
        target = step if step is not None else self.checkpointer.latest_step()
        if target is not None:
            from hyper_parallel.trainer.finetune import check_resumable  # pylint: disable=import-outside-toplevel
            check_resumable(self.checkpointer.checkpoint_path(target), list(self.checkpointer.states))
        loaded = self.checkpointer.load(step=step)
        for bad, why in self.checkpointer.skipped:
            self.log(f"[yellow]warning[/yellow]: checkpoint of step {bad} is damaged, skipped: {why}")
        if loaded is not None:
            from hyper_parallel.trainer.finetune import schedule_note  # pylint: disable=import-outside-toplevel
            self.step = loaded
            self.log(f"resumed from {self.checkpointer.checkpoint_path(loaded)} (step {loaded}); "
                     f"{schedule_note(self.saved_schedule_steps, self.schedule_steps, loaded)}")
        return loaded

    # ------------------------------------------------------------------ loop
    def _fault(self, step: int) -> None:
        f = self.config.fault
        if (f.kill_at_step and step == f.kill_at_step and self.rank == f.kill_rank
                and os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0" and self.distributed):
            if self.checkpointer is not None:
                self.checkpointer.wait()
            self.console.print(f"[fault] rank {self.rank}: killing myself after step {step} (fault.kill_at_step)")
            os.kill(os.getpid(), signal.SIGKILL)

    def _metrics(self, step: int, out: Dict[str, Any], wall: float) -> Dict[str, Any]:
        t = self.config.training
        tokens = t.global_batch * t.seq_len
        tps = tokens / wall
        metrics = {"step": step, "loss": out["loss"], "lr": out.get("lr", 0.0), "grad_norm": out.get("grad_norm", 0.0),
                   "tokens": tokens, "step_s": wall, "tokens_per_s": tps,
                   "overhead_s": max(0.0, wall - out.get("compute_s", wall)),
                   "mfu": mfu(self.backend.flops_per_token, tokens, wall, max(1, self.backend.world_size),
                              self.backend.peak_flops),
                   "peak_mem_mib": self.backend.peak_memory_mib()}
        if "collectives" in out:  # torch.distributed calls this rank issued in the step (torch backend)
            metrics["collectives"] = out["collectives"]
            metrics["collectives_by_op"] = out.get("collectives_by_op", {})
        return metrics

    def train_step(self, step: int) -> Dict[str, Any]:
        """Run step ``step`` (1-based) on the next global batch; returns its metrics."""
        for cb in self.callbacks:
            cb.on_step_begin(self, step)
        start = time.perf_counter()
        rows = self.loader.next_batch()
        out = self.backend.train_step(rows)
        metrics = self._metrics(step, out, time.perf_counter() - start)
        self.step = step
        for cb in self.callbacks:
            cb.on_step_end(self, step, metrics)
        return metrics

    def evaluate(self, batches: int) -> float:
        """Mean held-out loss over ``batches`` evaluation batches (always the same ones)."""
        self.eval_loader.reset()
        losses = [self.backend.eval_loss(self.eval_loader.next_batch()) for _ in range(batches)]
        return sum(losses) / len(losses)

    def train(self, resume: Optional[bool] = None, resume_step: Optional[int] = None) -> List[Dict[str, Any]]:
        """Train to ``training.steps`` (resuming first when ``checkpoint.resume``); returns this run's metrics."""
        self.setup()
        if self.checkpointer is not None and (self.config.checkpoint.resume if resume is None else resume):
            self.resume(resume_step or self.config.checkpoint.load_step or None)
        run: List[Dict[str, Any]] = []
        for cb in self.callbacks:
            cb.on_train_begin(self)
        try:
            for step in range(self.step + 1, self.total_steps + 1):
                run.append(self.train_step(step))
                self._fault(step)
        finally:
            for cb in reversed(self.callbacks):  # the logging callback (last) closes the progress bar first
                cb.on_train_end(self)
        self.history.extend(run)
        if self.config.checkpoint.export_hf:
            self.export_hf()
        return run

    def export_hf(self, folder: Optional[str] = None) -> str:
        """Write the model as a Hugging Face folder (default ``[checkpoint] export_folder`` / ``<out_dir>/hf``):
        weights, ``config.json`` of the trained model, ``generation_config.json``, tokenizer files."""
        from hyper_parallel.trainer.finetune import export_folder  # pylint: disable=import-outside-toplevel
        folder = folder or export_folder(self.config)
        self.backend.export_hf(folder)
        self.log(f"exported the model as a Hugging Face folder: {folder}")
        return folder

    def close(self, failed: bool = False) -> None:
        """Release the backend (process group). ``failed=True`` (this rank is leaving on an exception): no closing
        barrier, which the other ranks may never reach — the launcher then ends them and the error is seen,
        instead of every rank hanging."""
        if self.checkpointer is not None and not failed:
            self.checkpointer.wait()
        self.backend.shutdown(failed=failed)

    def summary(self) -> Dict[str, Any]:
        """The run's configuration as plain data, for reports."""
        return config_to_dict(self.config)


def derived_config(config: JobConfig, **sections: Dict[str, Any]) -> JobConfig:
    """A copy of ``config`` with some fields replaced: ``derived_config(cfg, training={"steps": 5})``."""
    out = copy.deepcopy(config)
    out.optimizer.setdefault("total_steps", config.training.steps)  # the same LR schedule as the parent run
    for name, values in sections.items():
        block = getattr(out, name)
        for key, value in values.items():
            setattr(block, key, value)
    return out
