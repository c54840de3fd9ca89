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
    """Classes a module defines as attributes: at top level, or inside top-level ``if``/``try`` blocks (a class
    inside a function is no module attribute; not walking every node keeps the after-write hook fast)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    todo, found = list(tree.body), set()
    while todo:
        node = todo.pop()
        if isinstance(node, ast.ClassDef):
            found.add(node.name)
        elif isinstance(node, (ast.If, ast.Try)):
            todo.extend(node.body + node.orelse + getattr(node, "finalbody", []))
            todo.extend(s for h in getattr(node, "handlers", []) for s in h.body)
    return found


def _loader():
    """libyaml's safe loader when PyYAML was built with it (about 10x faster), else the pure-Python one."""
    import yaml  # pylint: disable=import-outside-toplevel  # the hooks import this module before the env exists
    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _yaml_error(exc: BaseException) -> bool:
    """True when ``exc`` is PyYAML's parse error (PyYAML is then imported already: it raised it)."""
    import sys  # pylint: disable=import-outside-toplevel
    yaml = sys.modules.get("yaml")
    return yaml is not None and isinstance(exc, yaml.YAMLError)


def _key_lines(text: str) -> dict[str, int]:
    """Line number of each top-level key (from the YAML node tree, so comments don't shift it)."""
    import yaml  # pylint: disable=import-outside-toplevel  # the hooks import this module before the env exists
    node = yaml.compose(text, Loader=_loader())
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
        self.module_cache: dict[str, tuple[Path | None, Path | None]] = {}
        self.cache: dict | None = None  # path -> (mtime_ns, size, data, lines) when parses may be reused
        self.cache_dirty = False
        self.only_modules: set[str] | None = None  # resolve only entries of these modules (incremental check)...
        self.full_files: set[Path] = set()  # ...except in these files, resolved in full

    def _resolve(self, rel: str, line: int, op: str, module: str, rule: str) -> None:
        if module not in self.module_cache:
            found = _module_file(module, self.root)
            self.module_cache[module] = (found, found.resolve() if found else None)
        path, resolved = self.module_cache[module]
        if path is None:
            self.findings.append(Finding(rel, line, "registry-module", f"{op}: module {module!r} not found"))
            return
        self.referenced.add(resolved)
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
        rel = path.relative_to(self.root).as_posix()
        parsed = self._parsed_or_finding(path, rel)
        if parsed is None:
            return
        data, lines = parsed
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
            module = spec.get("module", default.get("module")) if isinstance(spec, dict) else None
            wanted = self.only_modules is None or path in self.full_files or module in self.only_modules
            if wanted and not any(f.rule == "registry-entry" for f in problems):
                self._resolve(rel, line, op, module, spec.get("rule", default.get("rule")))

    def _parsed_or_finding(self, path: Path, rel: str) -> tuple[object, dict[str, int]] | None:
        """:meth:`_parse`, or None with a ``registry-yaml`` finding when the file is not valid YAML."""
        try:
            return self._parse(path)
        except Exception as exc:  # pylint: disable=broad-except  # PyYAML is imported only on a cache miss
            if not _yaml_error(exc):
                raise
            self.findings.append(Finding(rel, None, "registry-yaml", f"invalid YAML: {exc}"))
            return None

    def _parse(self, path: Path) -> tuple[object, dict[str, int]]:
        """The file's data and key lines; reused from ``self.cache`` while the file's mtime and size match."""
        stat = path.stat()
        key = str(path)
        hit = self.cache.get(key) if self.cache is not None else None
        if hit and hit[0] == stat.st_mtime_ns and hit[1] == stat.st_size:
            return hit[2], hit[3]
        import yaml  # pylint: disable=import-outside-toplevel  # only on a cache miss (~0.1 s to import)
        text = path.read_text(encoding="utf-8")
        data = yaml.load(text, Loader=_loader()) or {}  # noqa: S506  # a safe loader
        lines = _key_lines(text)
        if self.cache is not None:
            self.cache[key] = (stat.st_mtime_ns, stat.st_size, data, lines)
            self.cache_dirty = True
        return data, lines

    def check_modules_referenced(self, modules: dict[str, Path]) -> None:
        """Report which of ``modules`` (dotted name -> file) no entry checked so far references."""
        for module, path in modules.items():
            if not _is_base_module(path) and path.resolve() not in self.referenced:
                self.findings.append(Finding(path.relative_to(self.root).as_posix(), 1, "registry-unreferenced",
                                             f"rule module is not referenced by any registry entry ({module})"))

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


def _top_keys(text: str) -> list[str]:
    """The top-level keys of a registry file from its text alone (no YAML parse): ``name:`` at column 0."""
    keys = []
    for line in text.splitlines():
        if line[:1] in ("", " ", "\t", "#", "-") or ":" not in line:
            continue
        key = line.split(": ", 1)[0].rstrip(":").strip().strip("'\"")
        if key and key != DEFAULT_KEY:
            keys.append(key)
    return keys


def check_registry_changed(root: Path, changed: list[str],
                           layout: RegistryLayout | None = None) -> tuple[list[Finding], str]:
    """The pairing check for the registry files and rule modules in ``changed`` only (the after-write hook).

    An edited registry file is checked in full (structure, fields, module and class resolution) and its ops
    against the other files' top-level keys (read from their text, not parsed). An edited rule module is
    checked against the entries that can reference it: only registry files whose text names its module are
    parsed. ``hp-agent check op-registry`` (and the gate) still check everything.
    """
    lay = layout or RegistryLayout()
    files, edited_yaml, modules = _changed_sets(root, changed, lay)
    texts = {path: path.read_text(encoding="utf-8") for path in files}
    checker = _Checker(root, lay)
    checker.cache = _load_cache(root)
    to_parse = set(edited_yaml) | {p for p in files if any(m in texts[p] for m in modules)}
    for path in files:  # the other files' ops, for duplicates
        if path not in to_parse:
            for key in _top_keys(texts[path]):
                checker.seen.setdefault(key, path.relative_to(root).as_posix())
    checker.only_modules, checker.full_files = set(modules), set(edited_yaml)
    for path in sorted(to_parse):
        checker.check_file(path)
    checker.check_modules_referenced(modules)
    if checker.cache_dirty:
        _save_cache(root, checker.cache)
    own = {p.relative_to(root).as_posix() for p in to_parse} | set(changed)
    findings = [f for f in checker.findings if f.file in own]
    return findings, f"{len(to_parse)} registry file(s) parsed for {len(changed)} changed file(s)"


def _changed_sets(root: Path, changed: list[str], lay: RegistryLayout) -> tuple[list[Path], list[Path], dict]:
    """Every registry file, the edited ones, and the edited rule modules (dotted name -> file)."""
    reg_dir = root / lay.registry_dir
    files = sorted([*reg_dir.glob("*.yaml"), *reg_dir.glob("*.yml")]) if reg_dir.is_dir() else []
    rels = {path.relative_to(root).as_posix(): path for path in files}
    edited_yaml = [rels[r] for r in changed if r in rels]
    rules = [root / r for r in changed if r.startswith(lay.rules_dir + "/") and r.endswith(".py")
             and (root / r).is_file()]
    return files, edited_yaml, {_dotted(rule, root): rule for rule in rules}


def _dotted(path: Path, root: Path) -> str:
    return ".".join(path.relative_to(root).with_suffix("").parts)


CACHE_FILE = ".gate/cache/op-registry.pickle"  # .gate/ is git-ignored; the cache is only ever a speed-up


def _load_cache(root: Path) -> dict:
    import pickle  # pylint: disable=import-outside-toplevel
    try:
        with open(root / CACHE_FILE, "rb") as fh:
            data = pickle.load(fh)  # noqa: S301  # our own file, written below
        return data if isinstance(data, dict) else {}
    except (OSError, EOFError, pickle.UnpicklingError, AttributeError, ValueError):
        return {}


def _save_cache(root: Path, cache: dict | None) -> None:
    import pickle  # pylint: disable=import-outside-toplevel
    import tempfile  # pylint: disable=import-outside-toplevel
    if not cache:
        return
    target = root / CACHE_FILE
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("wb", dir=target.parent, delete=False) as fh:
            pickle.dump(cache, fh, protocol=pickle.HIGHEST_PROTOCOL)
        Path(fh.name).replace(target)
    except OSError:
        pass  # a read-only tree: no cache, same result
