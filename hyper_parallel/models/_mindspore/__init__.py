# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""MindSpore model helpers: lazy construction and placement-invariant initialisation (``init``)."""
