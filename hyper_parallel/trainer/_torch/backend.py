# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The torch trainer backend: process group, ``ParallelDims`` meshes, the model parallelised by the config
(FSDP over ``dp_shard x cp``, TP + sequence parallel, CP, EP for MoE models), optimizer and LR schedule from
``hyper_parallel.optim``, activation policy, bf16 autocast, gradient accumulation and clipping."""
from __future__ import annotations

import contextlib
import os
import resource
import time
from typing import Any, Dict, List

import torch
import torch.distributed as dist

from hyper_parallel.trainer.models import build_model_config, model_spec
from hyper_parallel.models.parallel_dims import ParallelDims, degrees_of

__all__ = ["TorchTrainerBackend", "measure_peak_flops"]


def measure_peak_flops(size: int = 256, repeat: int = 8, threads: int = 1) -> float:
    """The peak an MFU estimate divides by: the best of ``repeat`` fp32 ``size`` matmuls on ONE thread (after a
    warm-up), times ``threads`` (:func:`hyper_parallel.trainer.mfu.peak_from_single_thread`)."""
    from hyper_parallel.trainer.mfu import peak_from_single_thread  # pylint: disable=import-outside-toplevel
    a, b = torch.randn(size, size), torch.randn(size, size)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.mm(a, b)
        best = float("inf")
        for _ in range(repeat):
            start = time.perf_counter()
            torch.mm(a, b)
            best = min(best, time.perf_counter() - start)
    finally:
        torch.set_num_threads(before)
    return peak_from_single_thread(2 * size ** 3 / max(best, 1e-9), threads)


def _flops_per_token(model: Any, cfg: Any, seq_len: int) -> float:
    """TorchTitan's 6 N + 12 L H S with N the parameters a token multiplies (:mod:`hyper_parallel.trainer.mfu`)."""
    from hyper_parallel.trainer.mfu import flops_per_token  # pylint: disable=import-outside-toplevel
    from hyper_parallel.moe._torch.moe import MoE  # pylint: disable=import-outside-toplevel
    n_params = sum(p.numel() for p in model.parameters())
    embed = getattr(getattr(model, "model", model), "embed_tokens", None)
    n_embed = 0 if embed is None or getattr(cfg, "tie_word_embeddings", False) else embed.weight.numel()
    moes = [m for m in model.modules() if isinstance(m, MoE)]
    routed = sum(p.numel() for m in moes for p in m.experts.parameters())
    top_k, experts = (moes[0].config.top_k, moes[0].config.num_experts) if moes else (0, 0)
    return flops_per_token(n_params, getattr(cfg, "num_hidden_layers", 0), getattr(cfg, "hidden_size", 0), seq_len,
                           n_embedding=n_embed, n_routed_experts=routed, top_k=top_k, num_experts=experts)


def _with_moe_overrides(mcfg: Any, overrides: Dict[str, Any]) -> Any:
    """``mcfg`` with the ``[moe]`` section's fields applied to its ``MoEConfig`` (validated by it)."""
    if not overrides:
        return mcfg
    import dataclasses  # pylint: disable=import-outside-toplevel
    if getattr(mcfg, "moe", None) is None:
        raise ValueError(f"moe.{sorted(overrides)[0]}: the model has no MoE layers; remove the [moe] settings")
    return dataclasses.replace(mcfg, moe=dataclasses.replace(mcfg.moe, **overrides))


def _restarted_attempt_store() -> None:
    """After a torchrun restart, join the process group through a store prefix of this attempt.

    The restarted workers meet on the agent's store; keys the previous attempt's dead workers wrote there can
    be read before the new workers overwrite them, and gloo then waits on a dead peer's address. A prefix per
    ``TORCHELASTIC_RESTART_COUNT`` keeps the attempts apart."""
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    if attempt == "0" or "MASTER_ADDR" not in os.environ or os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return  # without the agent's shared store (TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1) each round has a fresh one
    from datetime import timedelta  # pylint: disable=import-outside-toplevel
    from hyper_parallel.platform.base import collective_timeout_seconds  # noqa  # pylint: disable=C0415
    timeout = timedelta(seconds=collective_timeout_seconds("torch"))
    world, rank = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, is_master=False,
                          timeout=timeout)
    dist.init_process_group("gloo" if not torch.cuda.is_available() else "nccl",
                            store=dist.PrefixStore(f"hp_train_attempt_{attempt}", store), rank=rank,
                            world_size=world, timeout=timeout)


def _seed_host_generators(seed: int) -> None:
    """``job.seed`` seeds Python's ``random`` and NumPy's global generator too (their states are saved and
    restored by the checkpoint's ``RNGState``)."""
    import random  # pylint: disable=import-outside-toplevel
    random.seed(seed)
    try:
        import numpy as np  # pylint: disable=import-outside-toplevel
    except ImportError:
        return
    np.random.seed(seed % 2 ** 32)


def _sft_step(backend: Any, rows: List[Any], train: bool) -> None:
    """SFT rows: the step's loss normalisation (global count of loss tokens), see ``finetune.prepare_sft_step``."""
    if rows and isinstance(rows[0], dict):
        from hyper_parallel.trainer._torch.finetune import prepare_sft_step  # noqa  # pylint: disable=C0415
        prepare_sft_step(backend, rows, train)


class TorchTrainerBackend:
    """See :class:`hyper_parallel.trainer.api.TrainerBackend`."""

    name = "torch"

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer
        self.config = trainer.config
        self.rank = 0
        self.world_size = 1
        self.dims: Any = None
        self.model: Any = None
        self.optimizer: Any = None
        self.scheduler: Any = None
        self.dp_rank = 0
        self.dp_size = 1
        self.flops_per_token = 0.0
        self.peak_flops = 0.0
        self.threads = 1
        self.device: Any = torch.device("cpu")  # replaced in init_distributed: the mesh's device type
        self._moe: List[Any] = []
        self._cp_mesh = None
        self._cp_load_balance = "headtail"
        self._loss_group = None
        self._init_mode = False
        self._schedule: Any = None
        self._stages: List[Any] = []
        self._pp_group = None
        self._pp_first = self._pp_last = False
        self._pp_loss_scale = 1.0
        self.model_config: Any = None
        self.hf_config: Any = None
        self.hf_notes: List[str] = []
        self._sft_norm = 1.0
        self._sft_pp = False
        self._sft_pp_norm = 1.0

    # ------------------------------------------------------------------ process group / meshes
    def init_distributed(self) -> None:
        """Join (or start, under torchrun) the gloo process group; build the ``ParallelDims`` meshes."""
        par = self.config.parallelism
        from hyper_parallel.platform.torch.device import default_device_type, local_device  # noqa  # pylint: disable=C0415
        kind = default_device_type()
        if kind == "cuda":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        self.device = local_device(kind)
        if self.trainer.distributed:
            if not dist.is_initialized():
                _restarted_attempt_store()
                import hyper_parallel as hp  # pylint: disable=import-outside-toplevel
                hp.init_process_group("gloo" if not torch.cuda.is_available() else "nccl")
                self._init_mode = True
            self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self.dims = ParallelDims(dp_replicate=par.dp_replicate, dp_shard=par.dp_shard, cp=par.cp, tp=par.tp,
                                 pp=par.pp, ep=par.ep, etp=par.etp, world_size=self.world_size)
        self._check_pp_batch()
        local = int(os.environ.get("LOCAL_WORLD_SIZE", self.world_size if self.trainer.distributed else 1))
        from hyper_parallel.trainer.config import intra_op_threads  # pylint: disable=import-outside-toplevel
        self.threads = intra_op_threads(self.config.job.threads, os.environ, os.cpu_count(), local)
        torch.set_num_threads(self.threads)
        if self.config.training.deterministic:
            torch.use_deterministic_algorithms(True, warn_only=True)
        if self.trainer.distributed:
            self.dims.build_mesh(self.device.type)
            self.dp_rank, self.dp_size = self.dims.dp_rank(self.rank), self.dims.dp
            self._cp_mesh = self.dims.mesh("cp")
            # a model whose layers need a contiguous split (state passing: Qwen3.5) says so in its spec
            self._cp_load_balance = model_spec(self.config.model.name).extras.get(
                "cp_load_balance", self.config.parallelism.cp_load_balance)
            loss_mesh = self.dims.mesh("loss")
            self._loss_group = loss_mesh.get_group(0) if loss_mesh is not None else None

    def _check_pp_batch(self) -> None:
        """The batch split on this run's world, pipeline microbatches included: the rule ``hp-train --check``
        applies on ``job.nproc`` (:func:`~hyper_parallel.trainer.config.check_global_batch`)."""
        from hyper_parallel.trainer.config import check_global_batch  # pylint: disable=import-outside-toplevel
        check_global_batch(self.config, degrees_of(self.dims))

    def barrier(self) -> None:
        """All ranks meet."""
        if self.trainer.distributed:
            dist.barrier()

    # ------------------------------------------------------------------ model / optimizer
    def _build_model(self, vocab_size: int) -> Any:
        cfg = self.config
        _seed_host_generators(cfg.job.seed)
        if cfg.model.init_from:  # meta device; the local shards are read after the plan (finetune.load_from_hf)
            from hyper_parallel.trainer._torch.finetune import build_from_hf  # noqa  # pylint: disable=C0415
            model = build_from_hf(self, vocab_size)
            mcfg = self.hf_config
        else:
            mcfg = build_model_config(cfg.model.name, cfg.model.flavor, vocab_size=vocab_size,
                                      max_position_embeddings=max(cfg.training.seq_len, 128),
                                      **getattr(self.trainer.dataset, "model_overrides", {}))
            mcfg = _with_moe_overrides(mcfg, cfg.moe.overrides())
            torch.manual_seed(cfg.job.seed)
            model = model_spec(cfg.model.name).model_cls(mcfg).to(self.device)
        self.model_config = mcfg
        self.flops_per_token = _flops_per_token(model, mcfg, cfg.training.seq_len)
        from hyper_parallel.moe._torch.moe import MoE  # pylint: disable=import-outside-toplevel
        self._moe = [(name, m) for name, m in model.named_modules() if isinstance(m, MoE)]
        return model

    def _parallelize(self, model: Any) -> Any:
        """The registry's ``parallelize_fn`` (TP + SP, CP, activation policy, FSDP/HSDP; EP for MoE models)."""
        cfg, dims, par = self.config, self.dims, self.config.parallelism
        activation = cfg.activation or None
        if not self.trainer.distributed:
            if activation is not None:
                from hyper_parallel.activation import apply_activation_policy  # noqa  # pylint: disable=C0415
                apply_activation_policy(model, activation)
            return model
        spec, world = model_spec(cfg.model.name), dims.mesh("world")
        kwargs = dict(sequence_parallel=par.sequence_parallel, cp_method=par.cp_method, activation=activation,
                      loss_parallel=par.loss_parallel, async_cp=par.cp_async,
                      cp_load_balance=spec.extras.get("cp_load_balance", par.cp_load_balance))
        if not dims.pp_enabled:
            return spec.parallelize_fn(model, world, dims, **kwargs)
        loss_fn = type(model).loss
        split = None
        if par.pp_layers_per_stage:  # checked against this model's layer count, naming the key
            from hyper_parallel.pipeline.split import check_layers_per_stage  # noqa  # pylint: disable=C0415
            from hyper_parallel.trainer.config import pipeline_stages  # pylint: disable=import-outside-toplevel
            layers = getattr(model.config, "text", model.config).num_hidden_layers  # a VL model: its LM's
            check_layers_per_stage(par.pp_layers_per_stage, layers,
                                   pipeline_stages(par, dims.pp), what="parallelism.pp_layers_per_stage")
            split = list(par.pp_layers_per_stage)
        extra = {"overlap_b_f": True} if par.pp_overlap_b_f else {}
        if spec.extras.get("vision"):  # where the vision encoder runs (VLTrainer; trainer/vl_config.py)
            from hyper_parallel.trainer.vl_config import mpipe_config_of  # pylint: disable=import-outside-toplevel
            extra.update(placement=par.vl_encoder, mpipe_config=mpipe_config_of(par, model.config),
                         encoder_ranks=par.vl_encoder_ranks if par.vl_encoder == "mpipe" else 1)
        self._schedule, parts = spec.pipelining_fn(  # losses scaled by 1/grad_accum while training
            model, world, dims, schedule=par.pp_schedule, n_microbatches=par.pp_microbatches,
            layers_per_stage=split, loss_fn=lambda out, tgt: self._pp_loss(loss_fn, out, tgt), **extra)
        self._stages = [spec.parallelize_fn(part, world, dims, **kwargs) for part in parts]
        self._pp_group = dims.mesh("pp").get_group(0)
        self._pp_first = any(getattr(p, "encoder", False) or getattr(p.model, "embed_tokens", None) is not None
                             for p in self._stages)
        self._pp_last = any(getattr(p, "lm_head", None) is not None for p in self._stages)
        return self._stages

    def _pp_loss(self, loss_fn: Any, out: Any, tgt: Any) -> Any:
        """The pipeline's microbatch loss: the model's mean loss scaled by ``1/grad_accum``, or for SFT rows the
        summed loss normalised over the step (``finetune.sft_pp_loss``)."""
        if self._sft_pp:
            from hyper_parallel.trainer._torch.finetune import sft_pp_loss  # pylint: disable=C0415
            return sft_pp_loss(self, out, tgt)
        return self._next_token_loss(loss_fn, out, tgt) * self._pp_loss_scale

    def _parameters(self) -> List[Any]:
        """Every parameter of the model or of this rank's stage modules, each once (two stages of one rank may
        share a tied embedding)."""
        parts = self.model if isinstance(self.model, list) else [self.model]
        return list({id(p): p for part in parts for p in part.parameters()}.values())

    def _tied_copies(self) -> List[Any]:
        """Parameters whose gradient another pipeline rank counts (the last stage's tied head)."""
        if not isinstance(self.model, list):
            return []
        return [get() for part in self.model for get in getattr(part, "tied_copies", ())]

    def _inputs(self, rows: List[List[int]]):
        """Input ids, labels (shifted by one) and RoPE positions of ``rows``; under CP this rank's load-balanced
        sequence shards of each (the positions say where each kept token sits in the whole sequence)."""
        batch = torch.tensor(rows, dtype=torch.long, device=self.device)
        ids, labels = batch[:, :-1], batch[:, 1:]
        pos = torch.arange(ids.shape[1], device=self.device)
        if self._cp_mesh is not None:
            from hyper_parallel.cp import context_parallel_shard  # pylint: disable=import-outside-toplevel
            ids, labels, pos = context_parallel_shard(  # pylint: disable=unbalanced-tuple-unpacking
                self._cp_mesh, [ids, labels, pos], [1, 1, 0], load_balance=self._cp_load_balance)
        return ids, labels, pos

    def _pp_pass(self, rows: List[List[int]], train: bool) -> float:
        """One schedule pass over ``rows`` (split into ``pp_microbatches``): ``step`` (forward + backward) or
        ``eval`` (the forward-only schedule); the mean microbatch loss on the last stage's rank, else 0. Every
        stage gets the (CP-sharded) positions, one row per sample so they split into microbatches with the batch:
        each stage's layers apply RoPE."""
        if rows and isinstance(rows[0], dict):  # SFT rows: positions and the document mask reach every stage
            from hyper_parallel.trainer._torch.finetune import sft_pp_pass  # pylint: disable=C0415
            from hyper_parallel.trainer._torch.vl import is_vl_rows, vl_pp_pass  # pylint: disable=C0415
            return vl_pp_pass(self, rows, train) if is_vl_rows(rows) else sft_pp_pass(self, rows, train)
        ids, labels, pos = self._inputs(rows)
        pos = pos.expand(ids.shape[0], -1)
        losses: List[Any] = []
        run = self._schedule.step if train else self._schedule.eval
        with self._autocast():
            run(ids if self._pp_first else None, target=labels if self._pp_last else None,
                losses=losses, return_outputs=False, position_ids=pos)
        return sum(float(x) for x in losses) / len(losses) if losses else 0.0

    def _pp_all_ranks(self, value: float) -> float:
        """``value`` of the last stage's rank on every pipeline rank (the others contribute 0)."""
        t = torch.tensor([value], dtype=torch.float64, device=self.device)
        dist.all_reduce(t, group=self._pp_group)
        return t.item()

    def _pp_step(self, rows: List[List[int]]) -> float:
        """One pipeline training step over this rank's rows: ``grad_accum`` schedule passes of
        ``pp_microbatches`` microbatches each; FSDP reduction and tied-gradient sums wait for the last pass
        (``set_requires_gradient_sync``). The mean microbatch loss, on every pipeline rank."""
        accum = self.config.training.grad_accum
        micro = len(rows) // accum
        total = 0.0
        self._pp_loss_scale = 1.0 / accum
        for i in range(accum):
            self._schedule.set_requires_gradient_sync(i == accum - 1)
            total += self._pp_pass(rows[i * micro:(i + 1) * micro], train=True)  # already / accum
        self._pp_loss_scale = 1.0
        return self._pp_all_ranks(total)

    def setup(self, dataset: Any) -> None:
        """Model sized to the tokenizer, parallelised; activation policy; optimizer and schedule."""
        cfg = self.config
        base = self._build_model(dataset.vocab_size)
        if cfg.training.compile:
            self._check_compile()
        model = self._parallelize(base)
        if cfg.model.init_from:
            from hyper_parallel.trainer._torch.finetune import load_from_hf  # noqa  # pylint: disable=C0415
            load_from_hf(self, model if isinstance(model, list) else [model])
        if cfg.training.compile:
            self._compile_blocks(model if isinstance(model, list) else [model])
        self.model = model
        from hyper_parallel.optim.api import get_hyper_lr_scheduler, get_hyper_optimizer  # noqa
        ocfg = dict(cfg.optimizer)
        ocfg.setdefault("total_steps", cfg.training.steps)
        self.optimizer = get_hyper_optimizer(model, ocfg)
        self.scheduler = get_hyper_lr_scheduler(self.optimizer, ocfg)
        if self._moe and self.trainer.distributed:
            self._register_moe_balance(model)
        elif self._moe:  # one process inside a running job: the same rule on this process's counts alone
            self.optimizer.register_step_pre_hook(lambda *_: self._local_bias_update())
        self.peak_flops = measure_peak_flops(threads=self.threads)

    def _register_moe_balance(self, model: Any) -> None:
        """The expert-bias update before each optimizer step, over this rank's MoE layers. Under PP a rank holds
        some stages' layers only: the token counts are summed over the ranks of the same pipeline position
        (every degree but ``pp``), which hold the same layers."""
        from hyper_parallel.moe import register_moe_load_balancing_hook  # pylint: disable=import-outside-toplevel
        if not isinstance(model, list):
            register_moe_load_balancing_hook(model, self.optimizer)
            return
        from hyper_parallel.moe._torch.moe import MoE  # pylint: disable=import-outside-toplevel
        from hyper_parallel.core.process_group import get_or_create_group  # pylint: disable=C0415
        self._moe = [(name, m) for part in model for name, m in part.named_modules() if isinstance(m, MoE)]
        group = None
        for ranks in self.dims.flat_groups(("dp_replicate", "dp_shard", "cp", "tp")):  # every rank, same order
            made = get_or_create_group(ranks)
            group = made if self.rank in ranks else group
        if self._moe:
            register_moe_load_balancing_hook(torch.nn.ModuleList(model), self.optimizer, group)

    def _check_compile(self) -> None:
        """``training.compile`` runs where each decoder block computes on plain tensors: FSDP/HSDP (the block's
        parameters are gathered before its forward), data parallel, pipeline stages, one process, and CP (the
        CP attention, routed by a ``TorchFunctionMode``, runs eager at a graph break inside the compiled block).
        Refused elsewhere (TP, MoE layers) by the rules ``hp-train --check`` applies
        (:data:`~hyper_parallel.trainer.validate.REFUSALS`), on this run's world and model."""
        from hyper_parallel.trainer.validate import RunFacts, refuse  # pylint: disable=import-outside-toplevel
        model = getattr(self.model_config, "text", self.model_config)  # a vision-language model: its language model
        refuse(RunFacts(self.config, degrees_of(self.dims), model), first="training.compile")

    def _compile_blocks(self, parts: List[Any]) -> None:
        """``torch.compile`` each decoder block's ``forward`` (TorchTitan: per block, so the repeated blocks share
        one compiled graph); module hooks (FSDP gather/reduce, activation checkpointing) stay eager around
        it. The fused C++ kernels are loaded first, so their one-time loading is not traced."""
        from hyper_parallel.kernels import build_info  # pylint: disable=import-outside-toplevel
        build_info()
        backend = self.config.training.compile_backend
        for part in parts:
            layers = part.model.layers
            for layer in (layers.values() if hasattr(layers, "values") else layers):
                layer.forward = torch.compile(layer.forward, backend=backend)

    def _local_bias_update(self) -> None:
        from hyper_parallel.moe.balance import bias_update  # pylint: disable=import-outside-toplevel
        for _, m in self._moe:
            loads = m.tokens_per_expert.tolist()
            m.global_tokens_per_expert = tuple(loads)
            with torch.no_grad():
                if m.config.uses_expert_bias and sum(loads):
                    m.expert_bias += torch.tensor(bias_update(loads, m.config.bias_update_rate))
                m.tokens_per_expert.zero_()

    def checkpoint_states(self) -> Dict[str, Any]:
        """Model, optimizer, LR schedule and RNG as ``Stateful`` s."""
        from hyper_parallel.checkpoint import ModelState, OptimizerState  # pylint: disable=import-outside-toplevel
        from hyper_parallel.checkpoint._torch.stateful import RNGState  # pylint: disable=import-outside-toplevel
        return {"model": ModelState(self.model), "optim": OptimizerState(self.model, self.optimizer),
                "lr_scheduler": self.scheduler, "rng": RNGState()}

    # ------------------------------------------------------------------ steps
    def _autocast(self):
        if self.config.training.mixed_precision == "bf16":
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def _next_token_loss(self, loss_fn: Any, logits: Any, labels: Any) -> Any:
        """``loss_fn(logits.float(), labels)``; with ``parallelism.loss_parallel`` the logits are vocabulary-sharded
        DTensors and the cross-entropy runs vocabulary-parallel (``hyper_parallel.tp.loss_parallel``)."""
        if not self.config.parallelism.loss_parallel:
            return loss_fn(logits.float(), labels)
        from hyper_parallel.tp import loss_parallel  # pylint: disable=import-outside-toplevel
        with loss_parallel():
            return loss_fn(logits.float(), labels)

    def _loss(self, rows: List[List[int]]) -> Any:
        if rows and isinstance(rows[0], dict):  # SFT rows (hyper_parallel.trainer.sft / vl_sft)
            from hyper_parallel.trainer._torch.finetune import sft_loss  # pylint: disable=import-outside-toplevel
            from hyper_parallel.trainer._torch.vl import is_vl_rows, vl_loss  # pylint: disable=C0415
            return vl_loss(self, rows) if is_vl_rows(rows) else sft_loss(self, rows)
        ids, labels, pos = self._inputs(rows)
        with self._autocast():
            logits = self.model(ids, position_ids=pos)
            loss_fn = getattr(type(self.model), "loss", None) or (
                lambda out, tgt: torch.nn.functional.cross_entropy(out.flatten(0, 1), tgt.flatten()))
            return self._next_token_loss(loss_fn, logits, labels)

    def _set_router_loss_scale(self, reset: bool = False) -> None:
        """The MoE auxiliary loss / z-loss are taken per micro-batch, like the main loss (gradient-accumulation
        semantics): each micro-batch's router losses get the gradient its main loss gets, ``1 / grad_accum``, and
        under PP ``1 / (grad_accum x pp_microbatches)`` (the schedule divides each micro-batch loss by the
        micro-batch count). So PP with ``n`` micro-batches equals one process with ``grad_accum = n``."""
        if not self._moe:
            return
        from hyper_parallel.moe._torch.moe import MoEAuxLossAutoScaler  # pylint: disable=import-outside-toplevel
        micro = self.config.parallelism.pp_microbatches if self._schedule is not None else 1
        MoEAuxLossAutoScaler.set_loss_scale(1.0 if reset else 1.0 / (self.config.training.grad_accum * micro))

    def _mean_over_loss_ranks(self, value: float) -> float:
        if self._loss_group is None:
            return value
        t = torch.tensor([value], dtype=torch.float64, device=self.device)
        dist.all_reduce(t, group=self._loss_group)
        return t.item() / dist.get_world_size(self._loss_group)

    def train_step(self, rows: List[List[int]]) -> Dict[str, Any]:
        """Forward/backward over ``grad_accum`` micro-batches, clip, optimizer and LR steps; ``collectives``: how
        many ``torch.distributed`` collectives / point-to-point calls this rank issued in the step (the
        metrics' count, :class:`~hyper_parallel.platform.torch.collective_count.CollectiveCounter`)."""
        from hyper_parallel.platform.torch.collective_count import CollectiveCounter  # noqa  # pylint: disable=C0415
        with CollectiveCounter() as counter:
            out = self._train_step(rows)
        out["collectives"] = counter.total
        out["collectives_by_op"] = dict(counter.by_op)
        return out

    def _train_step(self, rows: List[List[int]]) -> Dict[str, Any]:
        t = self.config.training
        start = time.perf_counter()
        _sft_step(self, rows, train=True)
        micro = len(rows) // t.grad_accum
        total = 0.0
        self._set_router_loss_scale()
        try:
            if self._schedule is not None:
                total = self._pp_step(rows)
            for i in range(t.grad_accum if self._schedule is None else 0):
                loss = self._loss(rows[i * micro:(i + 1) * micro]) / t.grad_accum
                loss.backward()
                total += loss.detach().item()
        finally:
            self._set_router_loss_scale(reset=True)
        grad_norm, loss = 0.0, None
        if t.clip_grad_norm > 0:  # the loss's all-reduce rides on the norm's over the same ranks
            from hyper_parallel.optim._torch.clip import clip_grad_norm_and_sum_  # noqa  # pylint: disable=C0415
            sums = [(self._loss_group, total)] if self._loss_group is not None else []
            norm, summed = clip_grad_norm_and_sum_(self._parameters(), t.clip_grad_norm, sums,
                                                   pp_group=self._pp_group, copies=self._tied_copies())
            grad_norm = float(norm)
            if summed:
                loss = summed[0] / dist.get_world_size(self._loss_group)
        lr = self.scheduler.get_last_lr()[0]
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad()
        compute = time.perf_counter() - start
        loss = self._mean_over_loss_ranks(total) if loss is None else loss
        return {"loss": loss, "grad_norm": grad_norm, "lr": lr, "compute_s": compute}

    @torch.no_grad()
    def eval_loss(self, rows: List[List[int]]) -> float:
        """Held-out loss of this batch (mean over the data-parallel ranks). MoE routing counts of the evaluation
        forward are discarded: they must not move the expert biases (a resumed run would differ)."""
        counts = [m.tokens_per_expert.clone() for _, m in self._moe]
        _sft_step(self, rows, train=False)
        if self._schedule is not None:  # the schedule's forward-only pass over the stages
            loss = self._pp_all_ranks(self._pp_pass(rows, train=False))
        else:
            loss = self._loss(rows).item()
        for (_, m), c in zip(self._moe, counts):
            m.tokens_per_expert.copy_(c)
        return self._mean_over_loss_ranks(loss)

    def export_hf(self, folder: str) -> None:
        """The model as a Hugging Face folder (``hyper_parallel.trainer._torch.finetune.export_hf``)."""
        from hyper_parallel.trainer._torch.finetune import export_hf  # pylint: disable=import-outside-toplevel
        export_hf(self, folder)

    # ------------------------------------------------------------------ monitors
    def peak_memory_mib(self) -> float:
        """Peak memory of this process (device memory on an accelerator, else the resident set)."""
        if torch.cuda.is_available():
            return torch.cuda.max_memory_allocated() / 2 ** 20
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    def moe_stats(self) -> Dict[str, Any]:
        """Per MoE layer: the last step's global load per expert, max/mean and the expert-bias norm."""
        out = {}
        for name, m in self._moe:
            load = [int(c) for c in (getattr(m, "global_tokens_per_expert", None) or m.tokens_per_expert.tolist())]
            mean = sum(load) / max(1, len(load))
            out[name] = {"load": load, "max_over_mean": (max(load) / mean) if mean else 0.0,
                         "bias_norm": float(m.expert_bias.norm())}
        return out

    def start_profiler(self) -> Any:
        """Start a torch profiler (CPU activities)."""
        prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
        prof.__enter__()  # pylint: disable=unnecessary-dunder-call
        return prof

    def stop_profiler(self, prof: Any, path: str) -> None:
        """Stop ``prof`` and write its Chrome trace to ``path``."""
        prof.__exit__(None, None, None)
        prof.export_chrome_trace(path)

    def shutdown(self, failed: bool = False) -> None:
        """Destroy the process group this backend started, through ``hyper_parallel.destroy_process_group`` (the
        meshes, plan caches and FSDP units then drop their groups: gloo's threads end now, not at interpreter
        exit where tearing them down can abort a rank). ``failed``: this rank leaves on an exception, so no
        closing barrier (the others may be blocked elsewhere) and the group is left to the process exit."""
        if failed:
            return
        if self._init_mode and dist.is_initialized():
            dist.barrier()
            from hyper_parallel.core.process_group import destroy_process_group  # noqa  # pylint: disable=C0415
            destroy_process_group()
            self._init_mode = False
