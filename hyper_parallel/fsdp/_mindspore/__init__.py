# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""MindSpore implementation of ``hyper_parallel.fsdp`` (``fully_shard`` on ``nn.Cell``; see ``fully_shard.py``)."""
