# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Pieces the command families share, below all of them: the hook protocol's event and answer shapes
(:mod:`.protocol`), Cursor's pending after-write notes (:mod:`.pending`) and the shapes and helpers of
generated assistant files (:mod:`.generated`). Nothing here imports a command family (``hooks``, ``sync``,
``assistants``, ...), so ``assistants`` -> ``shared`` <- ``hooks``/``sync`` has no circle; the import-graph
test (tests/ut/test_import_graph.py) checks the package-level order too.
"""
