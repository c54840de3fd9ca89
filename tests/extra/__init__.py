# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Heavier checks outside `make test`, each behind its own make target (see the README)."""
