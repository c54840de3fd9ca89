# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Local stand-ins for the code host (GitCode v5) and Jenkins, served on 127.0.0.1 by stdlib http.server."""
from .server import FakeForge, Scenario

__all__ = ["FakeForge", "Scenario"]
