# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The one finding record of hp-agent: every checker, the gate reports and gate-doctor use it.

A named tuple (not a dataclass: the hooks import it on every call and ``dataclasses`` costs ~20 ms).
"""
from __future__ import annotations

from collections import namedtuple

_Fields = namedtuple("_Fields", "file line rule message tool test stage", defaults=("", None, None))


class Finding(_Fields):
    """One problem: where (file and line, either may be None), which rule, and a readable message.

    Fields: ``file``, ``line``, ``rule``, ``message``; ``tool`` names the tool that reported it (pylint,
    lizard, codespell, pytest, stage; empty for hp-agent's own checks), ``test`` the pytest node of a
    failing test and ``stage`` the gate stage whose log it came from. Immutable: use ``_replace``.
    """

    __slots__ = ()

    def to_dict(self) -> dict:
        """The JSON form used in reports: ``{file, line, rule, message, tool, test, stage}``."""
        return dict(self._asdict())

    def key(self) -> str:
        """Identity across builds: the test node, else ``file:line:rule``."""
        return self.test or f"{self.file}:{self.line}:{self.rule}"

    def __str__(self) -> str:
        where = self.file or self.test or "-"
        if self.line is not None:
            where = f"{where}:{self.line}"
        text = f"{self.test}: {self.message}" if self.test and self.file else self.message
        return f"{where}: [{self.rule}] {text}"
