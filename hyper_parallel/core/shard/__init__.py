# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Distributed-op system: YAML registry of op rules and the three-stage dispatch."""
