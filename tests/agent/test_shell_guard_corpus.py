# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The before-shell guard over a corpus of real command lines (tests/agent/data/shell_corpus.yaml).

Every line is decided in a real repository (branch ``feature``, a modified tracked file, an untracked file,
an ignored ``.venv/``, the commit-msg hook installed, a stash entry, a
branch ``topic`` with an unpushed commit, a branch ``merged`` holding nothing of its own, a worktree with an
uncommitted file, a git alias ``pf = push -f``); a sample of each decision also goes through the real
hook entry (``.agent/hooks/before-shell``) with each assistant's exact payload.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import subprocess
from pathlib import Path

import pytest
import yaml

from hp_agent.checks.shell_guard import GitContext, evaluate
from hp_agent.hooks.runner import run_assistant_hook

from .conftest import REPO
from .fakes.gitrepos import corpus_repo
from .test_hook_payloads import ASSISTANTS, shell_payload

CORPUS = yaml.safe_load((Path(__file__).parent / "data" / "shell_corpus.yaml").read_text(encoding="utf-8"))
ASKING = {"claude", "cursor"}


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    """A repository in the corpus' state (created once for the module: the corpus only reads it)."""
    return corpus_repo(tmp_path_factory.mktemp("corpus") / "repo")


def test_corpus_is_large_and_covers_every_decision():
    assert len(CORPUS) >= 60
    assert {e["expect"] for e in CORPUS} == {"allow", "block", "ask"}
    assert all(e.get("why") for e in CORPUS if e["expect"] != "allow")


@pytest.mark.parametrize("entry", CORPUS, ids=[e["cmd"].splitlines()[0][:60] for e in CORPUS])
def test_corpus_decision(work, entry):
    before = _git(work, "for-each-ref", "--format=%(refname)", "refs/heads/backup")
    verdict = evaluate(entry["cmd"], str(work))
    reasons = verdict.blocks + verdict.asks
    assert verdict.decision == entry["expect"], (entry["cmd"], reasons)
    if entry["expect"] != "allow":
        assert any(entry["why"] in r for r in reasons), (entry["why"], reasons)
    # the dirty repository never gets a backup branch and nothing changed in it
    assert _git(work, "for-each-ref", "--format=%(refname)", "refs/heads/backup") == before
    assert (work / "tools" / "x.py").read_text() == "X = 2\n" and (work / ".venv" / "marker").exists()


def _hook_env() -> dict:
    env = dict(os.environ)
    env.pop("HP_AGENT_BOOTSTRAP", None)
    return env


SAMPLE = [e for kind in ("allow", "block", "ask") for e in [x for x in CORPUS if x["expect"] == kind][:2]]


@pytest.mark.parametrize("assistant", ASSISTANTS)
def test_corpus_sample_through_the_real_hook(work, assistant):
    hook = REPO / ".agent" / "hooks" / "before-shell"
    for entry in SAMPLE:
        payload = json.dumps(shell_payload(assistant, entry["cmd"], work))
        proc = subprocess.run([str(hook), "--assistant", assistant], input=payload, capture_output=True, text=True,
                              cwd=work, env=_hook_env(), timeout=60, check=False)
        expect = entry["expect"]
        if expect == "ask" and assistant not in ASKING:
            expect = "block"  # no "ask" answer in this assistant: a block that says approval is needed
        if expect == "allow":
            assert proc.returncode == 0 and "blocked" not in proc.stderr, (entry["cmd"], proc.stderr)
            assert proc.stdout.strip() in ("", "{}"), proc.stdout  # no "allow" decision taken from the user
        elif expect == "block":
            assert proc.returncode == 2 and entry["why"] in proc.stderr, (entry["cmd"], proc.stderr)
        else:
            answer = json.loads(proc.stdout)
            assert proc.returncode == 0
            if assistant == "claude":
                assert answer["hookSpecificOutput"]["permissionDecision"] == "ask"
                assert entry["why"] in answer["hookSpecificOutput"]["permissionDecisionReason"]
            else:
                assert answer["permission"] == "ask" and entry["why"] in answer["agent_message"]


def test_ask_falls_back_to_an_explained_block(work):
    answer = run_assistant_hook("before-shell", json.dumps(shell_payload("gemini", "git reset --hard", work)),
                                "gemini")
    assert answer.exit_code == 2 and "needs the user's approval" in answer.stderr
    assert "let them run it themselves" in answer.stderr


def test_destructive_command_on_a_clean_tree_writes_a_backup_first(tmp_repo):
    root = Path(tmp_repo.working_tree_dir)
    head = tmp_repo.head.commit.hexsha
    verdict = evaluate("git reset --hard HEAD", str(root))
    assert verdict.decision == "allow"
    backups = _git(root, "for-each-ref", "--format=%(refname:short) %(objectname)", "refs/heads/backup").split()
    assert backups[0].startswith("backup/main/") and backups[1] == head
    assert "backed up as branch backup/main/" in verdict.notes[0]
    (root / "new.txt").write_text("untracked\n")
    assert evaluate("git reset --hard", str(root)).decision == "allow"  # untracked files survive a reset
    assert evaluate("git clean -fd", str(root)).decision == "ask"  # ...but not a clean


def test_claude_gets_the_backup_note(tmp_repo):
    root = Path(tmp_repo.working_tree_dir)
    answer = run_assistant_hook("before-shell", json.dumps(shell_payload("claude", "git checkout -- .", root)))
    assert answer.exit_code == 0 and "backed up as branch backup/main/" in json.loads(answer.stdout)["systemMessage"]


def test_push_without_refspec_on_a_protected_branch(tmp_repo):
    root = Path(tmp_repo.working_tree_dir)  # on main
    assert "force-pushing protected branch 'main'" in evaluate("git push --force-with-lease", str(root)).blocks[0]
    assert evaluate("git push", str(root)).decision == "allow"


def test_dynamic_message_needs_the_commit_msg_hook(tmp_repo):
    root = Path(tmp_repo.working_tree_dir)
    blocked = evaluate('git commit -m "$MSG"', str(root))
    assert blocked.decision == "block" and "commit-msg hook is not installed" in blocked.blocks[0]
    assert "make install" in blocked.blocks[0]
    hook = Path(tmp_repo.git_dir) / "hooks" / "commit-msg"
    hook.parent.mkdir(exist_ok=True)
    hook.write_text("#!/bin/sh\nexit 0\n")
    hook.chmod(0o755)
    assert evaluate('git commit -m "$MSG"', str(root)).decision == "allow"
    assert evaluate('git commit -m "$MSG"', str(root), bootstrap=True).decision == "block"


def test_message_file_is_read(tmp_repo):
    root = Path(tmp_repo.working_tree_dir)
    (root / "msg.txt").write_text("feat(x): y\n\nCo-authored-by: Cursor Agent <cursoragent@cursor.com>\n")
    assert "(Cursor)" in evaluate("git commit -F msg.txt", str(root)).blocks[0]
    (root / "msg.txt").write_text("feat(x): y\n\nCo-authored-by: Jane Doe <jane@example.org>\n")
    hooked = GitContext(str(root))
    assert evaluate("git commit --file=msg.txt", str(root), ctx=hooked).decision == "allow"


def test_removing_the_repository_from_outside_is_asked(tmp_repo):
    root = Path(tmp_repo.working_tree_dir)
    verdict = evaluate(f"rm -rf {root}", str(root.parent))
    assert verdict.decision == "ask" and ".git" in verdict.asks[0]
    assert shutil.which("git")


def test_the_fp_fn_count_reads_each_protocol(tmp_path):
    """``benchmarks/agent_guard.py`` (``make guard-corpus``) counts through the registered hook commands: a
    corpus with a wrong label each way gives one false positive and one false negative per assistant, and
    the rightly labelled lines count as neither (Cursor's ask, Codex's block for an ask)."""
    corpus = tmp_path / "corpus.yaml"
    corpus.write_text(yaml.safe_dump([
        {"cmd": "git push -f origin main", "expect": "allow"},  # mislabelled: the guard blocks it
        {"cmd": "ls -la", "expect": "block", "why": "x"},  # mislabelled: the guard allows it
        {"cmd": "git stash drop", "expect": "ask", "why": "stashed changes"},
        {"cmd": "git status", "expect": "allow"}]))
    out = tmp_path / "rows.json"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "agent_guard.py"), "--corpus", str(corpus),
                           "--assistant", "cursor", "--assistant", "codex", "--json", str(out)],
                          capture_output=True, text=True, timeout=600, check=False, env=_hook_env())
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rows = {r["assistant"]: r for r in json.loads(out.read_text())["rows"]}
    for name in ("cursor", "codex"):
        row = rows[name]
        assert (row["harmless"], row["dangerous"], row["false_positives"], row["false_negatives"],
                row["kind_mismatch"]) == (2, 2, 1, 1, 0), row
        assert row["fp"] == [["git push -f origin main", "block"]] and row["fn"] == [["ls -la", "allow"]]
    assert "cursor: false negative: 'ls -la' -> allow" in proc.stdout
