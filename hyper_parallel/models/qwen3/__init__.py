# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Qwen3 (dense) with Hugging Face ``Qwen3ForCausalLM`` names. ``MODEL_SPEC`` (``torch_spec.py``) is what
``hyper_parallel.models.get_model_spec("qwen3")`` returns; the MindSpore model is ``_mindspore``. Importing this
package imports no framework."""
from typing import TYPE_CHECKING

from hyper_parallel._lazy import lazy_exports
from hyper_parallel.models.qwen3.args import FLAVORS, Qwen3Config
from hyper_parallel.models.qwen3.state_dict_adapter import Qwen3StateDictAdapter

if TYPE_CHECKING:  # static analysers see the lazy names; nothing is imported at run time
    from hyper_parallel.models.qwen3.model import Qwen3ForCausalLM
    from hyper_parallel.models.qwen3.parallelize import parallelize_qwen3, pipeline_qwen3
    from hyper_parallel.models.qwen3.torch_spec import MODEL_SPEC

_P = "hyper_parallel.models.qwen3.parallelize"
_LAZY = {"Qwen3ForCausalLM": "hyper_parallel.models.qwen3.model", "parallelize_qwen3": _P, "pipeline_qwen3": _P,
         "MODEL_SPEC": "hyper_parallel.models.qwen3.torch_spec"}

__all__ = ["FLAVORS", "Qwen3Config", "Qwen3StateDictAdapter", *sorted(_LAZY)]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
