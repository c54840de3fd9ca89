# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Declarative parallelism: shard_module, custom_shard, DFunction, parallelize_value_and_grad."""
from hyper_parallel.shard.api import DFunction, custom_shard, parallelize_value_and_grad, shard_module

__all__ = ["DFunction", "custom_shard", "parallelize_value_and_grad", "shard_module"]
