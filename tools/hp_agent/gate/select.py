# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Which tests cover a set of changed files (``hp-agent gate run --changed`` for stages with ``select: tests``).

A test file is selected when

* it changed itself (a new op's UT and ST files), or a test data file changed below its directory, the nearest
  one holding tests (a generated op's case YAML under ``tests/*/ops/generated/cases/``);
* it imports, directly or through other modules, a changed Python module (the static import graph of
  ``hyper_parallel``, ``hp_agent`` and the tests; importing ``a.b.c`` also runs ``a`` and ``a.b``);
* a changed op-registry YAML adds or changes an op the test names (``torch.gcd``, ``"gcd"``, ``.gcd(``) (the
  YAML itself is data: the ``op-registry`` and ``plans`` stages check it); the agent tooling's tests
  (``tests/agent/``) use op names as example inputs and are not selected by a name;
* a changed op rule module (loaded by name from the registry, so no import edge leads to the ops it serves)
  is imported directly by the test or named in it by its dotted path;
* an agent asset or a generated assistant file changed and the test names ``.agent/``.

Files whose effect the graph cannot see (``conftest.py``, ``pyproject.toml``, ``setup.py``, ``MANIFEST.in``,
``csrc/``, ``Makefile``,
``ci/stages.yaml``, a non-Python file inside a package other than the registry) select the whole stage.
Docs, plans and other files select nothing. The full stages still run in the gate and in ``make test``.
"""
from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

PACKAGES = {"hyper_parallel": "hyper_parallel", "tools/hp_agent": "hp_agent", "tests": "tests"}
WHOLE_STAGE = {"pyproject.toml", "setup.py", "setup.cfg", "MANIFEST.in", "Makefile", "ci/stages.yaml"}
WHOLE_STAGE_DIRS = ("csrc/",)  # compiled into the package: every test may load it
REGISTRY_DIR = "hyper_parallel/core/ops/yaml/"
RULES_DIR = "hyper_parallel/core/ops/rules/"
ASSET_DIRS = (".agent/", ".claude/", ".cursor/", ".codex/", ".gemini/", ".github/instructions/", "AGENTS.md",
              "CLAUDE.md", "GEMINI.md")
#: tests of the agent tooling: an op name in them is an example input (``torch.gcd`` for the probe), not a
#: use of the library's registry entry, so a registry change selects them only through the import graph
TOOL_TESTS = ("tests/agent/",)
NO_TESTS = ("docs/", "plans/", "benchmarks/", "examples/", "README.md", "AGENTS.md", "CLAUDE.md", "GEMINI.md")


def module_of(rel: str) -> str | None:
    """The dotted module of a Python file in one of the packages (None elsewhere)."""
    if not rel.endswith(".py"):
        return None
    for prefix, name in PACKAGES.items():
        if rel == f"{prefix}.py" or rel.startswith(prefix + "/"):
            parts = rel[len(prefix):].lstrip("/")[:-3].split("/")
            parts = [p for p in parts if p]
            if parts and parts[-1] == "__init__":
                parts = parts[:-1]
            return ".".join([name, *parts])
    return None


def _imports(path: Path, module: str) -> set[str]:
    """Modules ``path`` imports (absolute names, relative imports resolved; ``from a import b`` gives both)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (SyntaxError, UnicodeDecodeError, OSError):
        return set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            out.add(base)
            out.update(f"{base}.{alias.name}" for alias in node.names)
    return out


CACHE_FILE = ".gate/cache/imports.pickle"  # per file: (mtime_ns, size, imports); .gate/ is git-ignored


class ImportGraph:
    """Module -> modules that import it (reverse edges), built from every Python file of the packages (each
    file's imports are cached by its mtime and size, so a rebuild parses only what changed)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.files: dict[str, str] = {}  # module -> rel path
        self.importers: dict[str, set[str]] = {}
        self.direct: dict[str, set[str]] = {}  # module -> what it imports (with parent packages)
        self.files = _python_files(root)
        cache, fresh = _load(root), {}
        for mod, rel in self.files.items():
            stat = (root / rel).stat()
            hit = cache.get(rel)
            imports = hit[2] if hit and hit[:2] == (stat.st_mtime_ns, stat.st_size) else _imports(root / rel, mod)
            fresh[rel] = (stat.st_mtime_ns, stat.st_size, imports)
            targets = {t for name in imports for t in _with_parents(name) if t in self.files and t != mod}
            self.direct[mod] = targets
            for target in targets:
                self.importers.setdefault(target, set()).add(mod)
        if fresh != cache:
            _save(root, fresh)

    def affected(self, modules: set[str]) -> set[str]:
        """``modules`` and every module that imports one of them, directly or not."""
        seen = set(modules)
        todo = list(modules)
        while todo:
            for importer in self.importers.get(todo.pop(), ()):
                if importer not in seen:
                    seen.add(importer)
                    todo.append(importer)
        return seen


def _python_files(root: Path) -> dict[str, str]:
    """Module -> path of every Python file of the packages (no hidden directories, no ``__pycache__``)."""
    files = {}
    for prefix in PACKAGES:
        base = root / prefix
        for path in sorted(base.rglob("*.py")) if base.is_dir() else []:
            rel = path.relative_to(root).as_posix()
            mod = module_of(rel)
            if mod and "/." not in rel and "__pycache__" not in rel:
                files[mod] = rel
    return files


def _load(root: Path) -> dict:
    import pickle  # pylint: disable=import-outside-toplevel
    try:
        with open(root / CACHE_FILE, "rb") as fh:
            data = pickle.load(fh)  # noqa: S301  # our own cache file
        return data if isinstance(data, dict) else {}
    except (OSError, EOFError, pickle.UnpicklingError, AttributeError, ValueError):
        return {}


def _save(root: Path, data: dict) -> None:
    import pickle  # pylint: disable=import-outside-toplevel
    try:
        (root / CACHE_FILE).parent.mkdir(parents=True, exist_ok=True)
        tmp = root / (CACHE_FILE + ".tmp")
        with open(tmp, "wb") as fh:
            pickle.dump(data, fh, protocol=pickle.HIGHEST_PROTOCOL)
        tmp.replace(root / CACHE_FILE)
    except OSError:
        pass  # read-only tree: no cache, same result


def _with_parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def _is_test(rel: str) -> bool:
    return rel.startswith("tests/") and Path(rel).name.startswith("test_") and rel.endswith(".py")


def _in(rel: str, scopes: list[str]) -> bool:
    return any(rel == s or rel.startswith(s.rstrip("/") + "/") for s in scopes)


def changed_ops(root: Path, rel: str, base: str | None) -> set[str]:
    """The op names a registry YAML change adds or changes (``+`` lines of the diff; every key when new)."""
    args = ["git", "diff", "--unified=0", base or "HEAD", "--", rel]
    proc = subprocess.run(args, cwd=root, capture_output=True, text=True, check=False)
    lines = [ln[1:] for ln in proc.stdout.splitlines() if ln.startswith("+") and not ln.startswith("+++")]
    tracked = subprocess.run(["git", "ls-files", "--error-unmatch", "--", rel], cwd=root, capture_output=True,
                             check=False).returncode == 0
    if not tracked and (root / rel).is_file():
        lines = (root / rel).read_text(encoding="utf-8").splitlines()  # a new file: all of it
    keys = set()
    for line in lines:
        match = re.match(r"^([A-Za-z_][\w.]*)\s*:", line)
        if match and match.group(1) != "__default__":
            keys.add(match.group(1))
    return keys


def _mentions(text: str, op: str) -> bool:
    short = op.rsplit(".", 1)[-1]
    return op in text or f'"{short}"' in text or f"'{short}'" in text or f".{short}(" in text


class Selection:  # pylint: disable=too-few-public-methods
    """The tests of one stage for a change set: ``tests`` (None: run the whole stage) and why."""

    def __init__(self, tests: list[str] | None, reasons: dict[str, str]) -> None:
        self.tests, self.reasons = tests, reasons


def select_tests(root: Path, changed: list[str], scopes: list[str], base: str | None = None,
                 graph: ImportGraph | None = None) -> Selection:
    """The test files under ``scopes`` that cover ``changed`` (see the module docstring)."""
    whole = _whole_stage(changed, scopes)
    if whole:
        return whole
    graph = graph or ImportGraph(root)
    tests = {mod: rel for mod, rel in graph.files.items() if _is_test(rel) and _in(rel, scopes)}
    reasons: dict[str, str] = {rel: "changed" for rel in changed if _is_test(rel) and _in(rel, scopes)}
    _by_test_data(root, changed, scopes, tests, reasons)
    modules, direct_only, needed = set(), set(), []
    for rel in changed:
        _classify(root, rel, base, graph, (modules, direct_only, needed))
    _by_imports(graph, tests, (modules, direct_only), reasons)
    _by_text(root, tests, needed, reasons)
    return Selection(sorted(r for r in reasons if (root / r.partition("::")[0]).is_file()), reasons)


def _whole_stage(changed: list[str], scopes: list[str]) -> Selection | None:
    """The whole stage when a change reaches every test or its readers are unknown."""
    for rel in changed:
        conftest = Path(rel).name == "conftest.py" and _in(rel, scopes)
        if rel in WHOLE_STAGE or rel.startswith(WHOLE_STAGE_DIRS) or conftest:
            return Selection(None, {rel: "changes how every test runs"})
        if rel.startswith(("hyper_parallel/", "tools/hp_agent/")) and not rel.endswith(".py") \
                and not rel.startswith(REGISTRY_DIR) and not rel.endswith((".md", ".txt")):
            return Selection(None, {rel: "a data file of the package: its readers are not known"})
    return None


def _classify(root: Path, rel: str, base: str | None, graph: ImportGraph, into: tuple) -> None:
    """Sort one changed file into (modules for the import closure, modules for direct importers, texts)."""
    modules, direct_only, needed = into
    mod = module_of(rel)
    if rel.startswith(REGISTRY_DIR):  # data (the op-registry stage checks it): the tests naming its changed ops
        needed.extend(("op", op) for op in changed_ops(root, rel, base))
    elif rel.startswith(RULES_DIR) and mod:  # loaded by name from the registry: importers and namers
        direct_only.add(mod)
        needed.append(("module", mod))
    elif mod in graph.files and not _is_test(rel):
        modules.add(mod)
    elif rel.startswith(ASSET_DIRS):
        needed.append(("asset", ".agent/"))


def _by_test_data(root: Path, changed: list[str], scopes: list[str], tests: dict[str, str], reasons: dict) -> None:
    """A test data file (a generated op's case YAML) changed: the tests of the nearest directory above it that
    holds tests read it."""
    by_dir: dict[str, list[str]] = {}
    for test in tests.values():
        by_dir.setdefault(test.rpartition("/")[0], []).append(test)
    for rel in changed:
        if not (rel.startswith("tests/") and not rel.endswith(".py") and _in(rel, scopes)):
            continue
        folder = rel.rpartition("/")[0]
        while folder and folder not in by_dir:
            folder = folder.rpartition("/")[0]
        for test in by_dir.get(folder, []):
            reasons.setdefault(_case_node(root, test, rel), f"reads test data {rel}")


def _case_node(root: Path, test: str, data: str) -> str:
    """``test::func[<case>]`` when ``data`` is one case file (``cases/torch.gcd.yaml`` -> ``torch.gcd``) and
    ``test`` has a single test function, parametrized (the generated op tests: one case per op); else ``test``."""
    if "/cases/" not in data:
        return test
    text = (root / test).read_text(encoding="utf-8", errors="replace")
    funcs = re.findall(r"^def (test_\w+)\(", text, re.M)
    if len(funcs) != 1 or "@pytest.mark.parametrize" not in text:
        return test
    case = data.rpartition("/")[2].rsplit(".", 1)[0]
    return f"{test}::{funcs[0]}[{case}]"


def _by_imports(graph: ImportGraph, tests: dict[str, str], modules: tuple[set, set], reasons: dict) -> None:
    """Tests reaching a changed module through the import graph, or importing a by-name-loaded one directly."""
    closure, direct_only = modules
    for mod in graph.affected(closure):
        if mod in tests:
            reasons.setdefault(tests[mod], "imports a changed module")
    for mod, rel in tests.items():
        if graph.direct.get(mod, set()) & direct_only:
            reasons.setdefault(rel, f"imports {', '.join(sorted(graph.direct[mod] & direct_only))}")


def _by_text(root: Path, tests: dict[str, str], needed: list[tuple[str, str]], reasons: dict[str, str]) -> None:
    """Tests that name an added op, a changed rule module or the agent assets."""
    if not needed:
        return
    for rel in tests.values():
        if rel in reasons:
            continue
        text = (root / rel).read_text(encoding="utf-8", errors="replace")
        for kind, what in needed:
            if kind == "op" and rel.startswith(TOOL_TESTS):  # the tool's tests use op names as examples
                continue
            if (_mentions(text, what) if kind == "op" else what in text):
                reasons[rel] = f"names {what}"
                break


def is_unmapped_only(changed: list[str]) -> bool:
    """True when nothing changed that any test covers (docs, plans, benchmarks...)."""
    return all(rel.startswith(NO_TESTS) for rel in changed)
