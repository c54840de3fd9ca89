# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The MindSpore implementation of ``hyper_parallel.optim`` (imports mindspore at module level)."""
