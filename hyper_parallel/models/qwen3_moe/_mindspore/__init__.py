# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Qwen3-MoE on MindSpore. ``MODEL_SPEC`` is what ``get_model_spec("qwen3_moe", backend="mindspore")`` returns:
the torch model's config class, flavors and Hugging Face adapter, parallelised by TP (+ SP, QK-norm entries), EP,
FSDP / HSDP and PP (Llama 3's MindSpore plan and stage split; CP refused for MoE models, as on torch). No torch
import."""
from hyper_parallel.models.llama3._mindspore.parallelize import parallelize_llama3
from hyper_parallel.models.llama3._mindspore.pipeline import pipeline_llama3
from hyper_parallel.models.qwen3_moe.args import FLAVORS as _ALL, Qwen3MoeConfig
from hyper_parallel.models.qwen3_moe.state_dict_adapter import Qwen3MoeStateDictAdapter
from hyper_parallel.models.qwen3_moe._mindspore.model import Qwen3MoeForCausalLM
from hyper_parallel.models.spec import ModelSpec

#: the flavors the MindSpore model builds
FLAVORS = dict(_ALL)


def parallelize_qwen3_moe(model, world_mesh, parallel_dims, **options):
    """The MindSpore ``parallelize_fn``: :func:`~hyper_parallel.models.llama3._mindspore.parallelize.
    parallelize_llama3` (TP + SP with the QK-norm entries and tied embeddings, EP of the experts, FSDP / HSDP)."""
    options.setdefault("fn_name", "parallelize_qwen3_moe")
    return parallelize_llama3(model, world_mesh, parallel_dims, **options)


def pipeline_qwen3_moe(model, world_mesh, parallel_dims, **kwargs):
    """The MindSpore ``pipelining_fn``: Llama 3's stage split (:func:`~hyper_parallel.models.llama3._mindspore.
    pipeline.pipeline_llama3`)."""
    return pipeline_llama3(model, world_mesh, parallel_dims, **kwargs)


MODEL_SPEC = ModelSpec(name="qwen3_moe", model_cls=Qwen3MoeForCausalLM, config_cls=Qwen3MoeConfig, flavors=FLAVORS,
                       parallelize_fn=parallelize_qwen3_moe, pipelining_fn=pipeline_qwen3_moe,
                       state_dict_adapter=Qwen3MoeStateDictAdapter, loss_fn=Qwen3MoeForCausalLM.loss,
                       hf_architecture="Qwen3MoeForCausalLM", extras={"backend": "mindspore"})

__all__ = ["Qwen3MoeForCausalLM", "Qwen3MoeConfig", "FLAVORS", "MODEL_SPEC", "parallelize_qwen3_moe",
           "pipeline_qwen3_moe"]
