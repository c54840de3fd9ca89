# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The one place the version lives: ``hyper_parallel.__version__``, the package metadata (``setup.py`` reads
this file), ``hp-train --version`` and ``hp-agent --version`` all come from here."""

__version__ = "1.0.0"
