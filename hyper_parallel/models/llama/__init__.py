# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Former home of the tiny Llama, now ``hyper_parallel.models.llama3``: this package re-exports its
names so imports written before the move keep working (``hyper_parallel.models.llama.model`` etc.
are aliases of the ``llama3`` modules). New code imports ``hyper_parallel.models.llama3``."""
import sys

from hyper_parallel.models.llama3 import (LlamaConfig, LlamaForCausalLM, LlamaStateDictAdapter, TINY_CONFIGS,
                                         llama_cp_plan, llama_moe_tp_plan, llama_tp_plan, parallelize_llama,
                                         parallelize_llama_moe, pipeline_llama)
from hyper_parallel.models.llama3 import model, parallelize, state_dict_adapter

for _sub in (model, parallelize, state_dict_adapter):
    sys.modules[f"{__name__}.{_sub.__name__.rsplit('.', 1)[-1]}"] = _sub

__all__ = ["LlamaConfig", "LlamaForCausalLM", "TINY_CONFIGS", "llama_cp_plan", "llama_moe_tp_plan", "llama_tp_plan",
           "parallelize_llama", "parallelize_llama_moe", "pipeline_llama", "LlamaStateDictAdapter"]
