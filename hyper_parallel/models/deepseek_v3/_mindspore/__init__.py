# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""DeepSeek-V3 on MindSpore. ``MODEL_SPEC`` is what ``get_model_spec("deepseek_v3", backend="mindspore")`` returns:
the torch model's config class, flavors and Hugging Face adapter, parallelised by TP (MLA entries), EP, FSDP / HSDP
and PP (``parallelize.py``; context parallel refused: MLA). No torch import."""
from hyper_parallel.models.deepseek_v3.args import FLAVORS as _ALL, DeepseekV3Config
from hyper_parallel.models.deepseek_v3.state_dict_adapter import DeepseekV3StateDictAdapter
from hyper_parallel.models.deepseek_v3._mindspore.model import DeepseekV3ForCausalLM
from hyper_parallel.models.deepseek_v3._mindspore.parallelize import parallelize_deepseek_v3, pipeline_deepseek_v3
from hyper_parallel.models.spec import ModelSpec

#: the flavors the MindSpore model builds
FLAVORS = {n: c for n, c in _ALL.items() if not c.num_nextn_predict_layers}

MODEL_SPEC = ModelSpec(name="deepseek_v3", model_cls=DeepseekV3ForCausalLM, config_cls=DeepseekV3Config,
                       flavors=FLAVORS,
                       parallelize_fn=parallelize_deepseek_v3, pipelining_fn=pipeline_deepseek_v3,
                       state_dict_adapter=DeepseekV3StateDictAdapter, loss_fn=DeepseekV3ForCausalLM.loss,
                       hf_architecture="DeepseekV3ForCausalLM", extras={"backend": "mindspore"})

__all__ = ["DeepseekV3ForCausalLM", "DeepseekV3Config", "FLAVORS", "MODEL_SPEC", "parallelize_deepseek_v3",
           "pipeline_deepseek_v3"]
