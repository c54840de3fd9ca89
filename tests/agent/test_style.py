# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The style check: safe fixes (header, whitespace, newline, -> None) and the report."""
from __future__ import annotations

import ast

import pytest

from hp_agent.checks.style import add_none_returns, style_text
from hp_agent.license import has_license_header, license_header


def test_header_comes_from_one_place_and_matches_the_project_text():
    assert license_header(2026) == ("# Copyright 2026 The hyper-parallel Authors. All rights reserved.\n"
                                    "# SPDX-License-Identifier: Apache-2.0\n")
    with open(__file__, encoding="utf-8") as fh:
        assert has_license_header(fh.read())


def test_header_is_added_after_a_shebang_and_fix_is_idempotent():
    res = style_text('#!/usr/bin/env python3\n"""Doc."""\n', "tools/x.py")
    assert res.new_text.startswith("#!/usr/bin/env python3\n# Copyright ")
    assert style_text(res.new_text, "tools/x.py").new_text is None


@pytest.mark.parametrize("source,annotated", [
    ("def f(x: int):\n    print(x)\n", True),
    ("def f(x: int):\n    if x:\n        return\n    print(x)\n", True),
    ("def f(x: int):\n    return None\n", True),
    ("async def f(x: int):\n    await g(x)\n", True),
    ("def f(x: int):\n    def inner():\n        return 1\n    inner()\n", True),
    ("def f(x: int):\n    return x\n", False),
    ("def f(x: int):\n    yield x\n", False),
    ("def f(x: int):\n    raise ValueError(x)\n", False),
    ("def f(x: int):\n    ...\n", False),
    ("def _private(x: int):\n    print(x)\n", False),
    ("from abc import abstractmethod\nclass A:\n    @abstractmethod\n    def f(self):\n        print(1)\n", False),
    ("class A:\n    @property\n    def f(self):\n        print(1)\n", False),
    ("def f(x: int) -> int:\n    print(x)\n", False),
])
def test_none_return_is_added_only_when_provable(source, annotated):
    new, lines = add_none_returns(source)
    assert bool(lines) == annotated
    if annotated:
        tree = ast.parse(new)
        funcs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                 and n.name == "f"]
        assert isinstance(funcs[0].returns, ast.Constant) and funcs[0].returns.value is None


def test_multiline_signature_and_methods():
    src = ("class A:\n    def __init__(self, x: int,\n                 y: int):  # comment\n        self.x = x\n\n"
           "    def m(self, d: dict = {'a': (1, 2)}):\n        print(d)\n")
    new, lines = add_none_returns(src)
    assert lines == [2, 6]
    assert "y: int) -> None:  # comment" in new and "(1, 2)}) -> None:" in new


def test_whitespace_and_final_newline():
    res = style_text("a: 1   \nb: 2\n\n\n", "ci/x.yaml")
    assert res.new_text == "a: 1\nb: 2\n" and set(res.fixed) == {"trailing whitespace", "final newline"}


def test_markdown_keeps_hard_breaks_but_gets_a_newline():
    res = style_text("line  \nnext", "docs/x.md")
    assert res.new_text == "line  \nnext\n"


def test_report_lists_missing_docstrings_and_annotations_with_lines():
    src = license_header() + "def f(a, b: int):\n    return a\n\n\nclass K:\n    def g(self, c):\n        return c\n"
    res = style_text(src, "hyper_parallel/x.py")
    got = {(f.line, f.rule, f.message) for f in res.findings}
    assert (1, "missing-docstring", "module has no docstring") in got
    assert (3, "missing-docstring", "public function f has no docstring") in got
    assert (3, "missing-annotation", "f: parameter(s) without annotation: a") in got
    assert (3, "missing-annotation", "f: no return annotation") in got
    assert (7, "missing-docstring", "public class K has no docstring") in got
    assert (8, "missing-annotation", "K.g: parameter(s) without annotation: c") in got


def test_tests_are_fixed_but_not_reported():
    res = style_text("def test_x():\n    assert True\n", "tests/ut/test_x.py")
    assert res.findings == [] and "license header" in res.fixed
    assert "-> None" not in res.new_text


def test_syntax_error_is_reported_not_rewritten():
    res = style_text("def f(:\n", "tools/bad.py")
    assert res.findings[0].rule == "syntax-error" and res.findings[0].line == 1


def test_check_only_mode_reports_needed_fixes():
    res = style_text('"""Doc."""\n', "tools/y.py", fix=False)
    assert any(f.rule == "style-fixable" and "license header" in f.message for f in res.findings)


def test_cli_style_fix(tmp_repo, cli):
    from pathlib import Path
    root = Path(tmp_repo.working_tree_dir)
    (root / "m.py").write_text('"""Doc."""\n\n\ndef run(x: int):\n    """Run."""\n    print(x)\n')
    proc = cli(["check", "style", "--fix", "m.py"], cwd=root)
    assert proc.returncode == 0, proc.stdout
    assert "fixed license header" in proc.stdout and "-> None" in (root / "m.py").read_text()
