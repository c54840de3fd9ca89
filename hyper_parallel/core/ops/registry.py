# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The op registry: YAML files naming, per frontend op, the rule class that lays it out.

Format (``hyper_parallel/core/ops/yaml/*.yaml``)::

    __default__:                       # optional, merged into every entry of the file
      module: hyper_parallel.core.ops.rules.elementwise
    torch.add:      {rule: ElementwiseRule, options: {partial: linear}}
    Tensor.add_:    {rule: ElementwiseRule, options: {partial: linear, inplace: true}}

Fields: ``rule`` (class name, required), ``module`` (dotted path), ``options`` (mapping passed to
the rule's constructor), ``doc`` (free text), ``strategies`` (extra sharding strategies as data, see
:mod:`hyper_parallel.core.ops.strategies`). Anything else is an error naming file and key; so is
a module or class that does not resolve, or an op name registered twice across files.

Sources, loaded lazily on first dispatch: the built-in YAML directory, every path in
``$HYPER_PARALLEL_OP_YAML`` (files or directories, ``os.pathsep``-separated), the entry point group
``hyper_parallel.ops`` (each entry point resolves to a YAML path), and :func:`register_op` calls.
"""
from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Tuple

import yaml

from hyper_parallel.core.ops.rule import OpRule
from hyper_parallel.core.ops.strategies import attach_strategies

__all__ = ["RegistryError", "OpEntry", "Registry", "load_yaml_file", "register_op", "get_registry",
           "BUILTIN_YAML_DIR", "ENV_VAR"]

BUILTIN_YAML_DIR = Path(__file__).parent / "yaml"
ENV_VAR = "HYPER_PARALLEL_OP_YAML"
ENTRY_POINT_GROUP = "hyper_parallel.ops"
FIELDS = frozenset({"rule", "module", "options", "doc", "strategies", "plan_sha256"})


class RegistryError(ValueError):
    """A broken registry entry; the message names the file and the key."""


@dataclass
class OpEntry:
    """One registered op name."""

    name: str
    rule: str
    module: str
    options: Dict[str, Any] = field(default_factory=dict)
    doc: str = ""
    source: str = "<register_op>"
    strategies: Any = None
    _instance: Optional[OpRule] = None

    def rule_instance(self) -> OpRule:
        """The (cached) rule object for this entry."""
        if self._instance is None:
            cls = resolve_rule_class(self.module, self.rule, f"{self.source}: {self.name}")
            instance = cls(self.name, **self.options)
            if self.strategies:
                attach_strategies(instance, self.strategies, self.source)
            self._instance = instance
        return self._instance


def resolve_rule_class(module: str, rule: str, where: str) -> type:
    """Import ``module`` and return class ``rule``, with an error naming ``where``."""
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:
        raise RegistryError(f"{where}: module {module!r} cannot be imported: {exc}") from exc
    cls = getattr(mod, rule, None)
    if not isinstance(cls, type) or not issubclass(cls, OpRule):
        raise RegistryError(f"{where}: {module}.{rule} is not an OpRule class")
    return cls


def load_yaml_file(path: Path) -> List[OpEntry]:
    """Parse and validate one registry file (no imports yet)."""
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise RegistryError(f"{path}: invalid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise RegistryError(f"{path}: expected a mapping of op names, got {type(data).__name__}")
    default = data.pop("__default__", {}) or {}
    if not isinstance(default, dict) or set(default) - FIELDS:
        raise RegistryError(f"{path}: __default__: unknown field(s) {sorted(set(default) - FIELDS)}")
    entries = []
    for name, body in data.items():
        if not isinstance(body, dict):
            raise RegistryError(f"{path}: {name}: expected a mapping with 'rule', got {body!r}")
        unknown = set(body) - FIELDS
        if unknown:
            raise RegistryError(f"{path}: {name}: unknown field(s) {sorted(unknown)}; allowed {sorted(FIELDS)}")
        merged = {**default, **body}
        merged["options"] = {**(default.get("options") or {}), **(body.get("options") or {})}
        if "rule" not in merged or "module" not in merged:
            raise RegistryError(f"{path}: {name}: needs 'rule' and 'module' (directly or from __default__)")
        entries.append(OpEntry(name=str(name), rule=merged["rule"], module=merged["module"],
                               options=merged["options"], doc=merged.get("doc", ""), source=str(path),
                               strategies=merged.get("strategies")))
    return entries


class Registry:
    """All known op entries by name."""

    def __init__(self) -> None:
        self.entries: Dict[str, OpEntry] = {}

    def add(self, entry: OpEntry, *, replace: bool = False) -> None:
        """Add one entry; a duplicate name is an error unless ``replace``."""
        old = self.entries.get(entry.name)
        if old is not None and not replace:
            raise RegistryError(f"{entry.source}: {entry.name}: already registered in {old.source}")
        self.entries[entry.name] = entry

    def load_paths(self, paths: Iterable[Path]) -> None:
        """Load YAML files and directories (``*.yaml`` sorted)."""
        for path in paths:
            path = Path(path)
            if not path.exists():
                raise RegistryError(f"{path}: registry path does not exist")
            files = sorted(path.glob("*.yaml")) if path.is_dir() else [path]
            for f in files:
                for entry in load_yaml_file(f):
                    self.add(entry)

    def validate(self) -> None:
        """Resolve every entry's module and class (and build its rule) now."""
        for entry in self.entries.values():
            entry.rule_instance()

    def __contains__(self, name: str) -> bool:
        return name in self.entries

    def __len__(self) -> int:
        return len(self.entries)


def _extra_paths() -> List[Path]:
    out = [Path(p) for p in os.environ.get(ENV_VAR, "").split(os.pathsep) if p.strip()]
    from importlib.metadata import entry_points
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        target = ep.load()
        out.append(Path(target() if callable(target) else target))
    return out


_REGISTRY: Optional[Registry] = None
_PENDING: List[Tuple[OpEntry, bool]] = []
_LISTENERS: List[Any] = []


def get_registry() -> Registry:
    """The process-wide registry (built-in YAML + environment + entry points + register_op)."""
    global _REGISTRY  # pylint: disable=global-statement
    if _REGISTRY is None:
        reg = Registry()
        reg.load_paths([BUILTIN_YAML_DIR])
        reg.load_paths(_extra_paths())
        for entry, replace in _PENDING:
            reg.add(entry, replace=replace)
        _PENDING.clear()
        _REGISTRY = reg
    return _REGISTRY


def register_op(name: str, rule: Any, *, module: Optional[str] = None, options: Optional[Dict[str, Any]] = None,
                replace: bool = False) -> OpEntry:
    """Register ``name`` (e.g. ``"torch.roll"``) with a rule class (or its name plus ``module``).

    Works before or after the registry is loaded; ``replace=True`` overrides an existing entry.
    """
    if isinstance(rule, type):
        if not issubclass(rule, OpRule):
            raise RegistryError(f"register_op({name!r}): {rule!r} is not an OpRule subclass")
        module, rule = rule.__module__, rule.__qualname__
    if not module:
        raise RegistryError(f"register_op({name!r}): pass a rule class, or a class name with module=")
    entry = OpEntry(name=name, rule=rule, module=module, options=dict(options or {}))
    entry.rule_instance()  # fail now, not at the first dispatch
    if _REGISTRY is None:
        _PENDING.append((entry, replace))
    else:
        _REGISTRY.add(entry, replace=replace)
        for listener in _LISTENERS:
            listener(entry)
    return entry


def on_register(listener) -> None:
    """Call ``listener(entry)`` for every entry registered after the registry was loaded."""
    _LISTENERS.append(listener)
