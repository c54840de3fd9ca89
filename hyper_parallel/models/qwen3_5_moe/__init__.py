# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Qwen3.5-MoE: the Qwen3.5 hybrid decoder with ``hyper_parallel.moe`` blocks and a gated shared expert, with
Hugging Face ``Qwen3_5MoeForCausalLM`` names (experts stacked, see the adapter). ``MODEL_SPEC`` is what
``hyper_parallel.models.get_model_spec("qwen3_5_moe")`` returns."""
from hyper_parallel.models.qwen3_5_moe.args import FLAVORS, Qwen3_5MoeConfig, qwen3_5_moe_layer
from hyper_parallel.models.qwen3_5_moe.model import Qwen3_5MoeForCausalLM
from hyper_parallel.models.qwen3_5_moe.parallelize import parallelize_qwen3_5_moe, pipeline_qwen3_5_moe
from hyper_parallel.models.qwen3_5_moe.state_dict_adapter import Qwen3_5MoeStateDictAdapter
from hyper_parallel.models.spec import ModelSpec

MODEL_SPEC = ModelSpec(name="qwen3_5_moe", model_cls=Qwen3_5MoeForCausalLM, config_cls=Qwen3_5MoeConfig,
                       flavors=FLAVORS, parallelize_fn=parallelize_qwen3_5_moe, pipelining_fn=pipeline_qwen3_5_moe,
                       state_dict_adapter=Qwen3_5MoeStateDictAdapter, loss_fn=Qwen3_5MoeForCausalLM.loss,
                       hf_architecture="Qwen3_5MoeForCausalLM", extras={"cp_load_balance": None})

__all__ = ["FLAVORS", "Qwen3_5MoeConfig", "qwen3_5_moe_layer", "Qwen3_5MoeForCausalLM", "parallelize_qwen3_5_moe",
           "pipeline_qwen3_5_moe", "Qwen3_5MoeStateDictAdapter", "MODEL_SPEC"]
