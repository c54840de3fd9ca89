# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The installed git hooks on real repositories: commit-msg and pre-push through real git commands."""
from __future__ import annotations

import subprocess
from pathlib import Path

import git
import pytest

from hp_agent.checks.commit_msg import load_registry
from hp_agent.install import find_hp_agent, install

REGISTRY = load_registry()


def _commit(repo: git.Repo, message: str, name: str = "f.txt") -> subprocess.CompletedProcess:
    path = Path(repo.working_tree_dir) / name
    path.write_text(path.read_text() + "x\n" if path.exists() else "x\n", encoding="utf-8")
    repo.git.add(name)
    return subprocess.run(["git", "commit", "-q", "-m", message], cwd=repo.working_tree_dir, capture_output=True,
                          text=True, check=False)


@pytest.fixture
def hooked(tmp_repo):
    """A temp repository with hp-agent's hooks installed."""
    install(Path(tmp_repo.working_tree_dir))
    return tmp_repo


@pytest.mark.parametrize("agent,line", REGISTRY.examples())
def test_commit_with_agent_attribution_is_rejected(hooked, agent, line):
    head = hooked.head.commit.hexsha
    proc = _commit(hooked, f"feat(core): add a helper\n\nBody.\n\n{line}")
    assert proc.returncode != 0, f"{agent}: {line!r} was committed"
    assert "commit rejected" in proc.stderr and "human authorship only" in proc.stderr
    assert hooked.head.commit.hexsha == head


@pytest.mark.parametrize("line", REGISTRY.human_examples)
def test_commit_with_human_co_author_is_accepted(hooked, line):
    proc = _commit(hooked, f"fix(mesh): handle size-1 dims\n\nBody.\n\n{line}")
    assert proc.returncode == 0, proc.stderr
    assert line in hooked.head.commit.message


def test_clean_conventional_commit_passes_and_bad_header_fails(hooked):
    assert _commit(hooked, "docs(readme): explain the gate").returncode == 0
    bad = _commit(hooked, "Updated stuff.")
    assert bad.returncode != 0 and "Conventional Commit" in bad.stderr


def test_commit_hook_fails_closed_without_hp_agent(hooked, tmp_path):
    hook = Path(hooked.git_dir) / "hooks" / "commit-msg"
    text = hook.read_text()
    current = find_hp_agent()
    assert f'"{current}"' in text  # a foreign repository: the installing hp-agent is the fallback
    hook.write_text(text.replace(f'"{current}"', f'"{tmp_path}/missing/hp-agent"'))
    env_path = "/usr/bin:/bin"  # no hp-agent on PATH
    (Path(hooked.working_tree_dir) / "g.txt").write_text("y\n")
    hooked.git.add("g.txt")
    proc = subprocess.run(["git", "commit", "-q", "-m", "feat(x): fine message"], cwd=hooked.working_tree_dir,
                          capture_output=True, text=True, env={"PATH": env_path, "HOME": str(tmp_path)}, check=False)
    assert proc.returncode != 0
    assert "fail closed" in proc.stderr


def test_pre_commit_hook_rejects_a_python_file_without_header(hooked):
    root = Path(hooked.working_tree_dir)
    (root / "mod.py").write_text('"""Doc."""\nX = 1\n')
    hooked.git.add("mod.py")
    proc = subprocess.run(["git", "commit", "-q", "-m", "feat(x): add mod"], cwd=root, capture_output=True,
                          text=True, check=False)
    assert proc.returncode != 0 and "mod.py" in proc.stderr and "license header" in proc.stderr
    (root / "mod.py").write_text('# Copyright 2026 The hyper-parallel Authors. All rights reserved.\n'
                                 '# SPDX-License-Identifier: Apache-2.0\n"""Doc."""\nX = 1\n')
    hooked.git.add("mod.py")
    assert subprocess.run(["git", "commit", "-q", "-m", "feat(x): add mod"], cwd=root, capture_output=True,
                          text=True, check=False).returncode == 0


@pytest.fixture
def pushed(hooked, tmp_path):
    """The hooked repo with a local bare remote ``origin`` that has ``main``."""
    bare = tmp_path / "remote.git"
    git.Repo.init(bare, bare=True, initial_branch="main")
    hooked.create_remote("origin", str(bare))
    _commit(hooked, "feat(x): first")
    hooked.git.push("origin", "main")
    return hooked


def _push(repo: git.Repo, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "push", *args], cwd=repo.working_tree_dir, capture_output=True, text=True,
                          check=False)


def test_force_push_to_main_is_refused(pushed):
    remote_tip = pushed.git.rev_parse("origin/main")
    pushed.git.commit("--amend", "-q", "-m", "feat(x): rewritten first")
    proc = _push(pushed, "--force", "origin", "main")
    assert proc.returncode != 0
    assert "non-fast-forward push to protected branch 'main'" in proc.stderr
    assert "--force-with-lease" in proc.stderr
    assert git.Repo(pushed.remotes.origin.url).git.rev_parse("main") == remote_tip


def test_delete_of_main_is_refused(pushed):
    proc = _push(pushed, "origin", "--delete", "main")
    assert proc.returncode != 0 and "refusing to delete protected branch 'main'" in proc.stderr


def test_new_branch_and_fast_forward_pushes_are_accepted(pushed):
    pushed.git.checkout("-q", "-b", "feature/x")
    _commit(pushed, "feat(x): on a branch")
    assert _push(pushed, "origin", "feature/x").returncode == 0
    pushed.git.checkout("-q", "main")
    _commit(pushed, "feat(x): second on main")
    assert _push(pushed, "origin", "main").returncode == 0
    # rewriting an unprotected branch is the owner's business (the assistant hook asks for a lease)
    pushed.git.checkout("-q", "feature/x")
    pushed.git.commit("--amend", "-q", "-m", "feat(x): amended branch")
    assert _push(pushed, "--force-with-lease", "origin", "feature/x").returncode == 0


def test_release_branches_are_protected(pushed):
    pushed.git.checkout("-q", "-b", "release/1.0")
    assert _push(pushed, "origin", "release/1.0").returncode == 0  # creating it is fine
    pushed.git.commit("--amend", "-q", "-m", "feat(x): rewrite release")
    proc = _push(pushed, "-f", "origin", "release/1.0")
    assert proc.returncode != 0 and "release/1.0" in proc.stderr


def test_unknown_remote_sha_fails_closed(pushed, cli):
    local = pushed.head.commit.hexsha
    line = f"refs/heads/main {local} refs/heads/main {'ab' * 20}\n"
    proc = cli(["hook", "pre-push", "origin", "url"], cwd=Path(pushed.working_tree_dir), stdin=line)
    assert proc.returncode == 2 and "unknown locally" in proc.stderr and "git fetch" in proc.stderr


def test_malformed_pre_push_input_fails_closed(pushed, cli):
    proc = cli(["hook", "pre-push"], cwd=Path(pushed.working_tree_dir), stdin="garbage line\n")
    assert proc.returncode == 2 and "fail closed" in proc.stderr


def test_pre_commit_framework_environment_is_understood(pushed, cli):
    pushed.git.commit("--amend", "-q", "-m", "feat(x): rewritten")
    env = {"PRE_COMMIT_FROM_REF": pushed.git.rev_parse("origin/main"), "PRE_COMMIT_TO_REF": pushed.head.commit.hexsha,
           "PRE_COMMIT_REMOTE_BRANCH": "refs/heads/main", "PRE_COMMIT_LOCAL_BRANCH": "refs/heads/main"}
    proc = cli(["hook", "pre-push"], cwd=Path(pushed.working_tree_dir), stdin="", env=env)
    assert proc.returncode == 2 and "non-fast-forward" in proc.stderr
