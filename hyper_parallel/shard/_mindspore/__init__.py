# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""MindSpore implementation of ``shard_module`` on ``nn.Cell`` models."""
