# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The style check run after every write (and, check-only, by the pre-commit hook).

Fixes (safe, idempotent): the license header on Python files (text from :mod:`hp_agent.license`), trailing
whitespace, the final newline, and ``-> None`` on public functions that provably return nothing (AST-checked:
no ``return <value>``, no ``yield``, not abstract/overload, not a body that only raises; the rewritten file
must parse to the same AST apart from the added annotations).

Reports (not fixable mechanically): missing parameter/return annotations and missing docstrings on public
modules, classes and functions, as ``path:line`` findings. Test files are exempt from the report.

Diff-aware: given the set of lines a change touched (:func:`hp_agent.checks.difflines.changed_lines`), only
those lines are fixed and reported (the license header only on a new file), so an edit is judged by what it
introduced, not by problems the file already had. A syntax error is always reported.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

from hp_agent.findings import Finding
from hp_agent.license import has_license_header, license_header

TEXT_SUFFIXES = {".py", ".pyi", ".yaml", ".yml", ".toml", ".cfg", ".ini", ".txt", ".sh", ".json", ".cpp", ".cc",
                 ".h", ".hpp", ".cu", ".cuh", ".groovy", ".mdc"}
MARKDOWN_SUFFIXES = {".md"}  # only the final newline: two trailing spaces are a Markdown line break
_NO_VALUE_DECORATORS = {"overload", "abstractmethod", "abstractproperty", "property", "cached_property"}


class StyleResult:  # pylint: disable=too-few-public-methods
    """What the style check did to (or found in) one file: fixes made or needed, findings, the new text."""

    __slots__ = ("path", "fixed", "findings", "new_text")

    def __init__(self, path: str) -> None:
        self.path = path
        self.fixed: list[str] = []
        self.findings: list[Finding] = []
        self.new_text: str | None = None


def _is_test_file(rel: str) -> bool:
    name = Path(rel).name
    return rel.startswith("tests/") or "/tests/" in rel or name.startswith("test_") or name == "conftest.py"


def _decorator_names(node: ast.AST) -> set[str]:
    names = set()
    for dec in getattr(node, "decorator_list", []):
        target = dec.func if isinstance(dec, ast.Call) else dec
        if isinstance(target, ast.Attribute):
            names.add(target.attr)
        elif isinstance(target, ast.Name):
            names.add(target.id)
    return names


def _own_nodes(func: ast.AST):
    """Yield the nodes of ``func``'s body, not descending into nested functions, lambdas or classes."""
    stack = list(ast.iter_child_nodes(func))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def _body_without_docstring(func: ast.AST) -> list[ast.stmt]:
    body = list(func.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]
    return body


def returns_nothing(func: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """True when ``func`` provably returns None: no valued return, no yield, not abstract, not raise-only."""
    if func.returns is not None or _decorator_names(func) & _NO_VALUE_DECORATORS:
        return False
    body = _body_without_docstring(func)
    if not body or all(isinstance(s, (ast.Raise, ast.Pass)) or
                       (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant) and s.value.value is ...)
                       for s in body):
        return False  # stub, abstract or raise-only: None would be a lie
    for node in _own_nodes(func):
        if isinstance(node, (ast.Yield, ast.YieldFrom)):
            return False
        if isinstance(node, ast.Return) and node.value is not None and \
                not (isinstance(node.value, ast.Constant) and node.value.value is None):
            return False
    return True


def _public_defs(tree: ast.Module):
    """Yield ``(node, qualified name)`` for public module-level functions/classes and their public methods."""
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
            yield node, node.name
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            yield node, node.name
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                        (not item.name.startswith("_") or item.name == "__init__"):
                    yield item, f"{node.name}.{item.name}"


def _colon_offsets(source: str, funcs: list[ast.AST]) -> dict[int, tuple[int, int]]:
    """Map each function's def line to the (row, col) of the ':' that ends its header."""
    import io  # pylint: disable=import-outside-toplevel  # only when there is something to annotate
    import tokenize  # pylint: disable=import-outside-toplevel

    wanted = {f.lineno for f in funcs}
    result: dict[int, tuple[int, int]] = {}
    current, depth = None, 0
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if current is None:
            if tok.type == tokenize.NAME and tok.string == "def" and tok.start[0] in wanted:
                current, depth = tok.start[0], 0
            continue
        if tok.type == tokenize.OP and tok.string in "([{":
            depth += 1
        elif tok.type == tokenize.OP and tok.string in ")]}":
            depth -= 1
        elif tok.type == tokenize.OP and tok.string == ":" and depth == 0:
            result[current] = tok.start
            current = None
    return result


def add_none_returns(source: str, lines: set[int] | None = None,
                     tree: ast.Module | None = None) -> tuple[str, list[int]]:
    """Add ``-> None`` to public functions that provably return nothing (whose ``def`` line is in ``lines``,
    when given); return (new source, def lines). ``tree``: ``source`` already parsed (not modified)."""
    tree = tree if tree is not None else ast.parse(source)
    targets = [n for n, _ in _public_defs(tree)
               if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and returns_nothing(n)
               and (lines is None or n.lineno in lines)]
    if not targets:
        return source, []
    colons = _colon_offsets(source, targets)
    src_lines = source.splitlines(keepends=True)
    for lineno in sorted(colons, reverse=True):
        row, col = colons[lineno]
        line = src_lines[row - 1]
        src_lines[row - 1] = line[:col].rstrip() + " -> None" + line[col:]
    new_source = "".join(src_lines)
    new_tree = ast.parse(new_source)
    for node in ast.walk(new_tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.lineno in colons:
            node.returns = None
    if ast.dump(new_tree) != ast.dump(tree):
        raise RuntimeError("the -> None rewrite changed more than the annotations; refusing to write it")
    return new_source, sorted(colons)


def _with_header(text: str) -> str:
    lines = text.splitlines(keepends=True)
    keep = 0
    while keep < len(lines) and keep < 2 and (lines[keep].startswith("#!") or
                                              ("coding" in lines[keep] and lines[keep].startswith("#"))):
        keep += 1
    return "".join(lines[:keep]) + license_header() + "".join(lines[keep:])


def _annotation_findings(node: ast.FunctionDef | ast.AsyncFunctionDef, qual: str, rel: str) -> list[Finding]:
    args = node.args
    params = [*args.posonlyargs, *args.args, *args.kwonlyargs]
    params += [a for a in (args.vararg, args.kwarg) if a is not None]
    missing = [a.arg for i, a in enumerate(params)
               if a.annotation is None and not (i == 0 and a.arg in ("self", "cls"))]
    out = []
    if missing:
        out.append(Finding(rel, node.lineno, "missing-annotation",
                           f"{qual}: parameter(s) without annotation: {', '.join(missing)}"))
    if node.returns is None:
        out.append(Finding(rel, node.lineno, "missing-annotation", f"{qual}: no return annotation"))
    return out


def _report(tree: ast.Module, rel: str) -> list[Finding]:
    findings = []
    if ast.get_docstring(tree) is None and tree.body:
        findings.append(Finding(rel, 1, "missing-docstring", "module has no docstring"))
    for node, qual in _public_defs(tree):
        is_class = isinstance(node, ast.ClassDef)
        if ast.get_docstring(node) is None and node.name != "__init__":
            kind = "class" if is_class else "function"
            findings.append(Finding(rel, node.lineno, "missing-docstring", f"public {kind} {qual} has no docstring"))
        if not is_class:
            findings.extend(_annotation_findings(node, qual, rel))
    return findings


def _touches_end(text: str, lines: set[int] | None) -> bool:
    if lines is None:
        return True
    count = len(text.split("\n"))
    return bool(lines & {count - 1, count, count + 1})


def _whitespace_fixes(text: str, suffix: str, res: StyleResult, lines: set[int] | None) -> str:
    new = text
    if suffix in TEXT_SUFFIXES:
        stripped = "\n".join(line.rstrip() if lines is None or number in lines else line
                             for number, line in enumerate(new.split("\n"), start=1))
        if stripped != new:
            res.fixed.append("trailing whitespace")
            new = stripped
    extra_blank = new.endswith("\n\n") and suffix not in MARKDOWN_SUFFIXES  # a blank last line is harmless in Markdown
    if ((new and not new.endswith("\n")) or extra_blank) and _touches_end(new, lines):
        res.fixed.append("final newline")
        new = new.rstrip("\n") + "\n"
    return new


def _python_fixes(text: str, rel: str, res: StyleResult, lines: set[int] | None) -> str:
    try:
        tree = ast.parse(text)
    except SyntaxError as exc:
        res.findings.append(Finding(rel, exc.lineno, "syntax-error", str(exc.msg)))
        return text
    new = text
    if new.strip() and not has_license_header(new) and lines is None:
        res.fixed.append("license header")
        new = _with_header(new)
        tree = ast.parse(new)
    if not _is_test_file(rel):
        new, fixed_lines = add_none_returns(new, lines, tree)
        res.fixed.extend(f"added '-> None' at line {n}" for n in fixed_lines)
        tree = ast.parse(new) if fixed_lines else tree  # reparse only when annotations were added
        res.findings.extend(f for f in _report(tree, rel) if lines is None or f.line in lines)
    return new


def _fixable(rel: str, what: str) -> Finding:
    m = re.fullmatch(r"added '-> None' at line (\d+)", what)
    if m:
        return Finding(rel, int(m.group(1)), "style-fixable", "needs fix: add '-> None' (the function returns nothing)")
    return Finding(rel, None, "style-fixable", f"needs fix: {what}")


def style_text(text: str, rel: str, fix: bool = True, lines: set[int] | None = None) -> StyleResult:
    """Run the style check on ``text`` (the content of ``rel``) and return fixes made or needed, and findings.

    ``lines``: only these (1-based) lines are fixed and reported; None checks the whole file.
    """
    res = StyleResult(path=rel)
    suffix = Path(rel).suffix
    if suffix not in TEXT_SUFFIXES | MARKDOWN_SUFFIXES:
        return res
    new = _whitespace_fixes(text, suffix, res, lines)
    if suffix in (".py", ".pyi"):
        new = _python_fixes(new, rel, res, lines)
    if not fix:
        res.findings[:0] = [_fixable(rel, what) for what in res.fixed]
    res.new_text = new if new != text else None
    return res


def style_file(path: Path, rel: str, fix: bool = True, lines: set[int] | None = None) -> StyleResult:
    """Run :func:`style_text` on a file (only ``lines``, when given); with ``fix`` the fixes are written back."""
    text = path.read_text(encoding="utf-8")
    res = style_text(text, rel, fix=fix, lines=lines)
    if fix and res.new_text is not None:
        path.write_text(res.new_text, encoding="utf-8")
    return res
