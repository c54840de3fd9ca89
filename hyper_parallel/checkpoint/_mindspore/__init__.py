# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The MindSpore implementation of ``hyper_parallel.checkpoint`` (the same on-disk format as torch's)."""
