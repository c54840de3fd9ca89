# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Models. Model code never mentions a mesh: each model folder has ``model.py`` (plain torch) and
``parallelize.py`` (the plans that parallelise it)."""
