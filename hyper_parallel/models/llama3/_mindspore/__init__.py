# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Llama 3 on MindSpore: the model (``model.py``), its TP + CP + FSDP plan (``parallelize.py``) and its pipeline
split (``pipeline.py``).

``MODEL_SPEC`` is what ``hyper_parallel.models.get_model_spec("llama3", backend="mindspore")`` returns: the
same config class and flavors as the torch model, the same Hugging Face adapter. No torch import.
"""
from hyper_parallel.models.llama3.args import TINY_CONFIGS, LlamaConfig
from hyper_parallel.models.llama3.state_dict_adapter import LlamaStateDictAdapter
from hyper_parallel.models.llama3._mindspore.model import LlamaForCausalLM, cross_entropy
from hyper_parallel.models.llama3._mindspore.parallelize import parallelize_llama3
from hyper_parallel.models.llama3._mindspore.pipeline import pipeline_llama3
from hyper_parallel.models.spec import ModelSpec

#: the flavors the MindSpore model builds (all of the torch model's)
FLAVORS = dict(TINY_CONFIGS)

MODEL_SPEC = ModelSpec(name="llama3", model_cls=LlamaForCausalLM, config_cls=LlamaConfig, flavors=FLAVORS,
                       parallelize_fn=parallelize_llama3, pipelining_fn=pipeline_llama3,
                       state_dict_adapter=LlamaStateDictAdapter, loss_fn=LlamaForCausalLM.loss,
                       hf_architecture="LlamaForCausalLM", extras={"backend": "mindspore"})

__all__ = ["LlamaConfig", "LlamaForCausalLM", "FLAVORS", "MODEL_SPEC", "parallelize_llama3", "pipeline_llama3",
           "cross_entropy"]
