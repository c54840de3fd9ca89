# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The torch registry entry of DeepSeek-V3 (``get_model_spec("deepseek_v3")``)."""
from hyper_parallel.models.deepseek_v3.args import FLAVORS, DeepseekV3Config
from hyper_parallel.models.deepseek_v3.model import DeepseekV3ForCausalLM
from hyper_parallel.models.deepseek_v3.parallelize import parallelize_deepseek_v3, pipeline_deepseek_v3
from hyper_parallel.models.deepseek_v3.state_dict_adapter import DeepseekV3StateDictAdapter
from hyper_parallel.models.spec import ModelSpec

__all__ = ["MODEL_SPEC"]

MODEL_SPEC = ModelSpec(name="deepseek_v3", model_cls=DeepseekV3ForCausalLM, config_cls=DeepseekV3Config,
                       flavors=FLAVORS, parallelize_fn=parallelize_deepseek_v3, pipelining_fn=pipeline_deepseek_v3,
                       state_dict_adapter=DeepseekV3StateDictAdapter, loss_fn=DeepseekV3ForCausalLM.loss,
                       hf_architecture="DeepseekV3ForCausalLM")
