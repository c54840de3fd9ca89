# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Qwen3.5-MoE vision-language: the Qwen3.5 vision tower + the Qwen3.5-MoE hybrid decoder (routed experts and a
gated shared expert), Hugging Face's ``Qwen3_5MoeForConditionalGeneration`` (the code lives in
:mod:`hyper_parallel.models.qwen3_5_vl`). ``MODEL_SPEC``: ``get_model_spec("qwen3_5_moe_vl")`` (``hp-train``
trains it with :class:`~hyper_parallel.trainer.vl.VLTrainer`, FSDP with expert parallelism)."""
from hyper_parallel.models.qwen3_5_vl import (MOE_FLAVORS as FLAVORS, Qwen3_5MoeForConditionalGeneration,
                                              Qwen3_5MoeVLConfig, Qwen3_5MoeVLStateDictAdapter,
                                              parallelize_qwen3_5_vl_job, pipeline_qwen3_5_vl_job)
from hyper_parallel.models.qwen3_vl.train_spec import VLModelSpec

MODEL_SPEC = VLModelSpec(name="qwen3_5_moe_vl", model_cls=Qwen3_5MoeForConditionalGeneration,
                         config_cls=Qwen3_5MoeVLConfig, flavors=FLAVORS, parallelize_fn=parallelize_qwen3_5_vl_job,
                         pipelining_fn=pipeline_qwen3_5_vl_job, state_dict_adapter=Qwen3_5MoeVLStateDictAdapter,
                         loss_fn=Qwen3_5MoeForConditionalGeneration.loss,
                         hf_architecture="Qwen3_5MoeForConditionalGeneration", extras={"vision": True})

__all__ = ["FLAVORS", "Qwen3_5MoeVLConfig", "Qwen3_5MoeForConditionalGeneration", "Qwen3_5MoeVLStateDictAdapter",
           "MODEL_SPEC"]
