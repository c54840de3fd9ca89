# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""torch side of auto-parallel: calibration (compute and gloo speeds) and measured training runs."""
