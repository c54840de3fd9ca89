# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Rule classes, one module per op family (pure Python; expand methods import the framework lazily)."""
