# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""One hook runner for every assistant (after-write, before-shell) and for git (commit-msg, pre-push, pre-commit)."""
