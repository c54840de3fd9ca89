# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""A small Llama-style decoder with HF-compatible parameter names."""
from hyper_parallel.models.llama.model import LlamaConfig, LlamaForCausalLM, TINY_CONFIGS
from hyper_parallel.models.llama.parallelize import (llama_cp_plan, llama_moe_tp_plan, llama_tp_plan, parallelize_llama,
                                                    parallelize_llama_moe, pipeline_llama)
from hyper_parallel.models.llama.state_dict_adapter import LlamaStateDictAdapter

__all__ = ["LlamaConfig", "LlamaForCausalLM", "TINY_CONFIGS", "llama_cp_plan", "llama_moe_tp_plan", "llama_tp_plan",
           "parallelize_llama", "parallelize_llama_moe", "pipeline_llama", "LlamaStateDictAdapter"]
