# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Which branches are protected (no force push, no delete): ``main``, ``master``, ``release/*``."""
from __future__ import annotations

import fnmatch

PROTECTED = ("main", "master", "release/*")


def is_protected(branch: str, protected: tuple[str, ...] = PROTECTED) -> bool:
    """True when ``branch`` (short name) matches a protected pattern."""
    return any(fnmatch.fnmatchcase(branch, pat) for pat in protected)
