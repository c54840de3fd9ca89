# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The MindSpore trainer backend: the mccl process group, the ``(dp_shard, tp)`` mesh, the MindSpore model
(``get_model_spec(name, backend="mindspore")``: Llama 3 with its TP + sequence-parallel + FSDP plan; Qwen3,
Qwen3-MoE and DeepSeek-V3 with FSDP / HSDP; MoE layers balanced by the auxiliary loss or the expert bias), the
MindSpore AdamW/Muon and LR schedule of ``hyper_parallel.optim`` (same factories and formulas as torch),
clipping by the global norm of the sharded gradients, gradient accumulation, and checkpoints through
``hyper_parallel.checkpoint`` 's MindSpore save/load. Mirrors ``hyper_parallel.trainer._torch.backend``.

Initial weights: when torch is importable the model starts from the torch model's weights for the same
seed (``torch.manual_seed(job.seed)`` then the torch constructor, as the torch backend builds it), so a
MindSpore run and a torch run of one config start from the same point; else (torch not installed, or hidden)
from the MindSpore model's own init, equal to torch's ``hyper_parallel.models.init_parameters(model, seed)``
and layout-independent. Either way every rank builds the full weights before sharding.
"""
from __future__ import annotations

import os
import resource
import time
import warnings
from typing import Any, Dict, List

import mindspore as ms
import numpy as np

from hyper_parallel.trainer._mindspore.launch import check_mindspore_config
from hyper_parallel.trainer.models import build_model_config
from hyper_parallel.models.parallel_dims import ParallelDims

__all__ = ["MindSporeTrainerBackend", "torch_initial_weights"]


def torch_initial_weights(name: str, mcfg: Any, seed: int) -> Any:
    """``{name: ndarray}`` of the torch model's initial weights for ``seed`` (what the torch backend starts
    from), or None when torch is not installed."""
    try:
        import torch  # pylint: disable=import-outside-toplevel
    except ImportError:
        return None
    from hyper_parallel.models import get_model_spec  # pylint: disable=import-outside-toplevel
    torch.manual_seed(seed)
    model = get_model_spec(name).model_cls(mcfg)
    return {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}


def _flops_per_token(cfg: Any, n_params: int, seq_len: int) -> float:
    """6 N + 12 L H S (the torch backend's estimate)."""
    return 6.0 * n_params + 12.0 * cfg.num_hidden_layers * cfg.hidden_size * seq_len


class MindSporeTrainerBackend:  # pylint: disable=too-many-instance-attributes
    """See :class:`hyper_parallel.trainer.api.TrainerBackend`; ``[job] backend = "mindspore"``."""

    name = "mindspore"

    def __init__(self, trainer: Any) -> None:
        check_mindspore_config(trainer.config)
        if trainer.distributed and "MS_ROLE" not in os.environ:  # no MindSpore cluster around this process
            if trainer.config.job.nproc != 1:
                raise ValueError(f"job.nproc = {trainer.config.job.nproc}: a MindSpore run on several ranks starts "
                                 "under hp-train (which launches the cluster) or msrun")
            trainer.distributed = False  # job.nproc = 1: this process alone, no process group
        self.trainer = trainer
        self.config = trainer.config
        self.rank = 0
        self.world_size = 1
        self.dims: Any = None
        self.mesh: Any = None
        self.model: Any = None
        self.optimizer: Any = None
        self.scheduler: Any = None
        self.dp_rank = 0
        self.dp_size = 1
        self.flops_per_token = 0.0
        self.peak_flops = 0.0
        from hyper_parallel.trainer.config import intra_op_threads  # pylint: disable=import-outside-toplevel
        ranks_here = 1 if "MS_ROLE" not in os.environ else int(os.environ.get("MS_WORKER_NUM", "1"))
        self.threads = intra_op_threads(self.config.job.threads, os.environ, os.cpu_count(), ranks_here)
        self._plat: Any = None
        self._world_group: Any = None
        self._specs: Dict[str, Any] = {}
        self._grad_fn: Any = None

    # ------------------------------------------------------------------ process group / meshes
    def init_distributed(self) -> None:
        """Join the mccl process group started by the launcher; the world mesh of the config's degrees."""
        par = self.config.parallelism
        from hyper_parallel.platform.mindspore.runtime import configure  # pylint: disable=import-outside-toplevel
        configure(threads=self.threads)  # synchronous launch, one dispatch thread, self.threads kernel threads
        ms.set_context(mode=ms.PYNATIVE_MODE)
        ms.set_device("CPU")
        if self.trainer.distributed:
            import hyper_parallel as hp  # pylint: disable=import-outside-toplevel
            from hyper_parallel.platform import get_platform  # pylint: disable=import-outside-toplevel
            self._plat = get_platform("mindspore")
            if not self._plat.is_initialized():
                hp.init_process_group(platform="mindspore")
            self.rank, self.world_size = self._plat.get_rank(), self._plat.get_world_size()
            self._world_group = self._plat.new_group(range(self.world_size))
        self.dims = ParallelDims(dp_replicate=par.dp_replicate, dp_shard=par.dp_shard, cp=par.cp, tp=par.tp,
                                 pp=par.pp, ep=par.ep, world_size=self.world_size)
        if self.trainer.distributed:
            self.mesh = self.dims.build_mesh("cpu", platform="mindspore")
            self.dp_rank, self.dp_size = self.dims.dp_rank(self.rank), self.dims.dp

    def barrier(self) -> None:
        """All ranks meet."""
        if self.trainer.distributed:
            self._plat.barrier()

    # ------------------------------------------------------------------ model / optimizer
    def _build_model(self, vocab_size: int) -> Any:
        from hyper_parallel.models import get_model_spec  # pylint: disable=import-outside-toplevel
        cfg = self.config
        name = "llama3" if cfg.model.name == "llama" else cfg.model.name
        mcfg = build_model_config(name, cfg.model.flavor, "mindspore", vocab_size=vocab_size,
                                  max_position_embeddings=max(cfg.training.seq_len, 128))
        spec = get_model_spec(name, backend="mindspore")
        model = spec.model_cls(mcfg, seed=cfg.job.seed)
        weights = torch_initial_weights(name, mcfg, cfg.job.seed)
        if weights is not None:
            model.load_numpy(weights)
        n_params = sum(int(np.prod(p.shape)) for p in model.get_parameters())
        self.flops_per_token = _flops_per_token(mcfg, n_params, cfg.training.seq_len)
        return model, spec

    def setup(self, dataset: Any) -> None:
        """Model sized to the tokenizer, parallelised (TP + SP, FSDP); optimizer and schedule."""
        cfg = self.config
        model, spec = self._build_model(dataset.vocab_size)
        if self.trainer.distributed:
            model = spec.parallelize_fn(model, self.mesh, self.dims,
                                        sequence_parallel=cfg.parallelism.sequence_parallel)
        if cfg.training.compile:  # per-layer graph mode (the config check allows it on unsharded layers only)
            from hyper_parallel.platform.mindspore.runtime import jit_cells  # pylint: disable=C0415
            jit_cells(model.model.layers)
        self.model = model
        self._setup_moe()
        from hyper_parallel.optim._mindspore.factory import (get_hyper_lr_scheduler,  # noqa  # pylint: disable=C0415
                                                             get_hyper_optimizer)
        from hyper_parallel.optim._mindspore.optimizers import parameter_specs  # pylint: disable=C0415
        ocfg = dict(cfg.optimizer)
        ocfg.setdefault("total_steps", cfg.training.steps)
        self.optimizer = get_hyper_optimizer(model, ocfg)
        self.scheduler = get_hyper_lr_scheduler(self.optimizer, ocfg)
        self._specs = parameter_specs(model)
        self._grad_fn = ms.value_and_grad(self._scaled_loss, None, list(self.optimizer.parameters))

    def _moe_cells(self) -> List[Any]:
        from hyper_parallel.moe._mindspore.moe import MoE  # pylint: disable=import-outside-toplevel
        return [c for _, c in self.model.cells_and_names() if isinstance(c, MoE)]

    def _setup_moe(self) -> None:
        """Auxiliary losses over the global batch (every rank's tokens) with the accumulation scale."""
        from hyper_parallel.moe._mindspore.moe import AuxLossScaler  # pylint: disable=import-outside-toplevel
        AuxLossScaler.scale = 1.0 / self.config.training.grad_accum
        if self.trainer.distributed and self.world_size > 1:
            for cell in self._moe_cells():
                cell.set_token_groups(self._world_group, self.dp_size)

    def _balance_experts(self) -> None:
        """Expert-bias balancing after the optimizer step (counts summed over the ranks), as the torch backend."""
        from hyper_parallel.moe._mindspore.moe import update_expert_bias  # pylint: disable=import-outside-toplevel
        group = self._world_group if self.trainer.distributed and self.world_size > 1 else None
        for cell in self._moe_cells():
            if cell.config.uses_expert_bias:
                update_expert_bias(cell, group)

    def checkpoint_states(self) -> Dict[str, Any]:
        """Model, optimizer and LR schedule as ``Stateful`` s (no RNG: the MindSpore model draws none)."""
        from hyper_parallel.checkpoint import ModelState, OptimizerState  # pylint: disable=import-outside-toplevel
        return {"model": ModelState(self.model), "optim": OptimizerState(self.model, self.optimizer),
                "lr_scheduler": self.scheduler}

    # ------------------------------------------------------------------ steps
    @staticmethod
    def _tensors(rows: List[List[int]]):
        batch = np.asarray(rows, dtype=np.int32)
        return ms.Tensor(batch[:, :-1]), ms.Tensor(batch[:, 1:])

    def _loss(self, ids, labels):
        return type(self.model).loss(self.model(ids), labels)

    def _scaled_loss(self, ids, labels, scale):
        return self._loss(ids, labels) * scale

    def _mean_over_ranks(self, value: float) -> float:
        """The loss averaged over the data-parallel ranks (TP ranks hold the same value: averaging over the
        world is the same)."""
        if not self.trainer.distributed or self.world_size == 1:
            return value
        from hyper_parallel.platform.mindspore.collectives import raw_all_reduce  # noqa  # pylint: disable=C0415
        total = raw_all_reduce(ms.Tensor([value], ms.float32), "sum", self._world_group)
        return float(total.asnumpy()[0]) / self.world_size

    def train_step(self, rows: List[List[int]]) -> Dict[str, Any]:
        """Forward/backward over ``grad_accum`` micro-batches (gradients summed), clip, optimizer and LR steps."""
        t = self.config.training
        start = time.perf_counter()
        micro = len(rows) // t.grad_accum
        scale = ms.Tensor(1.0 / t.grad_accum, ms.float32)
        total, grads = 0.0, None
        params = list(self.optimizer.parameters)
        ddp = getattr(self.model, "reduce_gradients", None)  # replicate: the model accumulates and reduces
        for i in range(t.grad_accum):
            if ddp is not None:
                self.model.set_requires_gradient_sync(i == t.grad_accum - 1)
            loss, g = self._grad_fn(*self._tensors(rows[i * micro:(i + 1) * micro]), scale)
            total += float(loss.asnumpy())
            grads = list(g) if grads is None or ddp is not None else [a + b for a, b in zip(grads, g)]
        if ddp is not None:
            grads = ddp(params, grads)
        grad_norm = 0.0
        if t.clip_grad_norm > 0:
            from hyper_parallel.optim._mindspore.clip import clip_grad_norm  # pylint: disable=C0415
            grads, grad_norm = clip_grad_norm(params, grads, t.clip_grad_norm, self._specs,
                                              self._world_group if self.trainer.distributed else None,
                                              self.world_size)
        lr = self.scheduler.get_last_lr()[0]
        self.optimizer.step(tuple(grads))
        self._balance_experts()
        self.scheduler.step()
        compute = time.perf_counter() - start
        return {"loss": self._mean_over_ranks(total), "grad_norm": grad_norm, "lr": lr, "compute_s": compute}

    def eval_loss(self, rows: List[List[int]]) -> float:
        """Held-out loss of this batch (mean over the ranks); no gradient."""
        return self._mean_over_ranks(float(self._loss(*self._tensors(rows)).asnumpy()))

    # ------------------------------------------------------------------ monitors
    def peak_memory_mib(self) -> float:
        """Peak resident set of this process (MindSpore's CPU backend keeps tensors in host memory)."""
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    def moe_stats(self) -> Dict[str, Any]:
        """The MindSpore Llama has no MoE layers."""
        return {}

    def start_profiler(self) -> Any:
        """Start Python's ``cProfile`` (``metrics.profile_steps``; see ``trainer/_mindspore/profile.py``)."""
        from hyper_parallel.trainer._mindspore import profile  # pylint: disable=import-outside-toplevel
        return profile.start()

    def stop_profiler(self, prof: Any, path: str) -> None:
        """Stop ``prof``; write the time breakdown by layer to ``path`` (JSON) and the raw ``.pstats``."""
        from hyper_parallel.trainer._mindspore import profile  # pylint: disable=import-outside-toplevel
        profile.stop(prof, path)

    def shutdown(self) -> None:
        """Leave the process group at a barrier (the launcher ends the cluster).

        Training, metrics and checkpoints are complete when this runs. mccl's CPU barrier is an all-reduce with a
        fixed 60 s wait, which a rank still writing its plot can outlast; such a failure is reported as a warning
        instead of turning a finished run into a failed one."""
        if self.trainer.distributed and self._plat is not None and self._plat.is_initialized():
            try:
                self._plat.barrier()
            except RuntimeError as exc:
                warnings.warn(f"MindSpore trainer: the closing barrier failed after the run finished ({exc}); "
                              "results and checkpoints are complete", RuntimeWarning, stacklevel=2)
