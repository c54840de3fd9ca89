# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Suite-wide pytest configuration.

* The repository root is put on ``sys.path`` so that test modules import as ``tests.<dir>.<module>``
  (every test directory is a package) and ``hyper_parallel`` imports from the working tree; the
  multi-rank worker processes inherit this path and import test modules the same way.
* Tests decorated with :func:`hyper_parallel.testing.multi_rank` get the ``st`` marker.
* The multi-rank worker pools are shut down when the session ends (``atexit`` covers other exits).
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

_HARNESS_MODULE = "hyper_parallel.testing.multiprocess"


def pytest_collection_modifyitems(config, items):  # pylint: disable=unused-argument
    """Mark every multi-rank test ``st`` so that ``-m "not st"`` deselects them."""
    harness = sys.modules.get(_HARNESS_MODULE)
    if harness is None:
        return
    import pytest  # pylint: disable=import-outside-toplevel
    for item in items:
        if getattr(getattr(item, "function", None), "_hp_multi_rank_original", None) is not None:
            item.add_marker(pytest.mark.st)


def pytest_sessionfinish(session, exitstatus):  # pylint: disable=unused-argument
    """Stop the worker pools (only if some test used them: importing the harness is not forced)."""
    harness = sys.modules.get(_HARNESS_MODULE)
    if harness is not None:
        harness.shutdown_pools()
