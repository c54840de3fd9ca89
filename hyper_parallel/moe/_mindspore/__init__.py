# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""MindSpore MoE layers and expert parallelism (see ``moe.py`` and ``docs/moe.md``)."""
from hyper_parallel.moe._mindspore.moe import (FeedForward, GroupedExperts, MoE, TokenChoiceTopKRouter, expert_parallel,
                                               update_expert_bias)

# the names ``hyper_parallel.moe`` exports them under (its plain names are the torch classes)
MindSporeMoE = MoE
MindSporeTokenChoiceTopKRouter = TokenChoiceTopKRouter
MindSporeGroupedExperts = GroupedExperts
MindSporeFeedForward = FeedForward

__all__ = ["FeedForward", "GroupedExperts", "MoE", "TokenChoiceTopKRouter", "expert_parallel", "update_expert_bias",
           "MindSporeMoE", "MindSporeTokenChoiceTopKRouter", "MindSporeGroupedExperts", "MindSporeFeedForward"]
