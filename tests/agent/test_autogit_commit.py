# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""autogit commit as git does it (the index, named paths, --all), secrets refused, paragraphs, squash
co-authors, the base branch from the upstream's HEAD, and backup branches (reused, listed, pruned).

Real git repositories (a bare upstream, a bare fork, a clone), the hp-agent CLI in process.
"""
from __future__ import annotations

import datetime as _dt
import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fakes.gitrepos import git, isolated_repos  # noqa: E402
from hp_agent.autogit import backups, flows  # noqa: E402
from hp_agent.autogit.gitcmd import Git  # noqa: E402
from hp_agent.autogit.safety import backup_branch  # noqa: E402
from hp_agent.cli import cli  # noqa: E402
from hp_agent.config import load_config  # noqa: E402

PRIVATE_KEY = "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA7bq\n-----END RSA PRIVATE KEY-----\n"


@pytest.fixture()
def repos(tmp_path, monkeypatch):
    """Working clone on branch ``topic`` with remotes upstream + origin (fork), isolated git config."""
    return isolated_repos(tmp_path, monkeypatch)


def run(*args: str):
    """Invoke ``hp-agent`` in process."""
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def committed(work: Path) -> list[str]:
    """``status<TAB>path`` of the last commit."""
    return sorted(git(work, "show", "--name-status", "--format=", "HEAD").splitlines())


def untracked(work: Path) -> set[str]:
    """Untracked paths of the clone."""
    out = git(work, "status", "--porcelain", "--untracked-files=all").splitlines()
    return {line[3:] for line in out if line.startswith("??")}


def _ops_scene(r) -> None:
    """The issue's scene: op c staged; another op's file, a notes file and .env.local lying around."""
    r.write("hyper_parallel/core/ops/rules/op_c.py", "C = 1\n")
    git(r.work, "add", "hyper_parallel/core/ops/rules/op_c.py")
    r.write("hyper_parallel/core/ops/rules/op_d.py", "D = 1\n")
    r.write("notes.txt", "my notes\n")
    r.write(".env.local", "API_TOKEN=abc\n")


def test_commit_takes_the_index_like_git(repos):
    _ops_scene(repos)
    res = run("git", "commit", "-m", "feat(ops): add op c")
    assert res.exit_code == 0, res.output
    assert committed(repos.work) == ["A\thyper_parallel/core/ops/rules/op_c.py"]
    assert untracked(repos.work) == {"hyper_parallel/core/ops/rules/op_d.py", "notes.txt", ".env.local"}


def test_commit_with_nothing_staged_refuses_and_names_the_ways(repos):
    repos.write("notes.txt", "my notes\n")
    head = repos.sha()
    res = run("git", "commit", "-m", "docs(notes): add notes")
    assert res.exit_code == 2 and "nothing staged" in res.stderr and "--all" in res.stderr
    assert repos.sha() == head


def test_commit_paths_commits_exactly_them(repos):
    _ops_scene(repos)
    res = run("git", "commit", "-m", "feat(ops): add op d", "hyper_parallel/core/ops/rules/op_d.py", "notes.txt")
    assert res.exit_code == 0, res.output
    assert committed(repos.work) == ["A\thyper_parallel/core/ops/rules/op_d.py", "A\tnotes.txt"]
    staged = git(repos.work, "diff", "--cached", "--name-only").splitlines()
    assert staged == ["hyper_parallel/core/ops/rules/op_c.py"]  # still staged, not committed
    assert untracked(repos.work) == {".env.local"}


def test_repeated_messages_are_paragraphs(repos):
    repos.write("docs/guide.md", "# guide\n")
    res = run("git", "commit", "-m", "docs(guide): add the guide", "-m", "First paragraph.", "-m", "Second.",
              "docs/guide.md")
    assert res.exit_code == 0, res.output
    assert git(repos.work, "log", "-1", "--format=%B") == "docs(guide): add the guide\n\nFirst paragraph.\n\nSecond."


@pytest.mark.parametrize("name,text,why", [
    (".env.local", "API_TOKEN=abc\n", ".env.local: the name of a file that holds secrets"),
    ("config/deploy.pem", "anything\n", "deploy.pem: the name"),
    ("hyper_parallel/core/keys.py", PRIVATE_KEY, "keys.py:1: Private Key"),
    ("tools/ci.py", 'TOKEN = "ghp_abcdefghijklmnopqrstuvwxyz0123456789"\n', "GitHub Token"),
])
def test_secrets_are_refused_unless_told(repos, name, text, why):
    repos.write(name, text)
    head = repos.sha()
    res = run("git", "commit", "--all", "-m", "feat(core): add config")
    assert res.exit_code == 2 and why in res.stderr, res.stderr
    assert repos.sha() == head and name in untracked(repos.work)  # nothing staged or committed
    res = run("git", "commit", "--all", "--allow-secrets", "-m", "feat(core): add config")
    assert res.exit_code == 0, res.output
    assert committed(repos.work) == [f"A\t{name}"]


def test_staged_secret_is_scanned_as_staged(repos):
    """The index's content is what gets committed, so that is what is scanned."""
    repos.write("tools/ci.py", 'TOKEN = "ghp_abcdefghijklmnopqrstuvwxyz0123456789"\n')
    git(repos.work, "add", "tools/ci.py")
    repos.write("tools/ci.py", "TOKEN = None\n")  # cleaned in the work tree only
    res = run("git", "commit", "-m", "ci(tools): add ci")
    assert res.exit_code == 2 and "tools/ci.py:1: GitHub Token" in res.stderr


def test_example_env_files_and_clean_code_pass(repos):
    repos.write(".env.example", "API_TOKEN=\n")
    repos.write("hyper_parallel/core/util.py", "def size(x):\n    return len(x)\n")
    res = run("git", "commit", "--all", "-m", "feat(core): add util")
    assert res.exit_code == 0, res.output


def test_squash_keeps_every_other_author_as_co_author(repos):
    repos.write("hyper_parallel/core/a.py", "A = 1\n")
    repos.commit("feat(core): add a", "hyper_parallel/core/a.py")
    repos.write("hyper_parallel/core/b.py", "B = 1\n")
    git(repos.work, "add", "hyper_parallel/core/b.py")
    git(repos.work, "-c", "user.name=Co Worker", "-c", "user.email=co@example.org", "commit", "-q", "-m",
        "feat(core): add b")
    repos.write("hyper_parallel/core/c.py", "C = 1\n")
    git(repos.work, "add", "hyper_parallel/core/c.py")
    git(repos.work, "-c", "user.name=Third Person", "-c", "user.email=third@example.org", "commit", "-q", "-m",
        "feat(core): add c")
    for args in (("git", "squash", "--json"), ("git", "squash", "-m", "feat(core): add a, b and c", "--json")):
        if "-m" in args:  # squash again from the three commits
            git(repos.work, "reset", "-q", "--hard", json.loads(res.stdout)["backup"])
        res = run(*args)
        assert res.exit_code == 0, res.output
        body = git(repos.work, "log", "-1", "--format=%B")
        assert "Co-authored-by: Co Worker <co@example.org>" in body
        assert "Co-authored-by: Third Person <third@example.org>" in body
        assert "Test User" not in body and git(repos.work, "log", "-1", "--format=%an") == "Test User"


def test_base_branch_comes_from_the_upstreams_head(repos):
    git(repos.work, "push", "-q", "upstream", "master:main")
    git(repos.upstream, "symbolic-ref", "HEAD", "refs/heads/main")
    work = Git(repos.work)
    git(repos.work, "remote", "set-head", "upstream", "--delete")
    assert flows.base_branch(work, load_config(repos.work)) == "main"  # asked with ls-remote --symref
    git(repos.work, "remote", "set-head", "upstream", "master")  # a remote-tracking HEAD wins (no network)
    assert flows.base_branch(work, load_config(repos.work)) == "master"
    (repos.work / ".hp-agent.toml").write_text('[git]\nbase = "release/1.0"\n')
    assert flows.base_branch(work, load_config(repos.work)) == "release/1.0"


def test_backups_are_reused_listed_and_pruned(repos):
    work = Git(repos.work)
    day = _dt.datetime(2026, 1, 31, 12, tzinfo=_dt.timezone.utc)
    first = backup_branch(work, "topic", lambda: day)
    again = backup_branch(work, "topic", lambda: day + _dt.timedelta(hours=1))
    assert first == again == "backup/topic/20260131T120000Z"  # same commit: no second branch
    for when in ("20251101T000000Z", "20251201T000000Z", "20260101T000000Z"):
        repos.write("hyper_parallel/core/x.py", f"X = '{when}'\n")
        sha = repos.commit(f"feat(core): x {when}", "hyper_parallel/core/x.py")
        git(repos.work, "branch", f"backup/topic/{when}", sha)
    listed = json.loads(run("git", "backups", "--max-age-days", "100000", "--json").stdout)
    assert len(listed["backups"]) == 4 and listed["would_prune"] == []
    res = run("git", "backups", "--prune", "--keep", "3", "--max-age-days", "100000", "--json")
    assert res.exit_code == 0, res.output
    pruned = [b["name"] for b in json.loads(res.stdout)["pruned"]]
    assert pruned == ["backup/topic/20251101T000000Z"]  # beyond the 3 newest
    left = git(repos.work, "for-each-ref", "--format=%(refname:short)", "refs/heads/backup").split()
    assert left == ["backup/topic/20251201T000000Z", "backup/topic/20260101T000000Z", first]
    by_age = backups.to_prune(backups.list_backups(work), day, keep=10, max_age_days=45)
    assert [b.name for b in by_age] == ["backup/topic/20251201T000000Z"]  # 61 days old; the newest always stays
    text = run("git", "backups").stdout
    assert "backup/topic/20260101T000000Z" in text and "3 backup branch(es)" in text
    with pytest.raises(ValueError):
        backups.to_prune([], day, keep=-1)


def test_dist_op_dev_commits_one_op_with_the_plans_message(repos):
    """`dist-op dev --commit`: the op's plan, report and generated files, nothing else, one commit."""
    from types import SimpleNamespace  # pylint: disable=import-outside-toplevel

    from hp_agent.commands.dist_op import commit_op, op_commit_message  # pylint: disable=import-outside-toplevel

    root = repos.work
    files = ["hyper_parallel/core/ops/yaml/generated.yaml", "tests/ut/ops/generated/cases/torch_gcd.yaml",
             "tests/st/torch/ops/generated/cases/torch_gcd.yaml"]
    for rel in files + ["plans/torch.gcd.md", "plans/torch.gcd.report.md"]:
        repos.write(rel, f"# {rel}\n")
    repos.write("hyper_parallel/core/ops/rules/other_op.py", "X = 1\n")  # another op's work: stays out
    plan = SimpleNamespace(op="torch.gcd", path=root / "plans/torch.gcd.md",
                           meta={"path": "A", "rule": {"class": "ElementwiseRule", "file": None}})
    result = SimpleNamespace(report=root / "plans/torch.gcd.report.md", files=files)
    layout = SimpleNamespace(root=root, path=lambda rel: root / rel)
    out = commit_op(layout, plan, result)
    assert out["message"] == "feat(ops): distributed torch.gcd (YAML, UT, ST)"
    assert git(root, "log", "-1", "--format=%s") == "feat(ops): distributed torch.gcd (YAML, UT, ST)"
    assert committed(root) == sorted(f"A\t{p}" for p in files + ["plans/torch.gcd.md", "plans/torch.gcd.report.md"])
    assert untracked(root) == {"hyper_parallel/core/ops/rules/other_op.py"}
    plan.meta = {"path": "B", "rule": {"class": "GcdRule", "file": "hyper_parallel/core/ops/rules/gcd.py"}}
    assert op_commit_message(plan) == "feat(ops): distributed torch.gcd (rule, YAML, UT, ST)"


def test_a_named_digest_is_not_a_secret_but_the_same_hex_as_a_token_is():
    """The generated op files record their plan's sha256 (``plan_sha256: e7235bf3c5bdb38d``): dev --commit
    must be able to commit them, while the same hex string assigned to a token stays refused."""
    from hp_agent.autogit.secrets import scan_texts
    hexes = "e7235bf3c5bd9a1c0f2e4d6b8a0c2e4fdeadbeef01"
    digests = {"cases.yaml": f"op: torch.gcd\nplan_sha256: {hexes}\n".encode(),
               "generated.yaml": f'torch.gcd:\n  rule: ElementwiseRule\n  plan_sha256: "{hexes}"\n'.encode(),
               "lock.json": f'{{\n  "sha256": "{hexes}",\n  "commit": "{hexes}"\n}}\n'.encode()}
    assert scan_texts(digests) == []
    registry = "".join(f'torch.op{i}:\n  rule: ElementwiseRule\n  doc: "plans/torch.op{i}.md"\n'
                       f'  plan_sha256: "{i:02d}{hexes[2:16]}"\n' for i in range(40))
    assert scan_texts({"hyper_parallel/core/ops/yaml/generated.yaml": registry.encode()}) == []
    assert scan_texts({"tools/ci.py": f'API_TOKEN = "{hexes}"\n'.encode()}) == \
        ["tools/ci.py:1: Hex High Entropy String"]
