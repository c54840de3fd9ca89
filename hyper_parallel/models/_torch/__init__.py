# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""torch implementations shared by the models (meta-device construction, parameter initialisation)."""
