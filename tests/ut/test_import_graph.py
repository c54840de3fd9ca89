# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT: the import graph of ``hyper_parallel`` and ``hp_agent`` has no cycle, and rule modules import no framework.

Edges are read from the source (nothing is imported): ``import``/``from ... import`` at module level and
inside functions (not those under ``if TYPE_CHECKING:``, which never run), and every dotted string constant
that names one of the packages' modules exactly (what ``importlib.import_module`` loads). A package's
``_LAZY`` export map is followed per name: ``from pkg import name`` reaches the module defining ``name``.
A cycle fails the test naming its modules
in order. Rule modules, and every module the layout keeps framework-free (all but ``_torch/``,
``_mindspore/``, ``platform/<backend>/`` and a model's folder), are then imported for real in a fresh
interpreter where ``torch`` and ``mindspore`` cannot be imported.
"""
import ast
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"hyper_parallel": ROOT / "hyper_parallel", "hp_agent": ROOT / "tools" / "hp_agent"}


def _modules():
    """Dotted module name -> (file, is_package) for every module of the packages."""
    out = {}
    for name, base in PACKAGES.items():
        for path in sorted(base.rglob("*.py")):
            rel = path.relative_to(base.parent).with_suffix("")
            parts = list(rel.parts)
            is_pkg = parts[-1] == "__init__"
            if is_pkg:
                parts = parts[:-1]
            out[".".join(parts)] = (path, is_pkg)
    return out


def _resolve(module, is_pkg, level, target):
    """Absolute name of a relative import."""
    if not level:
        return target
    base = module.split(".") if is_pkg else module.split(".")[:-1]
    base = base[:len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def _walk_runtime(tree):
    """Every node except the bodies of ``if TYPE_CHECKING:`` blocks (imports for type hints only)."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            todo.extend(node.orelse)
            continue
        todo.extend(ast.iter_child_nodes(node))


def _lazy_nodes(tree):
    """A package's ``_LAZY = {name: "module"}`` literal as {name: the module string's AST node}, else {}."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "_LAZY" for t in node.targets) \
                and isinstance(node.value, ast.Dict):
            return {k.value: v for k, v in zip(node.value.keys, node.value.values)
                    if isinstance(k, ast.Constant) and isinstance(v, ast.Constant)}
    return {}


def _edges(module, tree, is_pkg, known, lazy):
    """Modules of the packages that ``module`` imports (any level) or names in a string constant.

    ``from pkg import name`` of a lazily exported name also reaches the module that defines it; the
    ``_LAZY`` map of a package is not itself a dependency of the package (it loads on attribute access)."""
    found = set()
    skip = {id(v) for v in lazy.get(module, {}).values()}  # this package's own _LAZY strings
    for node in _walk_runtime(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            pkg = _resolve(module, is_pkg, node.level, node.module or "")
            for alias in node.names:
                sub = f"{pkg}.{alias.name}"
                found.add(sub if sub in known else pkg)
                target = lazy.get(pkg, {}).get(alias.name)
                if target is not None:
                    found.add(target.value)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "." in node.value \
                and node.value in known and id(node) not in skip:
            found.add(node.value)
    return {m for m in found if m in known and m != module}


#: modules that import every module of a package by a name built at run time (``importlib.import_module(f"{pkg}.{x}")``,
#: invisible in the source): the ``hp-agent`` CLI loads each command module when its command runs
BY_NAME = {"hp_agent.cli": "hp_agent.commands."}


def import_graph():
    """module -> set of imported modules, over both packages."""
    known = _modules()
    trees = {m: ast.parse(path.read_text(encoding="utf-8"), str(path)) for m, (path, _) in known.items()}
    lazy = {m: _lazy_nodes(trees[m]) for m, (_, is_pkg) in known.items() if is_pkg}
    graph = {m: _edges(m, trees[m], is_pkg, known, lazy) for m, (_, is_pkg) in known.items()}
    for module, prefix in BY_NAME.items():
        graph[module] |= {m for m in known if m.startswith(prefix)}
    return graph


def find_cycles(graph):
    """Strongly connected components with more than one module (Tarjan): (one cycle through it, its members)."""
    index, low, stack, on_stack, comps = {}, {}, [], set(), []

    def visit(v):
        work = [(v, iter(sorted(graph[v])))]
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                if len(comp) > 1:
                    comps.append((_cycle_in(graph, set(comp)), sorted(comp)))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return comps


def _cycle_in(graph, comp):
    """One cycle inside a strongly connected component: start -> ... -> start (shortest back path)."""
    start = min(comp)
    prev, frontier = {start: None}, [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & comp):
                if w == start:
                    path = [v]
                    while prev[path[-1]] is not None:
                        path.append(prev[path[-1]])
                    return [start] + path[::-1][1:] + [start] if path[-1] == start else path[::-1] + [start]
                if w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return sorted(comp)


def test_the_cycle_finder_names_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}}
    assert find_cycles(graph) == [(["a", "b", "c", "a"], ["a", "b", "c"])]


def test_no_import_cycles():
    graph = import_graph()
    assert len(graph) > 100 and "hyper_parallel.core.ops.dispatch" in graph["hyper_parallel.platform.torch.dispatch"]
    assert "hp_agent.commands.check" in graph["hp_agent.cli"]  # the CLI's by-name loads are edges
    cycles = find_cycles(graph)
    assert not cycles, "import cycles:\n" + "\n".join(
        f"{' -> '.join(cycle)}  (strongly connected: {', '.join(members)})" for cycle, members in cycles)


def test_rule_modules_name_no_framework_even_inside_functions():
    """Rules are pure: no ``torch``/``mindspore`` and no backend module, at any level (their local
    computations that need a framework live with it, in ``platform/<backend>/expands.py``)."""
    known = _modules()
    rules = {m: path for m, (path, _) in known.items() if m.startswith("hyper_parallel.core.ops.rules")}
    bad = {}
    for module, path in rules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        hits = [n for n in names if n.split(".")[0] in ("torch", "mindspore")
                or n.startswith(("hyper_parallel.platform.torch", "hyper_parallel.platform.mindspore"))]
        if hits:
            bad[module] = hits
    assert len(rules) > 10 and not bad, bad


def test_rule_modules_import_without_any_framework():
    rules = sorted(m for m in _modules() if m.startswith("hyper_parallel.core.ops.rules."))
    assert len(rules) > 10
    code = textwrap.dedent(f"""
        import importlib, sys
        class Refuse:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("torch", "mindspore"):
                    raise ImportError(f"{{name}} is not importable in this test")
                return None
        sys.meta_path.insert(0, Refuse())
        for name in {rules!r}:
            importlib.import_module(name)
        from hyper_parallel.core.ops.registry import get_registry
        get_registry().validate()
        bad = [m for m in sys.modules if m.split(".")[0] in ("torch", "mindspore")]
        assert not bad, bad
        print("ok", len({rules!r}))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0 and proc.stdout.startswith("ok"), proc.stderr[-3000:]


def _backend_bound(module: str) -> bool:
    """Modules the layout lets import a framework at module level (docs/design/layout.md, sections 2-4)."""
    parts = module.split(".")
    return ("_torch" in parts or "_mindspore" in parts
            or module.startswith(("hyper_parallel.platform.torch", "hyper_parallel.platform.mindspore"))
            or (len(parts) > 2 and parts[1] == "models" and (ROOT / "hyper_parallel" / "models" / parts[2]).is_dir()))


def test_every_pure_module_imports_without_any_framework():
    """Outside ``_torch/``, ``_mindspore/``, ``platform/<backend>/`` and a model's own folder, every module
    of ``hyper_parallel`` imports with ``torch`` and ``mindspore`` unimportable (the layout's one rule for
    where frameworks live), and imports neither of them."""
    pure = sorted(m for m, (_, is_pkg) in _modules().items()
                  if m.startswith("hyper_parallel") and not _backend_bound(m) and not m.endswith("__main__"))
    assert len(pure) > 100, len(pure)
    code = textwrap.dedent(f"""
        import importlib, sys
        class Refuse:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("torch", "mindspore"):
                    raise ImportError(f"{{name}} is not importable in this test")
                return None
        sys.meta_path.insert(0, Refuse())
        failed = []
        for name in {pure!r}:
            try:
                importlib.import_module(name)
            except ImportError as exc:
                failed.append(f"{{name}}: {{exc}}")
        assert not failed, "\\n".join(failed)
        bad = [m for m in sys.modules if m.split(".")[0] in ("torch", "mindspore")]
        assert not bad, bad
        print("ok", len({pure!r}))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180, check=False)
    assert proc.returncode == 0 and proc.stdout.startswith("ok"), proc.stderr[-3000:]


#: the CLI's top layer: it imports every family; no family imports it (``checks.assets`` is handed the
#: click group it resolves skill commands in)
HP_AGENT_TOP = {"cli", "commands", "__main__"}


def test_no_hp_agent_family_imports_the_cli():
    """Nothing below the CLI imports it (at any level, lazily included): ``checks.assets`` resolving the
    skills' `hp-agent ...` lines is handed the click group by ``hp-agent check``."""
    upward = {m: sorted(d for d in deps if d.split(".")[1] in HP_AGENT_TOP) for m, deps in import_graph().items()
              if m.startswith("hp_agent.") and m.split(".")[1] not in HP_AGENT_TOP}
    assert not {m: d for m, d in upward.items() if d}, "hp_agent families import the CLI above them"


#: the single modules at the top of ``tools/hp_agent`` (the CLI and the pieces every family shares); a command
#: family's code lives in its own package
HP_AGENT_TOP_MODULES = {"__init__", "__main__", "cli", "cliutil", "assets", "config", "findings", "license",
                        "parsers", "redact", "repo", "rules"}


def test_every_hp_agent_command_family_is_a_package():
    """``hp-agent X`` (``commands/X.py``) has its package ``hp_agent/X`` (``git`` -> ``autogit``, ``hook`` ->
    ``hooks``, ``check`` -> ``checks``) unless it is a shared single module (``rules``); the top level holds no
    other module."""
    base = ROOT / "tools" / "hp_agent"
    top = {p.stem for p in base.glob("*.py")}
    assert top <= HP_AGENT_TOP_MODULES, f"family code at the top of tools/hp_agent: {sorted(top - HP_AGENT_TOP_MODULES)}"
    renamed = {"git": "autogit", "hook": "hooks", "check": "checks"}
    commands = {p.stem for p in (base / "commands").glob("*.py") if not p.stem.startswith("_")}
    homeless = {c for c in commands if not (base / renamed.get(c, c)).is_dir() and c not in HP_AGENT_TOP_MODULES}
    assert len(commands) > 8 and not homeless, f"commands without a family package: {sorted(homeless)}"


def test_hp_agent_families_form_no_circle_and_shared_is_below_them():
    """``tools/hp_agent``: one package per command family, the shared pieces below them (``shared``, and the
    single modules such as ``assets``, ``rules``, ``findings``): at package level no family reaches back to
    one that reaches it (``assistants`` <-> ``hooks`` / ``sync`` was such a circle), and ``shared`` imports
    no family."""
    graph = import_graph()

    def family(module):
        parts = module.split(".")
        return parts[1] if len(parts) > 1 else parts[0]
    packages = {}
    for module, deps in graph.items():
        if module.startswith("hp_agent."):
            packages.setdefault(family(module), set()).update(
                family(d) for d in deps if d.startswith("hp_agent.") and family(d) not in HP_AGENT_TOP)
    packages = {p: deps - {p} for p, deps in packages.items()}
    for deps in packages.values():
        for dep in deps:
            packages.setdefault(dep, set())
    assert find_cycles(packages) == [], "hp_agent packages import each other in a circle"
    families = {p for p in packages if (ROOT / "tools" / "hp_agent" / p).is_dir()} - {"shared"}
    assert not packages["shared"] & families, f"hp_agent.shared imports families {packages['shared'] & families}"
    assert packages["assistants"] <= {"shared", "assets", "rules", "findings"}, packages["assistants"]
