# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The PyTorch backend (imported only when the torch backend is used).

Importing the package imports the dispatcher and the cross-mesh mover, which register themselves with the
DTensor class (the DTensor module imports neither)."""
from hyper_parallel.platform.torch import cross_mesh as _cross_mesh  # noqa: F401  pylint: disable=unused-import
from hyper_parallel.platform.torch import dispatch as _dispatch  # noqa: F401  pylint: disable=unused-import
