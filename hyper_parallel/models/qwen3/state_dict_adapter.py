# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Hugging Face ``Qwen3ForCausalLM`` adapter (same names as ours, plus the QK-norm keys)."""
from __future__ import annotations

import dataclasses

from hyper_parallel.models.llama3.state_dict_adapter import LLAMA_FIELDS, LlamaStateDictAdapter
from hyper_parallel.models.qwen3.args import Qwen3Config

__all__ = ["Qwen3StateDictAdapter", "QWEN3_FIELDS"]

_NO_SLIDING = "sliding-window attention is not implemented (the model would attend over the full context " \
              "and its logits differ); set use_sliding_window=false"
#: Qwen3's ``config.json`` fields: Llama's plus the sliding-window switches, refused when on
QWEN3_FIELDS = dataclasses.replace(
    LLAMA_FIELDS,
    irrelevant={"sliding_window": "read only with use_sliding_window, which is refused",
                "max_window_layers": "read only with use_sliding_window, which is refused"},
    refused={**LLAMA_FIELDS.refused, "use_sliding_window": (lambda v: not v, _NO_SLIDING),
             "layer_types": (lambda v: all(t == "full_attention" for t in (v or ())), _NO_SLIDING)})


class Qwen3StateDictAdapter(LlamaStateDictAdapter):
    """Qwen3 <-> Hugging Face ``Qwen3ForCausalLM``."""

    hf_architecture = "Qwen3ForCausalLM"
    hf_model_type = "qwen3"
    config_cls = Qwen3Config
    hf_fields = QWEN3_FIELDS

    def _hf_config(self):
        out = super()._hf_config()
        out.update(use_sliding_window=False, sliding_window=None, max_window_layers=self.model_config.num_hidden_layers)
        return out
