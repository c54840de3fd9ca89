# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""PyTorch implementation of the MoE layers, token dispatchers and expert-parallel styles."""
