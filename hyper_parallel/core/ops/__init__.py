# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The distributed-op system (backend-free): the YAML registry (``registry``, ``yaml/``), the rule API
(``rule``), rule classes by op family (``rules/``), strict mode (``strict``) and the dispatch helpers the
backends' dispatchers share (``dispatch``)."""
