# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``HyperParallelTrainerMixin``: a ``transformers.Trainer`` (or any subclass: ``Seq2SeqTrainer``, LlamaFactory's
``CustomSeq2SeqTrainer``) that trains on our ``fully_shard`` / HSDP, TP and activation policy.

How it plugs in (transformers 5.x with accelerate, launched by torchrun; no accelerate FSDP config needed):

* ``__init__`` parallelises ``self.model`` in place (:func:`prepare_model`) before any optimizer exists, so the
  optimizer is built over the sharded parameters;
* this trainer's accelerator gets three instance-level replacements: ``prepare_model`` registers our model and
  returns it as it is (no DDP wrapper, the model already reduces its gradients), ``prepare_data_loader`` gives
  TP peers the same batches (each batch repeated ``tp_size`` times, so accelerate's per-rank split hands it to
  all of them), and ``clip_grad_norm_`` clips over the sharded gradients;
* ``training_step`` tells the model whether this micro-step is the last of the accumulation
  (``set_requires_gradient_sync`` / ``set_is_last_backward``): gradients are reduced once per optimizer step;
* checkpoints: ``_save_optimizer_and_scheduler`` writes the sharded model + optimizer with our checkpoint API
  (``checkpoint-N/hyper_parallel``), ``_load_from_checkpoint`` / ``_load_optimizer_and_scheduler`` read them
  back in any layout, and ``save_model`` exports a Hugging Face folder.
"""
from __future__ import annotations

import logging
import os
import types
from typing import Any, Optional

import torch
from torch.utils.data import BatchSampler, DataLoader

from hyper_parallel.integration.transformers.args import HyperParallelArguments
from hyper_parallel.integration.transformers._torch import checkpoint as hp_ckpt
from hyper_parallel.integration.transformers._torch.prepare import (HSDPModule, banner, clip_grad_norm_,
                                                                    data_repeat, hsdp_sync_stream, prepare_model,
                                                                    wrap_optimizer_with_skip_dtensor_dispatch)

__all__ = ["HyperParallelTrainerMixin", "HyperParallelTrainer", "RepeatedBatchSampler", "repeat_batches"]

logger = logging.getLogger(__name__)


class RepeatedBatchSampler(BatchSampler):
    """A ``BatchSampler`` that yields each batch ``repeat`` times in a row. accelerate hands consecutive batches
    to consecutive ranks, and TP peers are consecutive ranks (TP is the innermost mesh dim), so each group of
    peers gets the same batch; ``len`` counts the repeats. Shuffling still works: accelerate replaces a
    ``RandomSampler`` inside (``.sampler``) by its seeded one, the same on every rank."""

    def __init__(self, sampler: Any, batch_size: int, drop_last: bool, repeat: int) -> None:
        super().__init__(sampler, batch_size, drop_last)
        self.repeat = repeat

    def __len__(self) -> int:
        return super().__len__() * self.repeat

    def __iter__(self):
        for batch in super().__iter__():
            for _ in range(self.repeat):
                yield list(batch)


def repeat_batches(loader: DataLoader, repeat: int) -> DataLoader:
    """``loader`` rebuilt with a :class:`RepeatedBatchSampler` (the same for ``repeat == 1``, an iterable
    dataset, or a loader without a ``BatchSampler``)."""
    bs = loader.batch_sampler
    if repeat == 1 or not isinstance(bs, BatchSampler) or isinstance(bs, RepeatedBatchSampler):
        return loader
    params = dict(batch_sampler=RepeatedBatchSampler(bs.sampler, bs.batch_size, bs.drop_last, repeat),
                  collate_fn=loader.collate_fn, num_workers=loader.num_workers, pin_memory=loader.pin_memory,
                  worker_init_fn=loader.worker_init_fn, persistent_workers=loader.persistent_workers,
                  generator=loader.generator)
    if loader.num_workers > 0:
        params["prefetch_factor"] = loader.prefetch_factor
    return DataLoader(loader.dataset, **params)


def _patch_accelerator(trainer: Any) -> None:
    """Instance-level replacements on ``trainer.accelerator`` (this trainer's own object; nothing global)."""
    acc = trainer.accelerator
    if acc.__dict__.get("_hp_patched"):
        return
    original_prepare_model = acc.prepare_model
    original_prepare_loader = acc.prepare_data_loader
    repeat = data_repeat(trainer.hp_args)

    def prepare_model_(self, model, device_placement=None, evaluation_mode=False):
        if model is trainer.model:
            if all(m is not model for m in self._models):
                self._models.append(model)
            return model
        return original_prepare_model(model, device_placement=device_placement, evaluation_mode=evaluation_mode)

    def prepare_data_loader_(self, data_loader, device_placement=None, slice_fn_for_dispatch=None):
        del self
        return original_prepare_loader(repeat_batches(data_loader, repeat), device_placement=device_placement,
                                       slice_fn_for_dispatch=slice_fn_for_dispatch)

    def clip_grad_norm_hp(self, parameters, max_norm, norm_type=2):
        self.unscale_gradients()
        return clip_grad_norm_(list(parameters), max_norm, norm_type=norm_type)

    acc.prepare_model = types.MethodType(prepare_model_, acc)
    acc.prepare_data_loader = types.MethodType(prepare_data_loader_, acc)
    acc.clip_grad_norm_ = types.MethodType(clip_grad_norm_hp, acc)
    acc.__dict__["_hp_patched"] = True


class HyperParallelTrainerMixin:
    """Put before a ``transformers.Trainer`` class: ``class T(HyperParallelTrainerMixin, Trainer)``.

    Takes ``hp_args`` (a :class:`HyperParallelArguments`; default: FSDP over every rank) besides the Trainer's
    own arguments. Use ``torchrun``; ``bf16``/``fp16`` autocast of the Trainer is replaced by
    ``hp_args.param_dtype`` (mixed precision inside ``fully_shard``)."""

    def __init__(self, *args: Any, hp_args: Optional[HyperParallelArguments] = None, **kwargs: Any) -> None:
        if hp_args is None:
            hp_args = HyperParallelArguments()
        if not isinstance(hp_args, HyperParallelArguments):
            raise TypeError(f"{type(self).__name__}(hp_args): expected a HyperParallelArguments, got "
                            f"{type(hp_args).__name__}")
        self.hp_args = hp_args
        super().__init__(*args, **kwargs)
        if getattr(self.args, "bf16", False) or getattr(self.args, "fp16", False):
            raise ValueError(f"{type(self).__name__}: bf16/fp16 autocast of TrainingArguments is not used with "
                             "hyper_parallel; set hyper_parallel_args.param_dtype instead")
        self.model = prepare_model(self.model, hp_args)
        self.model_wrapped = self.model
        _patch_accelerator(self)
        if self.args.process_index == 0:
            print(f"[hyper_parallel] {type(self).__name__}: {banner(self.model, hp_args)}", flush=True)

    # ------------------------------------------------------------------ model / optimizer
    def _wrap_model(self, model, training: bool = True, dataloader=None):  # pylint: disable=unused-argument
        """The model is already parallel: no DataParallel / DDP wrapper."""
        return model

    def _move_model_to_device(self, model, device):  # pylint: disable=unused-argument
        """Sharded parameters stay where ``fully_shard`` put them."""
        if not isinstance(model, HSDPModule):
            model.to(device)

    def create_optimizer(self, *args: Any, **kwargs: Any) -> Any:
        """The Trainer's optimizer over the sharded parameters, stepping on local shards."""
        optimizer = super().create_optimizer(*args, **kwargs)
        wrap_optimizer_with_skip_dtensor_dispatch(optimizer)
        getattr(optimizer, "optimizer", optimizer).__dict__["_hp_model"] = self.model
        return optimizer

    def training_step(self, model: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        """One micro-step; gradients are reduced only on the last micro-step of the accumulation."""
        sync = bool(getattr(self.accelerator, "sync_gradients", True))
        if isinstance(model, HSDPModule):
            model.set_requires_gradient_sync(sync)
            model.set_is_last_backward(sync)
        loss = super().training_step(model, inputs, *args, **kwargs)
        if sync:
            hsdp_sync_stream()
        return loss

    # ------------------------------------------------------------------ checkpoints
    def _save_optimizer_and_scheduler(self, output_dir: str) -> None:
        hp_ckpt.save_hsdp_checkpoint(self.model, self.optimizer, self.lr_scheduler, output_dir,
                                     should_save_scheduler=self.args.should_save)

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model=None) -> None:
        target = model if model is not None else self.model
        if not hp_ckpt.load_hsdp_model(target, resume_from_checkpoint):
            raise FileNotFoundError(f"resume_from_checkpoint: {resume_from_checkpoint!r} holds no "
                                    f"{hp_ckpt.HP_CHECKPOINT_DIR}/ folder (not written by a hyper_parallel trainer)")

    def _load_optimizer_and_scheduler(self, checkpoint: Optional[str]) -> None:
        if checkpoint is None:
            return
        hp_ckpt.load_hsdp_optimizer_and_scheduler(self.optimizer, self.lr_scheduler, checkpoint, model=self.model)

    def save_model(self, output_dir: Optional[str] = None, _internal_call: bool = False) -> None:
        """Export a Hugging Face folder (weights gathered to rank 0; tokenizer / processor included)."""
        output_dir = output_dir or self.args.output_dir
        hp_ckpt.export_to_hf_format(self.model, getattr(self, "processing_class", None), output_dir)
        if self.args.should_save:
            torch.save(self.args, os.path.join(output_dir, "training_args.bin"))


def _make_trainer_class() -> type:
    from transformers import Trainer

    # pylint: disable-next=abstract-method,redefined-outer-name
    class HyperParallelTrainer(HyperParallelTrainerMixin, Trainer):
        """``transformers.Trainer`` on hyper_parallel (see :class:`HyperParallelTrainerMixin`)."""

    HyperParallelTrainer.__module__ = __name__
    return HyperParallelTrainer


HyperParallelTrainer = _make_trainer_class()
