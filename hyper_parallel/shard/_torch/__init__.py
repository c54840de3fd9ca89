# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""torch implementation of declarative parallelism (``module``: shard_module; ``functions``: custom_shard,
DFunction, parallelize_value_and_grad)."""
