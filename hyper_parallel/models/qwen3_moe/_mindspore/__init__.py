# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Qwen3-MoE on MindSpore. ``MODEL_SPEC`` is what ``get_model_spec("qwen3_moe", backend="mindspore")`` returns:
the torch model's config class, flavors and Hugging Face adapter, parallelised by FSDP / HSDP. No torch import."""
from hyper_parallel.models.llama3._mindspore.parallelize import parallelize_fsdp_only
from hyper_parallel.models.qwen3_moe.args import FLAVORS as _ALL, Qwen3MoeConfig
from hyper_parallel.models.qwen3_moe.state_dict_adapter import Qwen3MoeStateDictAdapter
from hyper_parallel.models.qwen3_moe._mindspore.model import Qwen3MoeForCausalLM
from hyper_parallel.models.spec import ModelSpec

#: the flavors the MindSpore model builds
FLAVORS = dict(_ALL)


def parallelize_qwen3_moe(model, world_mesh, parallel_dims, **options):
    """The MindSpore ``parallelize_fn``: FSDP / HSDP per decoder layer and on the root
    (:func:`~hyper_parallel.models.llama3._mindspore.parallelize.parallelize_fsdp_only`)."""
    return parallelize_fsdp_only(model, world_mesh, parallel_dims, fn_name="parallelize_qwen3_moe",
                                 **options)


MODEL_SPEC = ModelSpec(name="qwen3_moe", model_cls=Qwen3MoeForCausalLM, config_cls=Qwen3MoeConfig, flavors=FLAVORS,
                       parallelize_fn=parallelize_qwen3_moe, pipelining_fn=None,
                       state_dict_adapter=Qwen3MoeStateDictAdapter, loss_fn=Qwen3MoeForCausalLM.loss,
                       hf_architecture="Qwen3MoeForCausalLM", extras={"backend": "mindspore"})

__all__ = ["Qwen3MoeForCausalLM", "Qwen3MoeConfig", "FLAVORS", "MODEL_SPEC", "parallelize_qwen3_moe"]
