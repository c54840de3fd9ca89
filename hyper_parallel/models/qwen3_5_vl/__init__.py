# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Qwen3.5 vision-language (dense): the Qwen3.5 vision tower (Qwen3-VL's ViT without DeepStack) + the Qwen3.5
hybrid decoder with interleaved MRoPE, Hugging Face's ``Qwen3_5ForConditionalGeneration``. ``MODEL_SPEC`` is what
``hyper_parallel.models.get_model_spec("qwen3_5_vl")`` returns (``hp-train`` trains it with
:class:`~hyper_parallel.trainer.vl.VLTrainer`); the MoE variant is ``qwen3_5_moe_vl``
(:mod:`hyper_parallel.models.qwen3_5_moe_vl`)."""
from hyper_parallel.models.qwen3_5_vl.args import FLAVORS, MOE_FLAVORS, Qwen3_5MoeVLConfig, Qwen3_5VLConfig
from hyper_parallel.models.qwen3_5_vl.model import (Qwen3_5ForConditionalGeneration,
                                                    Qwen3_5MoeForConditionalGeneration, document_positions)
from hyper_parallel.models.qwen3_5_vl.parallelize import (parallelize_qwen3_5_vl_job, pipeline_qwen3_5_vl_job,
                                                          qwen3_5_vl_tp_plan)
from hyper_parallel.models.qwen3_5_vl.state_dict_adapter import (Qwen3_5MoeVLStateDictAdapter,
                                                                 Qwen3_5VLStateDictAdapter)
from hyper_parallel.models.qwen3_vl.train_spec import VLModelSpec

MODEL_SPEC = VLModelSpec(name="qwen3_5_vl", model_cls=Qwen3_5ForConditionalGeneration, config_cls=Qwen3_5VLConfig,
                         flavors=FLAVORS, parallelize_fn=parallelize_qwen3_5_vl_job,
                         pipelining_fn=pipeline_qwen3_5_vl_job, state_dict_adapter=Qwen3_5VLStateDictAdapter,
                         loss_fn=Qwen3_5ForConditionalGeneration.loss,
                         hf_architecture="Qwen3_5ForConditionalGeneration", extras={"vision": True})

__all__ = ["FLAVORS", "MOE_FLAVORS", "Qwen3_5VLConfig", "Qwen3_5MoeVLConfig", "Qwen3_5ForConditionalGeneration",
           "Qwen3_5MoeForConditionalGeneration", "document_positions", "parallelize_qwen3_5_vl_job",
           "pipeline_qwen3_5_vl_job", "qwen3_5_vl_tp_plan", "Qwen3_5VLStateDictAdapter", "Qwen3_5MoeVLStateDictAdapter",
           "MODEL_SPEC"]
