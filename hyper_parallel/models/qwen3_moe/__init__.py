# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Qwen3-MoE with Hugging Face ``Qwen3MoeForCausalLM`` names (experts stacked, see the adapter).
``MODEL_SPEC`` (``torch_spec.py``) is what ``hyper_parallel.models.get_model_spec("qwen3_moe")`` returns; the
MindSpore model is ``_mindspore``. Importing this package imports no framework."""
from typing import TYPE_CHECKING

from hyper_parallel._lazy import lazy_exports
from hyper_parallel.models.qwen3_moe.args import FLAVORS, Qwen3MoeConfig, qwen3_moe_layer
from hyper_parallel.models.qwen3_moe.state_dict_adapter import Qwen3MoeStateDictAdapter

if TYPE_CHECKING:  # static analysers see the lazy names; nothing is imported at run time
    from hyper_parallel.models.qwen3_moe.model import Qwen3MoeForCausalLM
    from hyper_parallel.models.qwen3_moe.parallelize import parallelize_qwen3_moe, pipeline_qwen3_moe
    from hyper_parallel.models.qwen3_moe.torch_spec import MODEL_SPEC

_P = "hyper_parallel.models.qwen3_moe.parallelize"
_LAZY = {"Qwen3MoeForCausalLM": "hyper_parallel.models.qwen3_moe.model", "parallelize_qwen3_moe": _P,
         "pipeline_qwen3_moe": _P, "MODEL_SPEC": "hyper_parallel.models.qwen3_moe.torch_spec"}

__all__ = ["FLAVORS", "Qwen3MoeConfig", "qwen3_moe_layer", "Qwen3MoeStateDictAdapter", *sorted(_LAZY)]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
