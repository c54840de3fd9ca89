# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The gate: a declarative stage list (``ci/stages.yaml``) run locally or by ``ci/Jenkinsfile``."""
