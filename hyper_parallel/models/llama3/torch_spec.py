# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The torch registry entry of Llama 3 (``get_model_spec("llama3")``)."""
from hyper_parallel.models.llama3.args import LlamaConfig, TINY_CONFIGS
from hyper_parallel.models.llama3.model import LlamaForCausalLM
from hyper_parallel.models.llama3.parallelize import parallelize_llama3, pipeline_llama3
from hyper_parallel.models.llama3.state_dict_adapter import LlamaStateDictAdapter
from hyper_parallel.models.spec import ModelSpec

__all__ = ["MODEL_SPEC"]

MODEL_SPEC = ModelSpec(name="llama3", model_cls=LlamaForCausalLM, config_cls=LlamaConfig, flavors=TINY_CONFIGS,
                       parallelize_fn=parallelize_llama3, pipelining_fn=pipeline_llama3,
                       state_dict_adapter=LlamaStateDictAdapter, loss_fn=LlamaForCausalLM.loss,
                       hf_architecture="LlamaForCausalLM")
