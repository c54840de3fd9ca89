# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""MindSpore backend (PyNative; ``mccl`` on CPU, ``hccl`` on Ascend). Imported only when asked for."""
