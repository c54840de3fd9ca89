# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Hugging Face ``Qwen3ForCausalLM`` adapter (same names as ours, plus the QK-norm keys)."""
from __future__ import annotations

from hyper_parallel.models.llama3.state_dict_adapter import LlamaStateDictAdapter
from hyper_parallel.models.qwen3.args import Qwen3Config

__all__ = ["Qwen3StateDictAdapter"]


class Qwen3StateDictAdapter(LlamaStateDictAdapter):
    """Qwen3 <-> Hugging Face ``Qwen3ForCausalLM``."""

    hf_architecture = "Qwen3ForCausalLM"
    hf_model_type = "qwen3"
    config_cls = Qwen3Config

    def _hf_config(self):
        out = super()._hf_config()
        out.update(use_sliding_window=False, sliding_window=None, max_window_layers=self.model_config.num_hidden_layers)
        return out
