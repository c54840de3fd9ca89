# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``python -m hp_agent``."""
import sys

from hp_agent.cli import main

sys.exit(main())
