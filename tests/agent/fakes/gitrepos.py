# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Real git repositories for tests: a bare upstream, a bare fork and a working clone with both remotes."""
from __future__ import annotations

import dataclasses
import shutil
import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]
HEADER = "# Copyright 2024 The hyper-parallel Authors. All rights reserved.\n# SPDX-License-Identifier: Apache-2.0\n"
THIRD_PARTY = "# Copyright 2024 Huawei Technologies Co., Ltd\n# Licensed under the Apache License 2.0\n"


def git(cwd: Path, *args: str) -> str:
    """Run git and return stdout (raises on failure)."""
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@dataclasses.dataclass
class Repos:
    """Paths of the three repositories."""

    work: Path
    upstream: Path
    fork: Path

    def sha(self, ref: str = "HEAD") -> str:
        """Sha of ``ref`` in the working clone."""
        return git(self.work, "rev-parse", ref)

    def remote_sha(self, bare: Path, branch: str) -> str | None:
        """Sha of ``branch`` in a bare remote (None if absent)."""
        proc = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}"], cwd=bare,
                              capture_output=True, text=True, check=False)
        return proc.stdout.strip() or None

    def write(self, rel: str, text: str) -> Path:
        """Write a file in the working clone."""
        path = self.work / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return path

    def commit(self, message: str, *paths: str) -> str:
        """Commit ``paths`` with plain git (test setup only)."""
        git(self.work, "add", "--", *paths)
        git(self.work, "commit", "-q", "-m", message)
        return self.sha()


def make_repos(tmp: Path) -> Repos:
    """Upstream ``mindspore/hyper-parallel`` with one commit on master, a fork ``alice/…``, a clone on ``topic``."""
    upstream = tmp / "remotes" / "mindspore" / "hyper-parallel.git"
    fork = tmp / "remotes" / "alice" / "hyper-parallel.git"
    seed = tmp / "seed"
    for bare in (upstream, fork):
        bare.mkdir(parents=True)
        git(bare, "init", "-q", "--bare", "-b", "master")
    seed.mkdir()
    git(seed, "init", "-q", "-b", "master")
    _identity(seed)
    files = {
        ".gitignore": "*.log\n.gate/\n",
        "hyper_parallel/core/mesh.py": HEADER + '"""Mesh."""\nVALUE = 1\n',
        "hyper_parallel/vendor/vendored.py": THIRD_PARTY + "X = 1\n",
        "README.md": "# demo\n",
    }
    for rel, text in files.items():
        (seed / rel).parent.mkdir(parents=True, exist_ok=True)
        (seed / rel).write_text(text, encoding="utf-8")
    for rel in (".gitee/PULL_REQUEST_TEMPLATE.zh-CN.md", ".github/PULL_REQUEST_TEMPLATE.md"):
        (seed / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO_ROOT / rel, seed / rel)
    git(seed, "add", "-A")
    git(seed, "commit", "-q", "-m", "chore(repo): initial")
    git(seed, "push", "-q", str(upstream), "master")
    git(seed, "push", "-q", str(fork), "master")
    work = tmp / "work"
    git(tmp, "clone", "-q", "-o", "upstream", str(upstream), str(work))
    _identity(work)
    git(work, "remote", "add", "origin", str(fork))
    git(work, "checkout", "-q", "-b", "topic")
    return Repos(work=work, upstream=upstream, fork=fork)


def _identity(repo: Path) -> None:
    git(repo, "config", "user.name", "Test User")
    git(repo, "config", "user.email", "test@example.com")
    git(repo, "config", "commit.gpgsign", "false")


def isolated_repos(tmp_path, monkeypatch):
    """Working clone on branch ``topic`` with remotes upstream + origin (fork), isolated git config."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for var in ("HP_AGENT_CODEHOST_API", "HP_AGENT_CODEHOST_TOKEN", "HP_AGENT_PROVIDER", "HP_AGENT_REPO"):
        monkeypatch.delenv(var, raising=False)
    r = make_repos(tmp_path)
    monkeypatch.chdir(r.work)
    return r


def corpus_repo(root: Path) -> Path:
    """The repository the guard corpus (``tests/agent/data/shell_corpus.yaml``) is decided in, at ``root``.

    Branch ``feature`` with a modified tracked file (``tools/x.py``), an untracked ``notes.txt``, an ignored
    ``.venv/`` (holding a config file that sets ``core.hooksPath``), the commit-msg hook installed, a stash
    entry, a branch ``topic`` and a branch ``main`` each with a commit no other ref holds, a branch ``merged``
    holding nothing of its own, a worktree ``../wt-dirty`` with an uncommitted file, and a git alias
    ``pf = push -f``. Nothing in it is changed by deciding a command, so one copy serves every entry.
    """
    root.mkdir(parents=True)
    git(root, "init", "-q", "-b", "feature")
    for key, value in (("user.name", "Test Person"), ("user.email", "person@example.org"),
                       ("commit.gpgsign", "false")):
        git(root, "config", key, value)
    (root / "tools").mkdir()
    (root / "tools" / "x.py").write_text("X = 1\n")
    (root / ".gitignore").write_text(".venv/\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "chore(repo): initial")
    git(root, "branch", "merged")  # nothing of its own: deleting it loses nothing
    for branch, subject in (("topic", "feat(x): unpushed"), ("main", "feat(x): main's own")):
        unique = git(root, "commit-tree", "HEAD^{tree}", "-p", "HEAD", "-m", subject)
        git(root, "update-ref", f"refs/heads/{branch}", unique)  # one commit no other ref holds
    git(root, "config", "alias.pf", "push -f")
    (root / "tools" / "x.py").write_text("X = 3\n")
    git(root, "stash", "push", "-q", "-m", "keep")
    worktree = root.parent / "wt-dirty"
    git(root, "worktree", "add", "-q", "-b", "wt", str(worktree))
    (worktree / "wt.txt").write_text("uncommitted\n")
    (root / "tools" / "x.py").write_text("X = 2\n")
    (root / "notes.txt").write_text("untracked\n")
    (root / ".venv").mkdir()
    (root / ".venv" / "marker").write_text("env\n")
    (root / ".venv" / "hooks.cfg").write_text("[core]\n\thooksPath = /dev/null\n")
    hook = root / ".git" / "hooks" / "commit-msg"
    hook.parent.mkdir(exist_ok=True)
    hook.write_text("#!/bin/sh\nexit 0\n")
    hook.chmod(0o755)
    return root
