# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The torch registry entry of Qwen3-MoE (``get_model_spec("qwen3_moe")``)."""
from hyper_parallel.models.qwen3_moe.args import FLAVORS, Qwen3MoeConfig
from hyper_parallel.models.qwen3_moe.model import Qwen3MoeForCausalLM
from hyper_parallel.models.qwen3_moe.parallelize import parallelize_qwen3_moe, pipeline_qwen3_moe
from hyper_parallel.models.qwen3_moe.state_dict_adapter import Qwen3MoeStateDictAdapter
from hyper_parallel.models.spec import ModelSpec

__all__ = ["MODEL_SPEC"]

MODEL_SPEC = ModelSpec(name="qwen3_moe", model_cls=Qwen3MoeForCausalLM, config_cls=Qwen3MoeConfig, flavors=FLAVORS,
                       parallelize_fn=parallelize_qwen3_moe, pipelining_fn=pipeline_qwen3_moe,
                       state_dict_adapter=Qwen3MoeStateDictAdapter, loss_fn=Qwen3MoeForCausalLM.loss,
                       hf_architecture="Qwen3MoeForCausalLM")
