# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Unit tests of the commit message policy (the git-hook level tests are in test_hook_git.py)."""
from __future__ import annotations

import pytest

from hp_agent.checks.commit_msg import TYPES, check_commit_message, load_registry

REGISTRY = load_registry()


@pytest.mark.parametrize("agent,line", REGISTRY.examples())
def test_every_registered_agent_marker_is_rejected(agent, line):
    problems = check_commit_message(f"feat(core): add a thing\n\nSome body text.\n\n{line}\n")
    assert problems, f"{agent}: {line!r} was accepted"
    assert any(agent in p or "generic" in p for p in problems)


@pytest.mark.parametrize("line", REGISTRY.human_examples)
def test_human_co_authors_are_accepted(line):
    assert check_commit_message(f"fix(mesh): handle a size-1 dim\n\nBody.\n\n{line}\n") == []


@pytest.mark.parametrize("kind", TYPES)
def test_every_type_is_accepted(kind):
    assert check_commit_message(f"{kind}(scope): do the thing") == []
    assert check_commit_message(f"{kind}: do the thing") == []
    assert check_commit_message(f"{kind}(a,b)!: breaking thing") == []


@pytest.mark.parametrize("message,fragment", [
    ("", "empty"),
    ("add a thing", "not a Conventional Commit"),
    ("feature(x): add", "unknown type"),
    ("Feat(x): add", "not a Conventional Commit"),
    ("feat(x):add", "not a Conventional Commit"),
    ("feat(x): add a thing.", "period"),
    ("feat(x): " + "a" * 100, "limit is 100"),
    ("feat(x): ok\nbody right after", "line 2 must be blank"),
    ("feat(x): ok\n\n" + "word " * 30, "body limit"),
])
def test_bad_messages_are_rejected_with_a_reason(message, fragment):
    problems = check_commit_message(message)
    assert any(fragment in p for p in problems), problems


def test_mentioning_an_assistant_in_prose_is_fine():
    msg = ("feat(agent): map Claude Code, Cursor and Gemini hook events\n\n"
           "The Copilot and Codex payloads differ; aider is not covered.\n")
    assert check_commit_message(msg) == []


def test_trailers_are_exempt_from_length_and_comments_are_ignored():
    long_trailer = "Reviewed-by: " + "A Very Long Name " * 8 + "<x@example.org>"
    msg = f"docs(ci): explain\n\nWhy.\n\n{long_trailer}\n# Please enter the commit message\n"
    assert check_commit_message(msg) == []


def test_git_generated_headers_pass():
    assert check_commit_message("Merge branch 'feature' into main") == []
    assert check_commit_message("fixup! feat(x): add") == []
    assert check_commit_message('Revert "feat(x): add"\n\nThis reverts commit 0123abcd.') == []


def test_scissors_cut_the_verbose_diff():
    msg = ("feat(x): ok\n\n# ------------------------ >8 ------------------------\n"
           "Co-authored-by: Claude <noreply@anthropic.com>\n")
    assert check_commit_message(msg) == []
