# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Shared fixtures for agent-layer tests: real git repositories in temp dirs, the installed CLI."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import git
import pytest
from click.testing import CliRunner

from hp_agent.cli import cli as hp_cli

REPO = Path(__file__).resolve().parents[2]
HP_AGENT = Path(sys.executable).with_name("hp-agent")


def _git_env() -> dict:
    env = dict(os.environ)
    env.update({"GIT_AUTHOR_NAME": "Test Person", "GIT_AUTHOR_EMAIL": "person@example.org",
                "GIT_COMMITTER_NAME": "Test Person", "GIT_COMMITTER_EMAIL": "person@example.org",
                "GIT_CONFIG_NOSYSTEM": "1", "HOME": env.get("HOME", "/tmp")})
    env.pop("HP_AGENT_REPO", None)
    return env


@pytest.fixture
def git_env(monkeypatch) -> dict:
    """Environment for git subprocesses with a fixed human identity."""
    env = _git_env()
    for key, value in env.items():
        if key.startswith("GIT_"):
            monkeypatch.setenv(key, value)
    monkeypatch.delenv("HP_AGENT_REPO", raising=False)
    return env


@pytest.fixture
def tmp_repo(tmp_path, git_env) -> git.Repo:
    """A fresh git repository with one initial commit on ``main``."""
    path = tmp_path / "repo"
    repo = git.Repo.init(path, initial_branch="main")
    with repo.config_writer() as cfg:
        cfg.set_value("user", "name", "Test Person")
        cfg.set_value("user", "email", "person@example.org")
        cfg.set_value("commit", "gpgsign", "false")
    (path / "README.md").write_text("sample\n", encoding="utf-8")
    repo.index.add(["README.md"])
    repo.index.commit("chore(repo): initial commit")
    return repo


def run_cli_process(args: list[str], cwd: Path, stdin: str | None = None, env: dict | None = None,
                    timeout: float = 300) -> subprocess.CompletedProcess:
    """Run the installed ``hp-agent`` console script as a subprocess."""
    full_env = _git_env()
    if env:
        full_env.update(env)
    return subprocess.run([str(HP_AGENT), *args], cwd=cwd, input=stdin, capture_output=True, text=True,
                          env=full_env, timeout=timeout, check=False)


def run_cli(args: list[str], cwd: Path, stdin: str | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``hp-agent ARGS`` in this process (click's runner: real exit code, stdout and stderr) from ``cwd``."""
    overrides = {k: v for k, v in _git_env().items() if k.startswith("GIT_")}
    overrides["HP_AGENT_REPO"] = None
    overrides.update(env or {})
    old = os.getcwd()
    os.chdir(cwd)
    try:
        result = CliRunner().invoke(hp_cli, args, input=stdin, env=overrides, catch_exceptions=False)
    finally:
        os.chdir(old)
    return subprocess.CompletedProcess(["hp-agent", *args], result.exit_code, result.stdout, result.stderr)


@pytest.fixture
def cli():
    """Return :func:`run_cli` (in-process)."""
    return run_cli


@pytest.fixture
def cli_process():
    """Return :func:`run_cli_process` (the installed console script in a subprocess)."""
    return run_cli_process


def copy_agent_tree(dest: Path) -> None:
    """Copy this repository's agent sources (``.agent/``, ``AGENTS.md``, ``ci/``) into ``dest``."""
    for name in (".agent", "ci"):
        if (REPO / name).exists():
            shutil.copytree(REPO / name, dest / name, dirs_exist_ok=True)
    for name in ("AGENTS.md",):
        if (REPO / name).exists():
            shutil.copy2(REPO / name, dest / name)
