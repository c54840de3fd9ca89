# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The torch registry entry of Qwen3 (``get_model_spec("qwen3")``)."""
from hyper_parallel.models.qwen3.args import FLAVORS, Qwen3Config
from hyper_parallel.models.qwen3.model import Qwen3ForCausalLM
from hyper_parallel.models.qwen3.parallelize import parallelize_qwen3, pipeline_qwen3
from hyper_parallel.models.qwen3.state_dict_adapter import Qwen3StateDictAdapter
from hyper_parallel.models.spec import ModelSpec

__all__ = ["MODEL_SPEC"]

MODEL_SPEC = ModelSpec(name="qwen3", model_cls=Qwen3ForCausalLM, config_cls=Qwen3Config, flavors=FLAVORS,
                       parallelize_fn=parallelize_qwen3, pipelining_fn=pipeline_qwen3,
                       state_dict_adapter=Qwen3StateDictAdapter, loss_fn=Qwen3ForCausalLM.loss,
                       hf_architecture="Qwen3ForCausalLM")
