# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``hp-agent sync``: generate every assistant's native files from ``.agent/`` and detect drift."""
