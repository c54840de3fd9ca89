# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""autogit: the safe commit / PR / history-rewrite flow behind ``hp-agent git``.

Invariants: nothing in the working tree is ever discarded; every history rewrite first creates
``backup/<branch>/<UTC timestamp>``; pushes that replace history use ``--force-with-lease=<ref>:<sha>``
and never target a protected branch; tokens never reach any output (see :mod:`hp_agent.redact`).
"""
