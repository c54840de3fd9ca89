# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""autogit end to end: real git repos (bare upstream + fork), a local GitCode v5 fake, the hp-agent CLI."""
from __future__ import annotations

import datetime as _dt
import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fakes import FakeForge  # noqa: E402
from fakes.gitrepos import git, isolated_repos  # noqa: E402
from hp_agent.autogit import flows  # noqa: E402
from hp_agent.autogit.gitcmd import AutogitRefused, Git  # noqa: E402
from hp_agent.autogit.safety import push  # noqa: E402
from hp_agent.cli import cli  # noqa: E402
from hp_agent.config import load_config  # noqa: E402
from hp_agent.gate_doctor.clock import Clock  # noqa: E402

TOKEN = "s3cr3t-t0ken-value"
YEAR = _dt.datetime.now(_dt.timezone.utc).year


@pytest.fixture()
def repos(tmp_path, monkeypatch):
    """Working clone on branch ``topic`` with remotes upstream + origin (fork), isolated git config."""
    return isolated_repos(tmp_path, monkeypatch)


@pytest.fixture()
def forge(monkeypatch):
    """The fake code host, configured through the environment."""
    with FakeForge(Clock()) as f:
        monkeypatch.setenv("HP_AGENT_CODEHOST_API", f.api)
        monkeypatch.setenv("HP_AGENT_CODEHOST_TOKEN", TOKEN)
        yield f


def run(*args: str, input_text: str | None = None):
    """Invoke ``hp-agent`` in process."""
    return CliRunner().invoke(cli, list(args), input=input_text, catch_exceptions=False)


def status_porcelain(work: Path) -> str:
    """``git status --porcelain`` of the clone."""
    return git(work, "status", "--porcelain", "--untracked-files=all")


def make_changes(r) -> None:
    """Modified tracked file, new untracked file, deletion, and an ignored file."""
    r.write("hyper_parallel/core/mesh.py", (r.work / "hyper_parallel/core/mesh.py").read_text() + "OTHER = 2\n")
    r.write("hyper_parallel/core/placement.py", '"""Placement."""\n')
    (r.work / "README.md").unlink()
    r.write("debug.log", "ignored\n")


# -- commit ------------------------------------------------------------------------------------------
def test_commit_without_tty_or_message_refuses_and_stages_nothing(repos):
    make_changes(repos)
    before = status_porcelain(repos.work)
    head = repos.sha()
    res = run("git", "commit", "--all")
    assert res.exit_code == 2
    assert "Show the files and the message above to the user first" in res.stderr
    assert "hyper_parallel/core/placement.py" in res.stdout and "feat(core)" in res.stdout
    assert repos.sha() == head and status_porcelain(repos.work) == before


def test_commit_plan_lists_untracked_not_ignored_and_drafts_type_scope(repos):
    make_changes(repos)
    res = run("git", "commit", "--all", "--dry-run", "--json")
    plan = json.loads(res.stdout)
    files = {f["path"]: f["kind"] for f in plan["files"]}
    assert files == {"README.md": "deleted", "hyper_parallel/core/mesh.py": "modified",
                     "hyper_parallel/core/placement.py": "untracked"}
    assert plan["drafted_message"].startswith("feat(core): ")


def test_commit_with_message_commits_everything_and_discards_nothing(repos):
    make_changes(repos)
    res = run("git", "commit", "--all", "-m", "feat(core): add placement")
    assert res.exit_code == 0, res.output
    committed = git(repos.work, "show", "--name-status", "--format=", "HEAD").splitlines()
    assert sorted(committed) == ["A\thyper_parallel/core/placement.py", "D\tREADME.md",
                                 "M\thyper_parallel/core/mesh.py"]
    assert (repos.work / "debug.log").read_text() == "ignored\n"
    assert status_porcelain(repos.work) == ""
    assert git(repos.work, "log", "-1", "--format=%s") == "feat(core): add placement"


def test_commit_updates_only_this_projects_header_year(repos):
    repos.write("hyper_parallel/core/mesh.py", (repos.work / "hyper_parallel/core/mesh.py").read_text() + "Z = 3\n")
    third = repos.work / "hyper_parallel/vendor/vendored.py"
    third.write_text(third.read_text() + "Y = 2\n")
    res = run("git", "commit", "--all", "--yes", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["copyright_updated"] == ["hyper_parallel/core/mesh.py"]
    mesh = git(repos.work, "show", "HEAD:hyper_parallel/core/mesh.py")
    assert mesh.startswith(f"# Copyright 2024-{YEAR} The hyper-parallel Authors. All rights reserved.")
    assert git(repos.work, "show", "HEAD:hyper_parallel/vendor/vendored.py").startswith(
        "# Copyright 2024 Huawei Technologies")


def test_commit_message_policy_rejects_and_leaves_tree_alone(repos):
    make_changes(repos)
    before = status_porcelain(repos.work)
    res = run("git", "commit", "--all", "-m", "updated stuff")
    assert res.exit_code == 2
    assert "not a Conventional Commit" in res.stderr
    assert status_porcelain(repos.work) == before


def test_commit_interactive_confirmation(repos, monkeypatch):
    monkeypatch.setattr("hp_agent.commands.git.is_interactive", lambda: True)
    repos.write("docs/guide.md", "# guide\n")
    res = run("git", "commit", "--all", input_text="y\n")
    assert res.exit_code == 0, res.output
    assert git(repos.work, "log", "-1", "--format=%s") == "docs(docs): add guide.md"


def test_commit_interactive_decline_commits_nothing(repos, monkeypatch):
    monkeypatch.setattr("hp_agent.commands.git.is_interactive", lambda: True)
    repos.write("docs/guide.md", "# guide\n")
    head = repos.sha()
    res = run("git", "commit", "--all", input_text="n\n")
    assert res.exit_code == 2 and repos.sha() == head


# -- history rewrites ----------------------------------------------------------------------------------
def _two_commits(r) -> None:
    r.write("hyper_parallel/core/a.py", "A = 1\n")
    r.commit("feat(core): add a", "hyper_parallel/core/a.py")
    r.write("hyper_parallel/core/b.py", "B = 1\n")
    r.commit("fix(core): add b\n\nFixes #12", "hyper_parallel/core/b.py")


def test_squash_leaves_backup_branch_and_same_tree(repos):
    _two_commits(repos)
    tip, tree = repos.sha(), repos.sha("HEAD^{tree}")
    res = run("git", "squash", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["backup"].startswith("backup/topic/") and out["backup"].endswith("Z")
    assert repos.sha(out["backup"]) == tip
    assert repos.sha("HEAD^{tree}") == tree
    assert repos.sha("HEAD^") == repos.sha("upstream/master")
    assert "Fixes #12" in git(repos.work, "log", "-1", "--format=%B")


def test_squash_push_uses_force_with_lease_to_fork(repos):
    _two_commits(repos)
    git(repos.work, "push", "-q", "origin", "HEAD:refs/heads/topic")
    res = run("git", "squash", "--push", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert "--force-with-lease=refs/heads/topic:" in out["push"]
    assert repos.remote_sha(repos.fork, "topic") == repos.sha()
    assert repos.remote_sha(repos.upstream, "topic") is None


def _coworker_pushes(r, tmp_path, name: str = "coworker") -> str:
    """A co-worker clones the fork, commits a file on ``topic`` and pushes it; returns the commit's sha."""
    other = tmp_path / name
    if not other.exists():
        git(tmp_path, "clone", "-q", "-b", "topic", str(r.fork), str(other))
    else:
        git(other, "pull", "-q", "--rebase", "origin", "topic")
    (other / f"{name}.txt").write_text("their work\n")
    git(other, "add", f"{name}.txt")
    git(other, "-c", "user.name=Co Worker", "-c", "user.email=co@example.org", "commit", "-q", "-m",
        f"docs(notes): {name} adds notes")
    git(other, "push", "-q", "origin", "topic")
    return git(other, "rev-parse", "HEAD")


def _remote_backups(r) -> list[str]:
    return git(r.work, "for-each-ref", "--format=%(refname:short)", "refs/heads/backup/origin/topic").split()


@pytest.mark.parametrize("command", [("git", "squash", "--push"), ("git", "rebase", "--push")])
def test_coworker_commit_on_the_fork_is_never_overwritten(repos, tmp_path, command):
    _two_commits(repos)
    git(repos.work, "push", "-q", "origin", "HEAD:refs/heads/topic")  # origin/topic = our tip
    theirs = _coworker_pushes(repos, tmp_path)  # we never fetch it
    tip = repos.sha()
    res = run(*command)
    assert res.exit_code == 2, res.output
    assert "commits you have not seen" in res.stderr and "coworker adds notes" in res.stderr
    assert repos.remote_sha(repos.fork, "topic") == theirs  # their commit is still on the fork
    assert repos.sha() == tip and not git(repos.work, "branch", "--list", "backup/topic/*")  # nothing rewritten
    backups = _remote_backups(repos)
    assert len(backups) == 1 and repos.sha(backups[0]) == theirs


def test_pr_squash_and_update_force_refuse_too(repos, forge, tmp_path):
    _two_commits(repos)
    git(repos.work, "push", "-q", "origin", "HEAD:refs/heads/topic")
    theirs = _coworker_pushes(repos, tmp_path)
    forge.add_pr(9, theirs, head_ref="topic")
    for command in (("git", "pr", "--squash"), ("git", "update", "9", "--force")):
        res = run(*command)
        assert res.exit_code == 2 and "coworker adds notes" in res.stderr, (command, res.output)
        assert repos.remote_sha(repos.fork, "topic") == theirs
    assert not forge.prs[9]["title"].startswith("feat(core)") and len(forge.prs) == 1


def test_fetched_but_not_integrated_is_refused_then_integrated_goes_through(repos, tmp_path):
    _two_commits(repos)
    git(repos.work, "push", "-q", "origin", "HEAD:refs/heads/topic")
    theirs = _coworker_pushes(repos, tmp_path)
    git(repos.work, "fetch", "-q", "origin")  # the lease would now match: the tip is still not ours
    res = run("git", "squash", "--push")
    assert res.exit_code == 2 and "holds commits your branch never contained" in res.stderr
    assert repos.remote_sha(repos.fork, "topic") == theirs
    git(repos.work, "rebase", "-q", "origin/topic")  # integrate their commit
    res = run("git", "squash", "--push", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert repos.remote_sha(repos.fork, "topic") == repos.sha()
    assert git(repos.work, "show", "HEAD:coworker.txt") == "their work"  # their work is in the squash
    assert repos.sha(out["remote_backup"]) == theirs and out["remote_backup"].startswith("backup/origin/topic/")
    assert f"--force-with-lease=refs/heads/topic:{theirs}" in out["push"]


def test_a_push_racing_the_rewrite_is_refused_by_the_lease_and_rolled_back(repos, tmp_path, monkeypatch):
    _two_commits(repos)
    git(repos.work, "push", "-q", "origin", "HEAD:refs/heads/topic")
    tip = repos.sha()
    real = flows.prepare_rewrite_push

    def prepare_then_race(*args, **kwargs):
        plan = real(*args, **kwargs)
        _coworker_pushes(repos, tmp_path, "racer")  # lands between the check and our push
        return plan
    monkeypatch.setattr(flows, "prepare_rewrite_push", prepare_then_race)
    res = run("git", "squash", "--push")
    assert res.exit_code == 1 and ("stale info" in res.stderr or "rejected" in res.stderr), res.output
    assert repos.sha() == tip  # rolled back
    assert git(repos.fork, "log", "-1", "--format=%s", "topic") == "docs(notes): racer adds notes"


def test_rewrites_refuse_to_push_to_the_upstream_repository(repos):
    _two_commits(repos)
    git(repos.work, "remote", "set-url", "origin", str(repos.upstream))  # "origin" is upstream's URL
    tip = repos.sha()
    for command in (("git", "squash", "--push"), ("git", "rebase", "--push")):
        res = run(*command)
        assert res.exit_code == 2 and "points at the upstream repository" in res.stderr, res.output
        assert repos.sha() == tip and repos.remote_sha(repos.upstream, "topic") is None
    with pytest.raises(AutogitRefused, match="upstream repository"):
        push(Git(repos.work), load_config(repos.work), "topic")


def test_squash_with_a_message_keeps_the_branch_trailers(repos):
    repos.write("hyper_parallel/core/a.py", "A = 1\n")
    repos.commit("feat(core): add a\n\nCo-authored-by: Jane Doe <jane@example.org>", "hyper_parallel/core/a.py")
    repos.write("hyper_parallel/core/b.py", "B = 1\n")
    repos.commit("fix(core): add b\n\nFixes #12\nReviewed-by: Li Wei <li@example.org>", "hyper_parallel/core/b.py")
    res = run("git", "squash", "-m", "feat(core): a and b\n\nBoth helpers.", "--json")
    assert res.exit_code == 0, res.output
    message = git(repos.work, "log", "-1", "--format=%B")
    assert message.startswith("feat(core): a and b\n\nBoth helpers.\n\n")
    for trailer in ("Fixes #12", "Co-authored-by: Jane Doe <jane@example.org>", "Reviewed-by: Li Wei <li@example.org>"):
        assert trailer in message
    assert message.split("\n\n")[-1].splitlines()[0] == "Fixes #12"  # one trailer block at the end


def test_force_push_to_protected_branch_refused(repos):
    git(repos.work, "checkout", "-q", "master")
    repos.write("hyper_parallel/core/a.py", "A = 1\n")
    repos.commit("feat(core): a", "hyper_parallel/core/a.py")
    repos.write("hyper_parallel/core/b.py", "B = 1\n")
    repos.commit("feat(core): b", "hyper_parallel/core/b.py")
    head = repos.sha()
    res = run("git", "squash", "--push")
    assert res.exit_code == 2 and "protected branch 'master'" in res.stderr
    assert repos.sha() == head and not git(repos.work, "branch", "--list", "backup/*")
    cfg = load_config(repos.work)
    for branch in ("main", "master", "release/1.0"):
        with pytest.raises(AutogitRefused):
            push(Git(repos.work), cfg, branch, "0" * 40, rewrite=True)
    assert repos.remote_sha(repos.fork, "main") is None


def test_rebase_stashes_and_restores_dirty_tree(repos, tmp_path):
    _two_commits(repos)
    seed = tmp_path / "up"
    git(tmp_path, "clone", "-q", str(repos.upstream), str(seed))
    (seed / "hyper_parallel/core/c.py").write_text("C = 1\n")
    git(seed, "add", ".")
    git(seed, "-c", "user.name=u", "-c", "user.email=u@x", "commit", "-q", "-m", "feat(core): c")
    git(seed, "push", "-q", "origin", "master")
    repos.write("notes.txt", "untracked work\n")
    repos.write("hyper_parallel/core/a.py", "A = 2\n")
    res = run("git", "rebase", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert repos.sha(out["backup"]) == out["before"]
    assert (repos.work / "hyper_parallel/core/c.py").is_file()
    assert (repos.work / "notes.txt").read_text() == "untracked work\n"
    assert (repos.work / "hyper_parallel/core/a.py").read_text() == "A = 2\n"
    assert git(repos.work, "stash", "list") == ""


def test_rebase_conflict_returns_to_original_state(repos, tmp_path):
    _two_commits(repos)
    seed = tmp_path / "up"
    git(tmp_path, "clone", "-q", str(repos.upstream), str(seed))
    (seed / "hyper_parallel/core/a.py").parent.mkdir(parents=True, exist_ok=True)
    (seed / "hyper_parallel/core/a.py").write_text("A = 99\n")
    git(seed, "add", ".")
    git(seed, "-c", "user.name=u", "-c", "user.email=u@x", "commit", "-q", "-m", "feat(core): conflicting a")
    git(seed, "push", "-q", "origin", "master")
    repos.write("scratch.txt", "keep me\n")
    tip = repos.sha()
    res = run("git", "rebase")
    assert res.exit_code == 2 and "conflicts" in res.stderr
    assert repos.sha() == tip and git(repos.work, "branch", "--show-current") == "topic"
    assert (repos.work / "scratch.txt").read_text() == "keep me\n"
    assert not (repos.work / ".git" / "rebase-merge").exists()


# -- PRs ---------------------------------------------------------------------------------------------
def _gate_report(work: Path, passed: bool = True) -> None:
    (work / ".gate").mkdir(exist_ok=True)
    report = {"started": "2026-12-02T10:00:00Z", "finished": "2026-12-02T10:05:00Z", "passed": passed,
              "changed_only": True, "stages": [
                  {"name": "pylint", "status": "passed", "duration_s": 3.5, "command": "pylint x", "findings": [],
                   "log_tail": ""},
                  {"name": "ut", "status": "passed", "duration_s": 20.0, "command": "pytest tests/ut",
                   "findings": [], "log_tail": ""}]}
    (work / ".gate" / "last.json").write_text(json.dumps(report))


def test_pr_pushes_to_fork_and_opens_pr_with_template(repos, forge, capfd):
    _two_commits(repos)
    _gate_report(repos.work)
    res = run("git", "pr", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert repos.remote_sha(repos.fork, "topic") == repos.sha()
    assert repos.remote_sha(repos.upstream, "topic") is None
    create = [r for r in forge.requests if r["method"] == "POST" and r["path"].endswith("/pulls")][0]
    body = create["body"]
    assert body["head"] == "alice:topic" and body["base"] == "master"
    assert body["title"] == "fix(core): add b"
    assert "### 关联的 Issue\nFixes #12" in body["body"]
    assert "- [x] feat" not in body["body"] and "- [ ] feat" in body["body"]
    assert "**总体结果: 通过**" in body["body"] and "`pytest tests/ut`" in body["body"]
    assert out["linked_issues"] == [12]
    assert create["headers"]["Authorization"] == f"Bearer {TOKEN}"
    captured = capfd.readouterr()
    assert TOKEN not in res.output + res.stderr + captured.out + captured.err


def test_pr_never_invents_an_issue_and_reports_missing_gate_run(repos, forge):
    repos.write("hyper_parallel/core/a.py", "A = 1\n")
    repos.commit("feat(core): add a", "hyper_parallel/core/a.py")
    res = run("git", "pr", "--dry-run", "--provider", "github", "--json")
    out = json.loads(res.stdout)
    assert out["linked_issues"] == []
    assert "### Linked issue\nNone" in out["body"]
    assert "- [x] feat" in out["body"]
    assert "No `hp-agent gate run` report" in out["body"]


def test_pr_refuses_when_head_is_not_users_fork(repos, forge):
    repos.write("hyper_parallel/core/a.py", "A = 1\n")
    repos.commit("feat(core): add a", "hyper_parallel/core/a.py")
    forge.login = "mallory"
    res = run("git", "pr")
    assert res.exit_code == 2 and "does not belong to the authenticated user 'mallory'" in res.stderr
    forge.login = "alice"
    git(repos.work, "remote", "set-url", "origin", str(repos.upstream))
    res = run("git", "pr")
    assert res.exit_code == 2 and "points at the upstream repository" in res.stderr
    assert not [r for r in forge.requests if r["method"] == "POST"]


def test_pr_from_protected_branch_refused(repos, forge):
    git(repos.work, "checkout", "-q", "master")
    res = run("git", "pr")
    assert res.exit_code == 2 and "protected branch" in res.stderr


def test_status_and_update(repos, forge):
    _two_commits(repos)
    git(repos.work, "push", "-q", "origin", "HEAD:refs/heads/topic")
    forge.add_pr(5, repos.sha(), labels=["pr-check-pass"], head_ref="topic")
    forge.bot_comment(5, "check passed")
    res = run("git", "status", "5", "--json")
    out = json.loads(res.stdout)
    assert out["gate_labels"] == {"pr-check-pass": True, "ci-pipeline-passed": False}
    assert out["local_matches_pr"] is True and out["last_comments"][0]["user"] == "mindspore-ci-bot"
    repos.write("hyper_parallel/core/d.py", "D = 1\n")
    repos.commit("fix(core): d", "hyper_parallel/core/d.py")
    res = run("git", "update", "5", "--refresh-body", "--json")
    assert res.exit_code == 0, res.output
    assert repos.remote_sha(repos.fork, "topic") == repos.sha()
    assert "Fixes #12" in forge.prs[5]["body"]


def test_update_refuses_foreign_pr_head(repos, forge):
    forge.add_pr(6, repos.sha(), head_repo="bob/hyper-parallel", head_ref="topic")
    res = run("git", "update", "6")
    assert res.exit_code == 2 and "not your fork alice/hyper-parallel" in res.stderr


def test_token_never_printed_on_errors(repos, forge):
    forge.token = "a-different-token"
    repos.write("hyper_parallel/core/a.py", "A = 1\n")
    repos.commit("feat(core): add a", "hyper_parallel/core/a.py")
    for args in (("git", "status", "1"), ("git", "pr"), ("git", "status", "1", "--provider", "gitee")):
        res = run(*args)
        assert res.exit_code == 1, res.output
        assert "401" in res.stderr and TOKEN not in res.output + res.stderr
    gitee = [r for r in forge.requests if r["query"].get("access_token")]
    assert gitee and gitee[0]["query"]["access_token"] == TOKEN


def test_pr_squash_backs_up_and_leases(repos, forge):
    _two_commits(repos)
    git(repos.work, "push", "-q", "origin", "HEAD:refs/heads/topic")
    old_remote = repos.remote_sha(repos.fork, "topic")
    res = run("git", "pr", "--squash", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert repos.sha(out["squash"]["backup"]) == old_remote
    assert out["push"].startswith(f"git push --force-with-lease=refs/heads/topic:{old_remote} origin")
    assert repos.remote_sha(repos.fork, "topic") == repos.sha() and repos.sha("HEAD^") == repos.sha("upstream/master")
    assert "Fixes #12" in forge.prs[out["pr"]["number"]]["body"]


def test_update_force_after_rewrite_uses_backup_and_lease(repos, forge):
    _two_commits(repos)
    git(repos.work, "push", "-q", "origin", "HEAD:refs/heads/topic")
    remote_before = repos.remote_sha(repos.fork, "topic")
    forge.add_pr(8, remote_before, head_ref="topic")
    assert run("git", "squash").exit_code == 0
    res = run("git", "update", "8")
    assert res.exit_code == 1 and "rejected" in res.stderr  # a plain push cannot replace history
    res = run("git", "update", "8", "--force", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["backup"].startswith("backup/origin/topic/") and repos.sha(out["backup"]) == remote_before
    assert f"--force-with-lease=refs/heads/topic:{remote_before}" in out["push"]
    assert repos.remote_sha(repos.fork, "topic") == repos.sha()


def test_outside_a_repository_is_a_clear_usage_error(tmp_path, monkeypatch):
    monkeypatch.delenv("HP_AGENT_REPO", raising=False)
    monkeypatch.chdir(tmp_path)
    res = run("git", "commit", "--dry-run")
    assert res.exit_code == 2 and "not inside a git repository" in res.stderr


def test_failed_commit_restores_index_and_header(repos):
    mesh = repos.work / "hyper_parallel/core/mesh.py"
    mesh.write_text(mesh.read_text() + "W = 4\n")
    repos.write("hyper_parallel/core/new.py", "N = 1\n")
    git(repos.work, "add", "hyper_parallel/core/new.py")  # something the user staged by hand
    before, text, head = status_porcelain(repos.work), mesh.read_text(), repos.sha()
    hook = repos.work / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\necho 'blocked by hook' >&2\nexit 1\n")
    hook.chmod(0o755)
    res = run("git", "commit", "-m", "feat(core): add new")
    assert res.exit_code == 1 and "blocked by hook" in res.stderr
    assert repos.sha() == head and status_porcelain(repos.work) == before and mesh.read_text() == text


def test_human_output_of_status_pr_and_squash(repos, forge):
    _two_commits(repos)
    res = run("git", "pr")
    assert res.exit_code == 0, res.output
    assert "pushed topic to alice/hyper-parallel" in res.stdout and "opened PR #1" in res.stdout
    forge.bot_comment(1, "reviewed\nsecond line")
    res = run("git", "status", "1")
    assert res.exit_code == 0 and "gate labels: pr-check-pass=no, ci-pipeline-passed=no" in res.stdout
    assert "mindspore-ci-bot: reviewed" in res.stdout
    res = run("git", "squash")
    assert res.exit_code == 0 and "squashed 2 commits; backup branch backup/topic/" in res.stdout
