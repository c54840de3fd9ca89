# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Qwen3.5 (dense): hybrid Gated DeltaNet + gated full attention, with Hugging Face ``Qwen3_5ForCausalLM``
names (the packed Gated DeltaNet tensors held per section, see the adapter). ``MODEL_SPEC`` is what
``hyper_parallel.models.get_model_spec("qwen3_5")`` returns."""
from hyper_parallel.models.qwen3_5.args import FLAVORS, Qwen3_5Config, hybrid_layer_types
from hyper_parallel.models.qwen3_5.model import Qwen3_5ForCausalLM, Qwen3_5TextModel
from hyper_parallel.models.qwen3_5.parallelize import parallelize_qwen3_5, pipeline_qwen3_5
from hyper_parallel.models.qwen3_5.state_dict_adapter import Qwen3_5StateDictAdapter
from hyper_parallel.models.spec import ModelSpec

MODEL_SPEC = ModelSpec(name="qwen3_5", model_cls=Qwen3_5ForCausalLM, config_cls=Qwen3_5Config, flavors=FLAVORS,
                       parallelize_fn=parallelize_qwen3_5, pipelining_fn=pipeline_qwen3_5,
                       state_dict_adapter=Qwen3_5StateDictAdapter, loss_fn=Qwen3_5ForCausalLM.loss,
                       hf_architecture="Qwen3_5ForCausalLM", extras={"cp_load_balance": None})

__all__ = ["FLAVORS", "Qwen3_5Config", "hybrid_layer_types", "Qwen3_5ForCausalLM", "Qwen3_5TextModel",
           "parallelize_qwen3_5", "pipeline_qwen3_5", "Qwen3_5StateDictAdapter", "MODEL_SPEC"]
