# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""DeepSeek-V3 (MLA + MoE with shared experts) with Hugging Face ``DeepseekV3ForCausalLM`` names
(experts stacked, see the adapter). ``MODEL_SPEC`` (``torch_spec.py``) is what
``hyper_parallel.models.get_model_spec("deepseek_v3")`` returns; the MindSpore model is ``_mindspore``.
Importing this package imports no framework."""
from typing import TYPE_CHECKING

from hyper_parallel._lazy import lazy_exports
from hyper_parallel.models.deepseek_v3.args import FLAVORS, DeepseekV3Config, deepseek_moe_layer
from hyper_parallel.models.deepseek_v3.state_dict_adapter import DeepseekV3StateDictAdapter

if TYPE_CHECKING:  # static analysers see the lazy names; nothing is imported at run time
    from hyper_parallel.models.deepseek_v3.model import DeepseekV3ForCausalLM
    from hyper_parallel.models.deepseek_v3.parallelize import (deepseek_attention_tp_plan, parallelize_deepseek_v3,
                                                              pipeline_deepseek_v3)
    from hyper_parallel.models.deepseek_v3.torch_spec import MODEL_SPEC

_P = "hyper_parallel.models.deepseek_v3.parallelize"
_LAZY = {"DeepseekV3ForCausalLM": "hyper_parallel.models.deepseek_v3.model", "deepseek_attention_tp_plan": _P,
         "parallelize_deepseek_v3": _P, "pipeline_deepseek_v3": _P,
         "MODEL_SPEC": "hyper_parallel.models.deepseek_v3.torch_spec"}

__all__ = ["FLAVORS", "DeepseekV3Config", "deepseek_moe_layer", "DeepseekV3StateDictAdapter", *sorted(_LAZY)]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
