# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""hp_agent: the agent layer of hyper-parallel (console script ``hp-agent``)."""

__version__ = "0.1.0"
