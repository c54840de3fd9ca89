# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""MindSpore backend (PyNative; ``mccl`` on CPU, ``hccl`` on Ascend). Imported only when asked for.

Importing the package imports the dispatcher, which registers itself with the DTensor class, and the
MindSpore expands of the rules."""
from hyper_parallel.platform.mindspore import dispatch as _dispatch  # noqa: F401  pylint: disable=unused-import
from hyper_parallel.platform.mindspore import expands as _expands  # noqa: F401  pylint: disable=unused-import
