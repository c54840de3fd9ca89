# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Qwen3 (dense) on MindSpore. ``MODEL_SPEC`` is what ``get_model_spec("qwen3", backend="mindspore")`` returns:
the torch model's config class, flavors and Hugging Face adapter, parallelised by TP (+ SP, QK-norm entries), CP,
FSDP / HSDP and PP (Llama 3's MindSpore plan and stage split). No torch import."""
from hyper_parallel.models.llama3._mindspore.parallelize import parallelize_llama3
from hyper_parallel.models.llama3._mindspore.pipeline import pipeline_llama3
from hyper_parallel.models.qwen3.args import FLAVORS as _ALL, Qwen3Config
from hyper_parallel.models.qwen3.state_dict_adapter import Qwen3StateDictAdapter
from hyper_parallel.models.qwen3._mindspore.model import Qwen3ForCausalLM
from hyper_parallel.models.spec import ModelSpec

#: the flavors the MindSpore model builds
FLAVORS = dict(_ALL)


def parallelize_qwen3(model, world_mesh, parallel_dims, **options):
    """The MindSpore ``parallelize_fn``: :func:`~hyper_parallel.models.llama3._mindspore.parallelize.
    parallelize_llama3` (TP + SP with the QK-norm entries and tied embeddings, FSDP / HSDP)."""
    options.setdefault("fn_name", "parallelize_qwen3")
    return parallelize_llama3(model, world_mesh, parallel_dims, **options)


def pipeline_qwen3(model, world_mesh, parallel_dims, **kwargs):
    """The MindSpore ``pipelining_fn``: Llama 3's stage split (:func:`~hyper_parallel.models.llama3._mindspore.
    pipeline.pipeline_llama3`)."""
    return pipeline_llama3(model, world_mesh, parallel_dims, **kwargs)


MODEL_SPEC = ModelSpec(name="qwen3", model_cls=Qwen3ForCausalLM, config_cls=Qwen3Config, flavors=FLAVORS,
                       parallelize_fn=parallelize_qwen3, pipelining_fn=pipeline_qwen3,
                       state_dict_adapter=Qwen3StateDictAdapter, loss_fn=Qwen3ForCausalLM.loss,
                       hf_architecture="Qwen3ForCausalLM", extras={"backend": "mindspore"})

__all__ = ["Qwen3ForCausalLM", "Qwen3Config", "FLAVORS", "MODEL_SPEC", "parallelize_qwen3", "pipeline_qwen3"]
