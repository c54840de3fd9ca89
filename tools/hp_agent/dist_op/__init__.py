# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The distributed-op pipeline behind ``hp-agent dist-op``: analyze (probe -> plan), confirm, dev
(scaffold -> UT/ST -> report) and verify (probe vs registered rules).

Nothing here imports torch at module level: the CLI loads every command group at start-up.
"""
