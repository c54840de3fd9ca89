# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Qwen3-VL-MoE: Qwen3-VL's vision tower and MRoPE decoder with DeepStack, the decoder's MLPs mixture-of-experts
blocks (Qwen3-MoE routing), with Hugging Face ``Qwen3VLMoeForConditionalGeneration`` names up to the router and
the stacked experts (``to_hf`` / ``from_hf``); :func:`parallelize_qwen3_vl_moe` applies expert parallelism.
``MODEL_SPEC``: ``get_model_spec("qwen3_vl_moe")`` (``hp-train`` trains it with
:class:`~hyper_parallel.trainer.vl.VLTrainer`)."""
from hyper_parallel.models.qwen3_vl_moe.args import FLAVORS, Qwen3VLMoeConfig
from hyper_parallel.models.qwen3_vl_moe.model import Qwen3VLMoeForConditionalGeneration
from hyper_parallel.models.qwen3_vl_moe.parallelize import parallelize_qwen3_vl_moe
from hyper_parallel.models.qwen3_vl_moe.state_dict_adapter import (Qwen3VLMoeStateDictAdapter, config_from_hf,
                                                                   config_to_hf, from_hf, to_hf)
from hyper_parallel.models.qwen3_vl.train_spec import (VLModelSpec, parallelize_qwen3_vl_job,
                                                      pipeline_qwen3_vl_job)

MODEL_SPEC = VLModelSpec(name="qwen3_vl_moe", model_cls=Qwen3VLMoeForConditionalGeneration,
                         config_cls=Qwen3VLMoeConfig, flavors=FLAVORS, parallelize_fn=parallelize_qwen3_vl_job,
                         pipelining_fn=pipeline_qwen3_vl_job, state_dict_adapter=Qwen3VLMoeStateDictAdapter,
                         loss_fn=Qwen3VLMoeForConditionalGeneration.loss,
                         hf_architecture="Qwen3VLMoeForConditionalGeneration", extras={"vision": True})

__all__ = ["FLAVORS", "Qwen3VLMoeConfig", "Qwen3VLMoeForConditionalGeneration", "parallelize_qwen3_vl_moe",
           "config_from_hf", "config_to_hf", "from_hf", "to_hf", "Qwen3VLMoeStateDictAdapter", "MODEL_SPEC"]
