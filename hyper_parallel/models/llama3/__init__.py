# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Llama 3: a Llama-style decoder with Hugging Face ``LlamaForCausalLM`` parameter names.

``MODEL_SPEC`` (``torch_spec.py``) is what ``hyper_parallel.models.get_model_spec("llama3")`` returns; the
MindSpore model is ``_mindspore`` (``get_model_spec("llama3", backend="mindspore")``). Importing this package
imports no framework: the config and the Hugging Face adapter are pure, the torch names load on first use.
"""
from typing import TYPE_CHECKING

from hyper_parallel._lazy import lazy_exports
from hyper_parallel.models.llama3.args import LlamaConfig, TINY_CONFIGS
from hyper_parallel.models.llama3.state_dict_adapter import LlamaStateDictAdapter

if TYPE_CHECKING:  # static analysers see the lazy names; nothing is imported at run time
    from hyper_parallel.models.llama3.model import LlamaForCausalLM
    from hyper_parallel.models.llama3.parallelize import (llama_cp_plan, llama_moe_tp_plan, llama_tp_plan,
                                                         parallelize_llama, parallelize_llama3,
                                                         parallelize_llama_moe, pipeline_llama, pipeline_llama3)
    from hyper_parallel.models.llama3.torch_spec import MODEL_SPEC

_P = "hyper_parallel.models.llama3.parallelize"
_LAZY = {"LlamaForCausalLM": "hyper_parallel.models.llama3.model",
         "MODEL_SPEC": "hyper_parallel.models.llama3.torch_spec",
         **{n: _P for n in ("llama_cp_plan", "llama_moe_tp_plan", "llama_tp_plan", "parallelize_llama",
                            "parallelize_llama3", "parallelize_llama_moe", "pipeline_llama", "pipeline_llama3")}}

__all__ = ["LlamaConfig", "TINY_CONFIGS", "LlamaStateDictAdapter", *sorted(_LAZY)]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
