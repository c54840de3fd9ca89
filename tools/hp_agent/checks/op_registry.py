# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Op registry pairing check: YAML registry entries <-> rule classes, without importing torch.

Registry: ``hyper_parallel/core/ops/yaml/*.yaml``. Each top-level key is a frontend op name
(``torch.add``, ``Tensor.add_``, ``mindspore.mint.add``); its value is a mapping with ``rule`` (class name,
required), ``module`` (dotted path; may come from the file's ``__default__`` block), ``options`` (mapping),
``doc`` (str) and ``strategies`` (a list of rows or a mapping of input ranks to rows); a file's ``__default__``
block may set any of these fields and is merged into every entry
(as ``hyper_parallel.core.ops.registry`` does). Rule modules live in ``hyper_parallel/core/ops/rules/``.

Findings: an entry whose module or class does not resolve; a rule module not referenced by any entry
(``__init__.py``, ``base.py`` and ``_*.py`` hold bases and are exempt); an op registered twice; an unknown
field; a malformed file. Modules are resolved to files and scanned with ``ast`` (never executed).
"""
from __future__ import annotations

import ast
import importlib.util
from dataclasses import dataclass
from pathlib import Path

from hp_agent.findings import Finding

REGISTRY_DIR = "hyper_parallel/core/ops/yaml"
RULES_DIR = "hyper_parallel/core/ops/rules"
ENTRY_FIELDS = {"rule", "module", "options", "doc", "strategies", "plan_sha256"}
DEFAULT_FIELDS = ENTRY_FIELDS
DEFAULT_KEY = "__default__"


@dataclass
class RegistryLayout:
    """Where the registry and the rule modules live, relative to the repository root."""

    registry_dir: str = REGISTRY_DIR
    rules_dir: str = RULES_DIR


def is_registry_path(rel: str, layout: RegistryLayout | None = None) -> bool:
    """True when a changed file should trigger the pairing check (a registry YAML or a rule module)."""
    lay = layout or RegistryLayout()
    return (rel.startswith(lay.registry_dir + "/") and rel.endswith((".yaml", ".yml"))) or \
        (rel.startswith(lay.rules_dir + "/") and rel.endswith(".py"))


def _is_base_module(path: Path) -> bool:
    return path.name == "__init__.py" or path.name == "base.py" or path.name.startswith("_")


def _module_file(module: str, root: Path) -> Path | None:
    """Resolve a dotted module to its source file: first inside ``root``, then via the parent's import spec."""
    parts = module.split(".")
    for candidate in (root.joinpath(*parts).with_suffix(".py"), root.joinpath(*parts, "__init__.py")):
        if candidate.is_file():
            return candidate
    if parts[0] == "hyper_parallel":
        return None  # the project's own modules must be in this tree
    try:
        parent_spec = importlib.util.find_spec(".".join(parts[:-1])) if len(parts) > 1 else None
    except (ImportError, ValueError):
        return None
    locations = list(parent_spec.submodule_search_locations or []) if parent_spec else []
    for loc in locations:
        for candidate in (Path(loc, parts[-1] + ".py"), Path(loc, parts[-1], "__init__.py")):
            if candidate.is_file():
                return candidate
    return None


def _classes_in(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}


def _key_lines(text: str) -> dict[str, int]:
    """Line number of each top-level key (from the YAML node tree, so comments don't shift it)."""
    import yaml  # pylint: disable=import-outside-toplevel  # the hooks import this module before the env exists
    node = yaml.compose(text)
    if not isinstance(node, yaml.MappingNode):
        return {}
    return {k.value: k.start_mark.line + 1 for k, _ in node.value if isinstance(k, yaml.ScalarNode)}


def _entry_findings(rel: str, line: int, op: str, spec: object, default: dict) -> list[Finding]:
    if not isinstance(spec, dict):
        return [Finding(rel, line, "registry-entry", f"{op}: value must be a mapping with 'rule', got {spec!r}")]
    out = []
    for key in sorted(set(spec) - ENTRY_FIELDS):
        out.append(Finding(rel, line, "registry-unknown-field",
                           f"{op}: unknown field {key!r} (allowed: {', '.join(sorted(ENTRY_FIELDS))})"))
    rule = spec.get("rule", default.get("rule"))
    if not isinstance(rule, str) or not rule:
        out.append(Finding(rel, line, "registry-entry",
                           f"{op}: no 'rule' (the rule class name) and no __default__ rule"))
    if not isinstance(spec.get("module", default.get("module")), str):
        out.append(Finding(rel, line, "registry-entry", f"{op}: no 'module' and no __default__ module"))
    if "options" in spec and not isinstance(spec["options"], dict):
        out.append(Finding(rel, line, "registry-entry", f"{op}: 'options' must be a mapping"))
    if "doc" in spec and not isinstance(spec["doc"], str):
        out.append(Finding(rel, line, "registry-entry", f"{op}: 'doc' must be a string"))
    if "strategies" in spec and not isinstance(spec["strategies"], (list, dict)):
        out.append(Finding(rel, line, "registry-entry",
                           f"{op}: 'strategies' must be a list of rows or a mapping of input ranks to rows"))
    return out


class _Checker:
    def __init__(self, root: Path, layout: RegistryLayout) -> None:
        self.root, self.layout = root, layout
        self.findings: list[Finding] = []
        self.seen: dict[str, str] = {}
        self.referenced: set[Path] = set()
        self.class_cache: dict[Path, set[str]] = {}

    def _resolve(self, rel: str, line: int, op: str, module: str, rule: str) -> None:
        path = _module_file(module, self.root)
        if path is None:
            self.findings.append(Finding(rel, line, "registry-module", f"{op}: module {module!r} not found"))
            return
        self.referenced.add(path.resolve())
        if path not in self.class_cache:
            try:
                self.class_cache[path] = _classes_in(path)
            except SyntaxError as exc:
                self.findings.append(Finding(rel, line, "registry-module",
                                             f"{op}: module {module!r} does not parse: {exc.msg}"))
                self.class_cache[path] = set()
        if rule not in self.class_cache[path]:
            self.findings.append(Finding(rel, line, "registry-class",
                                         f"{op}: class {rule!r} not found in module {module!r}"))

    def check_file(self, path: Path) -> None:
        """Check one registry YAML file: structure, fields, duplicates, module/class resolution."""
        import yaml  # pylint: disable=import-outside-toplevel  # the hooks import this module before the env
        rel = path.relative_to(self.root).as_posix()
        text = path.read_text(encoding="utf-8")
        try:
            data = yaml.safe_load(text) or {}
            lines = _key_lines(text)
        except yaml.YAMLError as exc:
            self.findings.append(Finding(rel, None, "registry-yaml", f"invalid YAML: {exc}"))
            return
        if not isinstance(data, dict):
            self.findings.append(Finding(rel, 1, "registry-yaml", "top level must be a mapping of op names"))
            return
        default = data.get(DEFAULT_KEY) or {}
        if not isinstance(default, dict):
            self.findings.append(Finding(rel, lines.get(DEFAULT_KEY), "registry-entry",
                                         "__default__ must be a mapping"))
            default = {}
        for key in sorted(set(default) - DEFAULT_FIELDS):
            self.findings.append(Finding(rel, lines.get(DEFAULT_KEY), "registry-unknown-field",
                                         f"__default__: unknown field {key!r}"))
        for op, spec in data.items():
            if op == DEFAULT_KEY:
                continue
            line = lines.get(str(op))
            if op in self.seen:
                self.findings.append(Finding(rel, line, "registry-duplicate",
                                             f"{op}: already registered in {self.seen[op]}"))
            else:
                self.seen[op] = rel
            problems = _entry_findings(rel, line, op, spec, default)
            self.findings.extend(problems)
            if not any(f.rule == "registry-entry" for f in problems):
                self._resolve(rel, line, op, spec.get("module", default.get("module")),
                              spec.get("rule", default.get("rule")))

    def check_unreferenced(self) -> None:
        """Report rule modules that no registry entry references (base modules exempt)."""
        rules_dir = self.root / self.layout.rules_dir
        for path in sorted(rules_dir.rglob("*.py")) if rules_dir.is_dir() else []:
            if _is_base_module(path) or path.resolve() in self.referenced:
                continue
            self.findings.append(Finding(path.relative_to(self.root).as_posix(), 1, "registry-unreferenced",
                                         "rule module is not referenced by any registry entry"))


def check_registry(root: Path, layout: RegistryLayout | None = None) -> tuple[list[Finding], str]:
    """Check the whole registry under ``root``; returns (findings, summary line)."""
    lay = layout or RegistryLayout()
    reg_dir = root / lay.registry_dir
    files = sorted([*reg_dir.glob("*.yaml"), *reg_dir.glob("*.yml")]) if reg_dir.is_dir() else []
    rules_dir = root / lay.rules_dir
    if not files and not rules_dir.is_dir():
        return [], f"no registry found ({lay.registry_dir} does not exist): nothing to check"
    checker = _Checker(root, lay)
    for path in files:
        checker.check_file(path)
    checker.check_unreferenced()
    summary = (f"{len(checker.seen)} op(s) in {len(files)} registry file(s), "
               f"{len(checker.referenced)} rule module(s) referenced, {len(checker.findings)} finding(s)")
    return checker.findings, summary
