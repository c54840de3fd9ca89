# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Subcommand groups of hp-agent: each module defines ``cli_group``."""
