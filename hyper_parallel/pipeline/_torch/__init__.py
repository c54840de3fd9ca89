# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The torch runtime of the pipeline: ``PipelineStage`` and the dx/dw split."""
