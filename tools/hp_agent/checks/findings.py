# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The finding record shared by every checker and by gate reports."""
from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Finding:
    """One problem: where (file, line or None), which rule, and a human-readable message."""

    file: str
    line: int | None
    rule: str
    message: str

    def to_dict(self) -> dict:
        """Return the JSON form used in reports: ``{file, line, rule, message}``."""
        return asdict(self)

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        return f"{where}: [{self.rule}] {self.message}"
