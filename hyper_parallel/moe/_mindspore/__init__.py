# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""MindSpore MoE layers and expert parallelism (see ``moe.py`` and ``docs/moe.md``)."""
from hyper_parallel.moe._mindspore.moe import (FeedForward, GroupedExperts, MoE, TokenChoiceTopKRouter, expert_parallel,
                                               update_expert_bias)

__all__ = ["FeedForward", "GroupedExperts", "MoE", "TokenChoiceTopKRouter", "expert_parallel", "update_expert_bias"]
