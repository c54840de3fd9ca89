# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The MindSpore trainer backend (``[job] backend = "mindspore"``): ``backend.py`` (the backend, imports
MindSpore) and ``launch.py`` (config checks and the cluster launch; no MindSpore import at module level)."""
