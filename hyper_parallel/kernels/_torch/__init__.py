# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""torch implementations of the library's custom ops (torch-function aware, so DTensors dispatch them)."""
