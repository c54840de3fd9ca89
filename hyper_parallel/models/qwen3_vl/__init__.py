# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Qwen3-VL (dense): vision tower + MRoPE Qwen3 decoder with DeepStack, with Hugging Face
``Qwen3VLForConditionalGeneration`` names; ``config_from_hf`` / ``config_to_hf`` map the configuration.
``MODEL_SPEC`` is what ``hyper_parallel.models.get_model_spec("qwen3_vl")`` returns (``hp-train`` trains it with
:class:`~hyper_parallel.trainer.vl.VLTrainer`)."""
from hyper_parallel.models.qwen3_vl.args import FLAVORS, Qwen3VLConfig, Qwen3VLVisionConfig
from hyper_parallel.models.qwen3_vl.model import Qwen3VLForConditionalGeneration, rope_index
from hyper_parallel.models.qwen3_vl.state_dict_adapter import Qwen3VLStateDictAdapter, config_from_hf, config_to_hf
from hyper_parallel.models.qwen3_vl.train_spec import VLModelSpec, parallelize_qwen3_vl_job, pipeline_qwen3_vl_job

MODEL_SPEC = VLModelSpec(name="qwen3_vl", model_cls=Qwen3VLForConditionalGeneration, config_cls=Qwen3VLConfig,
                         flavors=FLAVORS, parallelize_fn=parallelize_qwen3_vl_job,
                         pipelining_fn=pipeline_qwen3_vl_job,
                         state_dict_adapter=Qwen3VLStateDictAdapter, loss_fn=Qwen3VLForConditionalGeneration.loss,
                         hf_architecture="Qwen3VLForConditionalGeneration", extras={"vision": True})

__all__ = ["FLAVORS", "Qwen3VLConfig", "Qwen3VLVisionConfig", "Qwen3VLForConditionalGeneration", "rope_index",
           "config_from_hf", "config_to_hf", "Qwen3VLStateDictAdapter", "MODEL_SPEC"]
