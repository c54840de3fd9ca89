# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""hp_agent: the agent layer of hyper-parallel (console script ``hp-agent``)."""

from hyper_parallel._version import __version__  # one version for the distribution

__all__ = ["__version__"]
