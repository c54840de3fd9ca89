# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Llama 3: a Llama-style decoder with Hugging Face ``LlamaForCausalLM`` parameter names.

``MODEL_SPEC`` is what ``hyper_parallel.models.get_model_spec("llama3")`` returns.
"""
from hyper_parallel.models.llama3.args import LlamaConfig, TINY_CONFIGS
from hyper_parallel.models.llama3.model import LlamaForCausalLM
from hyper_parallel.models.llama3.parallelize import (llama_cp_plan, llama_moe_tp_plan, llama_tp_plan,
                                                     parallelize_llama, parallelize_llama3, parallelize_llama_moe,
                                                     pipeline_llama, pipeline_llama3)
from hyper_parallel.models.llama3.state_dict_adapter import LlamaStateDictAdapter
from hyper_parallel.models.spec import ModelSpec

MODEL_SPEC = ModelSpec(name="llama3", model_cls=LlamaForCausalLM, config_cls=LlamaConfig, flavors=TINY_CONFIGS,
                       parallelize_fn=parallelize_llama3, pipelining_fn=pipeline_llama3,
                       state_dict_adapter=LlamaStateDictAdapter, loss_fn=LlamaForCausalLM.loss,
                       hf_architecture="LlamaForCausalLM")

__all__ = ["LlamaConfig", "LlamaForCausalLM", "TINY_CONFIGS", "llama_cp_plan", "llama_moe_tp_plan", "llama_tp_plan",
           "parallelize_llama", "parallelize_llama3", "parallelize_llama_moe", "pipeline_llama", "pipeline_llama3",
           "LlamaStateDictAdapter", "MODEL_SPEC"]
