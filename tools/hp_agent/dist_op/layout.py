# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Where the pipeline reads and writes in a repository.

Defaults fit this repository; a ``[dist_op]`` table in the repository's ``.hp-agent.toml`` overrides
them (a small fixture repository points the registry at its own YAML and its own test folders)::

    [dist_op]
    plans_dir = "plans"
    registry_yaml = "hyper_parallel/core/ops/yaml/generated.yaml"
    ut_dir = "tests/ut/ops/generated"
    st_dir = "tests/st/torch/ops/generated"
    python = ".venv/bin/python"      # interpreter for the test runs (default: the one running hp-agent)
    mindspore = "auto"               # "off": do not import MindSpore to look up counterparts (scope stays [TBD])
"""
from __future__ import annotations

import os
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Dict

__all__ = ["Layout", "load_layout", "LayoutError"]

BUILTIN_YAML_DIR = "hyper_parallel/core/ops/yaml"


class LayoutError(ValueError):
    """A bad ``[dist_op]`` setting; the message names the key."""


@dataclass
class Layout:
    """Paths (relative to ``root``) and the interpreter the pipeline uses."""

    root: Path
    plans_dir: str = "plans"
    registry_yaml: str = f"{BUILTIN_YAML_DIR}/generated.yaml"
    ut_dir: str = "tests/ut/ops/generated"
    st_dir: str = "tests/st/torch/ops/generated"
    python: str = ""
    mindspore: str = "auto"

    def path(self, rel: str) -> Path:
        """``root / rel``."""
        return self.root / rel

    @property
    def interpreter(self) -> str:
        """Python used for test runs."""
        if self.python:
            p = Path(self.python)
            return str(p if p.is_absolute() else self.root / p)
        return sys.executable

    def test_env(self) -> Dict[str, str]:
        """Environment of UT/ST runs: the repository importable, the registry YAML loaded."""
        env = dict(os.environ)
        paths = [str(self.root)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        env["PYTHONPATH"] = os.pathsep.join(paths)
        if not self.registry_yaml.startswith(BUILTIN_YAML_DIR + "/"):
            extra = [p for p in env.get("HYPER_PARALLEL_OP_YAML", "").split(os.pathsep) if p]
            env["HYPER_PARALLEL_OP_YAML"] = os.pathsep.join([str(self.path(self.registry_yaml))] + extra)
        return env


_KEYS = ("plans_dir", "registry_yaml", "ut_dir", "st_dir", "python", "mindspore")


def load_layout(root: Path) -> Layout:
    """The layout of ``root`` (defaults plus its ``.hp-agent.toml`` ``[dist_op]`` table)."""
    layout = Layout(Path(root))
    cfg = Path(root) / ".hp-agent.toml"
    if cfg.is_file():
        try:
            table = tomllib.loads(cfg.read_text(encoding="utf-8")).get("dist_op", {})
        except tomllib.TOMLDecodeError as exc:
            raise LayoutError(f"{cfg}: invalid TOML: {exc}") from exc
        for key, value in table.items():
            if key not in _KEYS:
                raise LayoutError(f"{cfg}: [dist_op] unknown key {key!r}")
            if not isinstance(value, str):
                raise LayoutError(f"{cfg}: [dist_op] {key} must be a string, got {value!r}")
            setattr(layout, key, value)
    if layout.mindspore not in ("auto", "off"):
        raise LayoutError(f"{cfg}: [dist_op] mindspore must be 'auto' or 'off', got {layout.mindspore!r}")
    return layout
