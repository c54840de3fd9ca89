# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``HyperParallelTrainer`` for LlamaFactory: its ``CustomSeq2SeqTrainer`` (loss functions, ``gen_kwargs``,
``ref_model``, ``processor``, ``save_predictions``, BAdam, shuffling switch) with our
:class:`HyperParallelTrainerMixin` in front; and ``fsdp2_prepare_model`` for LlamaFactory's main branch, which
patches accelerate's FSDP2 preparation with it.

Without LlamaFactory installed (our own tests) the base is ``transformers.Seq2SeqTrainer`` with the same
constructor keywords and a ``save_predictions`` that writes ``generated_predictions.jsonl``.
"""
from __future__ import annotations

import json
import os
from typing import Any, Optional

from hyper_parallel.integration.transformers.args import HyperParallelArguments
from hyper_parallel.integration.transformers._torch.prepare import prepare_model
from hyper_parallel.integration.transformers._torch.trainer import HyperParallelTrainerMixin

__all__ = ["HyperParallelTrainer", "fsdp2_prepare_model", "llamafactory_base"]

IGNORE_INDEX = -100


def fsdp2_prepare_model(accelerator: Any, model: Any, hp_args: Optional[HyperParallelArguments] = None) -> Any:
    """accelerate's ``fsdp2_prepare_model(accelerator, model)`` on hyper_parallel: parallelise ``model`` in place
    with ``hp_args`` (default: FSDP over every rank) and return it; a model already prepared is returned as
    it is. accelerate then maps the optimizer's parameters to the sharded ones by name."""
    del accelerator
    return prepare_model(model, hp_args if hp_args is not None else HyperParallelArguments())


class _Seq2SeqBase:  # pylint: disable=too-few-public-methods
    """Stand-in for LlamaFactory's ``CustomSeq2SeqTrainer`` keywords when LlamaFactory is not installed."""

    def __init__(self, finetuning_args: Any = None, processor: Any = None, model_args: Any = None,
                 gen_kwargs: Optional[dict] = None, ref_model: Any = None, **kwargs: Any) -> None:
        if "tokenizer" in kwargs:
            kwargs["processing_class"] = kwargs.pop("tokenizer")
        super().__init__(**kwargs)
        self.finetuning_args = finetuning_args
        self.model_args = model_args
        self.processor = processor
        self.ref_model = ref_model
        if gen_kwargs is not None:
            self._gen_kwargs = gen_kwargs
        if processor is not None:
            self.model_accepts_loss_kwargs = False

    # the base class is chosen at import (LlamaFactory's CustomSeq2SeqTrainer, else transformers' Seq2SeqTrainer):
    # pylint cannot see the transformers.Trainer members it inherits
    # pylint: disable=no-member
    def save_predictions(self, dataset: Any, predict_results: Any, skip_special_tokens: bool = True) -> None:
        """``output_dir/generated_predictions.jsonl``: prompt, prediction and label per sample (rank 0)."""
        if not self.is_world_process_zero():
            return
        tok = self.processing_class
        pad = tok.pad_token_id

        def decode(ids):
            ids = [int(i) for i in ids if int(i) not in (IGNORE_INDEX, pad)]
            return tok.decode(ids, skip_special_tokens=skip_special_tokens)

        path = os.path.join(self.args.output_dir, "generated_predictions.jsonl")
        with open(path, "w", encoding="utf-8") as fh:
            for i, (pred, label) in enumerate(zip(predict_results.predictions, predict_results.label_ids)):
                row = {"prompt": decode(dataset[i]["input_ids"]), "predict": decode(pred), "label": decode(label)}
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")


def llamafactory_base() -> type:
    """LlamaFactory's ``CustomSeq2SeqTrainer`` when ``llamafactory`` is importable, else the stand-in on
    ``transformers.Seq2SeqTrainer``."""
    try:
        from llamafactory.train.sft.trainer import CustomSeq2SeqTrainer  # pylint: disable=import-error
        return CustomSeq2SeqTrainer
    except ImportError:
        from transformers import Seq2SeqTrainer
        return type("Seq2SeqTrainer", (_Seq2SeqBase, Seq2SeqTrainer), {"__module__": __name__})


def _make_trainer_class() -> type:
    base = llamafactory_base()

    # pylint: disable-next=abstract-method,redefined-outer-name
    class HyperParallelTrainer(HyperParallelTrainerMixin, base):
        """LlamaFactory's SFT trainer on hyper_parallel. Keywords: ``hp_args`` (a ``HyperParallelArguments``),
        then LlamaFactory's (``finetuning_args``, ``processor``, ``gen_kwargs``, ``ref_model``, ``tokenizer``)
        and ``transformers.Seq2SeqTrainer``'s (``model``, ``args``, ``data_collator``, ``train_dataset``,
        ``eval_dataset``, ``callbacks``, ``compute_loss_func``, ``compute_metrics``, ...)."""

    HyperParallelTrainer.__module__ = __name__
    return HyperParallelTrainer


HyperParallelTrainer = _make_trainer_class()
