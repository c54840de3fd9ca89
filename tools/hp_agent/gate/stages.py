# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Loading and validating the declarative stage list ``ci/stages.yaml``."""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from hp_agent.parsers import PARSERS

STAGES_FILE = "ci/stages.yaml"
_FIELDS = {"name", "run", "paths", "suffixes", "parser", "ok_codes", "timeout_s", "select"}


class StageConfigError(ValueError):
    """``ci/stages.yaml`` is malformed (the message names the stage and the field)."""


@dataclass
class Stage:
    """One gate stage as declared in ``ci/stages.yaml``."""

    name: str
    run: list[str]
    parser: str
    paths: list[str] = field(default_factory=list)
    suffixes: list[str] = field(default_factory=list)
    ok_codes: list[int] = field(default_factory=lambda: [0])
    timeout_s: float = 1800
    select: str = ""  # "tests": with --changed, {paths} is the test files covering the change (gate/select.py)

    @property
    def scoped(self) -> bool:
        """True when the stage takes a file scope (``{paths}``), so --changed can narrow it."""
        return "{paths}" in self.run

    def argv(self, paths: list[str]) -> list[str]:
        """The command line with placeholders expanded."""
        out: list[str] = []
        for arg in self.run:
            if arg == "{python}":
                out.append(sys.executable)
            elif arg == "{hp_agent}":
                out.extend([sys.executable, "-m", "hp_agent"])
            elif arg == "{paths}":
                out.extend(paths)
            else:
                out.append(arg)
        return out


def _validate(spec: object, index: int, seen: set[str]) -> dict:
    where = f"{STAGES_FILE}: stage #{index}"
    if not isinstance(spec, dict):
        raise StageConfigError(f"{where}: must be a mapping")
    unknown = set(spec) - _FIELDS
    if unknown:
        raise StageConfigError(f"{where}: unknown field(s) {sorted(unknown)}")
    if not spec.get("name") or not isinstance(spec.get("run"), list) or not spec["run"]:
        raise StageConfigError(f"{where}: needs 'name' and a non-empty 'run' list")
    if spec.get("parser") not in PARSERS:
        raise StageConfigError(f"{where} ({spec['name']}): parser must be one of {sorted(PARSERS)}")
    if spec.get("select", "tests") != "tests":
        raise StageConfigError(f"{where} ({spec['name']}): select must be 'tests', got {spec['select']!r}")
    if spec["name"] in seen:
        raise StageConfigError(f"{where}: stage name {spec['name']!r} used twice")
    seen.add(spec["name"])
    return spec


def load_stages(root: Path) -> list[Stage]:
    """Read ``ci/stages.yaml`` under ``root``; raises :class:`StageConfigError` with the reason."""
    path = root / STAGES_FILE
    if not path.is_file():
        raise StageConfigError(f"{STAGES_FILE} not found in {root}")
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    stages: list[Stage] = []
    seen: set[str] = set()
    for i, raw in enumerate(data.get("stages") or [], start=1):
        spec = _validate(raw, i, seen)
        stages.append(Stage(name=str(spec["name"]), run=[str(a) for a in spec["run"]], parser=spec["parser"],
                            paths=[str(p) for p in spec.get("paths", [])],
                            suffixes=[str(s) for s in spec.get("suffixes", [])],
                            ok_codes=[int(c) for c in spec.get("ok_codes", [0])],
                            timeout_s=float(spec.get("timeout_s", 1800)), select=str(spec.get("select", ""))))
    if not stages:
        raise StageConfigError(f"{STAGES_FILE}: no stages")
    return stages
