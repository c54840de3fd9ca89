# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""MindSpore implementations of the library's fused ops: the Python references on MindSpore tensors (no C++
MindSpore custom ops on CPU)."""
