# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Qwen3-VL (dense): vision tower + MRoPE Qwen3 decoder with DeepStack, with Hugging Face
``Qwen3VLForConditionalGeneration`` names; ``config_from_hf`` / ``config_to_hf`` map the configuration."""
from hyper_parallel.models.qwen3_vl.args import FLAVORS, Qwen3VLConfig, Qwen3VLVisionConfig
from hyper_parallel.models.qwen3_vl.model import Qwen3VLForConditionalGeneration, rope_index
from hyper_parallel.models.qwen3_vl.state_dict_adapter import config_from_hf, config_to_hf

__all__ = ["FLAVORS", "Qwen3VLConfig", "Qwen3VLVisionConfig", "Qwen3VLForConditionalGeneration", "rope_index",
           "config_from_hf", "config_to_hf"]
