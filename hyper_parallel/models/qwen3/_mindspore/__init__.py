# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Qwen3 (dense) on MindSpore. ``MODEL_SPEC`` is what ``get_model_spec("qwen3", backend="mindspore")`` returns:
the torch model's config class, flavors and Hugging Face adapter, parallelised by FSDP / HSDP. No torch import."""
from hyper_parallel.models.llama3._mindspore.parallelize import parallelize_fsdp_only
from hyper_parallel.models.qwen3.args import FLAVORS as _ALL, Qwen3Config
from hyper_parallel.models.qwen3.state_dict_adapter import Qwen3StateDictAdapter
from hyper_parallel.models.qwen3._mindspore.model import Qwen3ForCausalLM
from hyper_parallel.models.spec import ModelSpec

#: the flavors the MindSpore model builds
FLAVORS = dict(_ALL)


def parallelize_qwen3(model, world_mesh, parallel_dims, **options):
    """The MindSpore ``parallelize_fn``: FSDP / HSDP per decoder layer and on the root
    (:func:`~hyper_parallel.models.llama3._mindspore.parallelize.parallelize_fsdp_only`)."""
    return parallelize_fsdp_only(model, world_mesh, parallel_dims, fn_name="parallelize_qwen3",
                                 **options)


MODEL_SPEC = ModelSpec(name="qwen3", model_cls=Qwen3ForCausalLM, config_cls=Qwen3Config, flavors=FLAVORS,
                       parallelize_fn=parallelize_qwen3, pipelining_fn=None,
                       state_dict_adapter=Qwen3StateDictAdapter, loss_fn=Qwen3ForCausalLM.loss,
                       hf_architecture="Qwen3ForCausalLM", extras={"backend": "mindspore"})

__all__ = ["Qwen3ForCausalLM", "Qwen3Config", "FLAVORS", "MODEL_SPEC", "parallelize_qwen3"]
