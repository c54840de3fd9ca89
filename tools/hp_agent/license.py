# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The one place that defines this project's license header.

The style hook inserts it, the gate checks it, and autogit updates its year; all of them read it from here.
"""
from __future__ import annotations

import datetime as _dt
import re

HOLDER = "The hyper-parallel Authors"
SPDX = "Apache-2.0"
_TEMPLATE = "# Copyright {year} " + HOLDER + ". All rights reserved.\n# SPDX-License-Identifier: " + SPDX + "\n"

#: Matches the first header line of this project for any year or year range ("2025" or "2025-2026").
HEADER_RE = re.compile(r"^# Copyright (\d{4})(?:-(\d{4}))? " + re.escape(HOLDER) + r"\. All rights reserved\.$")
SPDX_LINE = "# SPDX-License-Identifier: " + SPDX


def license_header(year: int | None = None) -> str:
    """Return the two-line header (with trailing newline) for ``year`` (default: the current UTC year)."""
    return _TEMPLATE.format(year=year if year is not None else _dt.datetime.now(_dt.timezone.utc).year)


def has_license_header(text: str) -> bool:
    """Return True when ``text`` carries this project's header in its first lines (after a shebang/encoding)."""
    lines = text.splitlines()
    start = 0
    while start < len(lines) and start < 2 and (lines[start].startswith("#!") or "coding" in lines[start]):
        start += 1
    head = lines[start:start + 2]
    return len(head) == 2 and bool(HEADER_RE.match(head[0])) and head[1] == SPDX_LINE
