# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""A fresh clone with no environment: the hooks let setup through, ``make install`` sets up hooks and launcher,
and the shim finds the clone's environment from a linked work tree (real git clone and ``git worktree``).

``make install``'s pip step needs the network and installs torch; the test stands in for it exactly where the
Makefile's stamp allows (a light ``.venv`` that sees this environment's packages, like /work/wt/new.sh makes,
plus the ``hp-agent`` console script pip would write) and runs the real ``make install`` for the rest.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO
from .test_hook_payloads import shell_payload

COPY = [".agent", ".claude", ".cursor", ".gemini", ".codex", "AGENTS.md", "CLAUDE.md", "Makefile", "pyproject.toml",
        "README.md", ".gitignore"]
BASE_PATH = "/usr/bin:/bin"
CO_AUTHORED = "git commit -m \"$(cat <<'EOF'\nfeat(core): add mesh\n\nCo-Authored-By: Claude <noreply@anthropic.com>\nEOF\n)\""


def _git(cwd: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False, env=env)


def _env(home: Path, path: str = BASE_PATH, **extra: str) -> dict:
    env = {"PATH": path, "HOME": str(home), "LC_ALL": "C", "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_AUTHOR_NAME": "Test Person", "GIT_AUTHOR_EMAIL": "person@example.org",
           "GIT_COMMITTER_NAME": "Test Person", "GIT_COMMITTER_EMAIL": "person@example.org"}
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    """``git clone`` of a repository holding this repository's agent layer, Makefile and packaging."""
    base = tmp_path_factory.mktemp("bootstrap")
    seed = base / "seed"
    seed.mkdir()
    for name in COPY:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, seed / name)
        elif src.is_file():
            shutil.copy2(src, seed / name)
    shutil.copytree(REPO / "tools" / "hp_agent", seed / "tools" / "hp_agent",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (seed / "hyper_parallel").mkdir()  # the version's one source (hp_agent reads it without importing the library)
    shutil.copy2(REPO / "hyper_parallel" / "_version.py", seed / "hyper_parallel" / "_version.py")
    env = _env(base)
    for args in (("init", "-q", "-b", "main"), ("add", "-A"), ("commit", "-q", "-m", "chore(repo): seed")):
        assert _git(seed, *args, env=env).returncode == 0
    dest = base / "clone"
    assert _git(base, "clone", "-q", str(seed), str(dest), env=env).returncode == 0
    return dest


def _claude_hook(root: Path, command: str, env: dict, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run the before-shell hook exactly as Claude Code would: the command from .claude/settings.json."""
    settings = json.loads((root / ".claude" / "settings.json").read_text())
    registered = settings["hooks"]["PreToolUse"][0]["hooks"][0]["command"]
    return subprocess.run(["sh", "-c", registered], input=json.dumps(shell_payload("claude", command, cwd or root)),
                          capture_output=True, text=True, cwd=cwd or root, timeout=60, check=False,
                          env={**env, "CLAUDE_PROJECT_DIR": str(root)})


def test_fresh_clone_lets_setup_and_read_only_commands_through(clone):
    assert not (clone / ".venv").exists()
    env = _env(clone.parent)
    for command in ("make install", "make test", "make demo", "pip install -e '.[dev]'", "git status",
                    "git log --oneline", "git diff", "ls -la", "cat README.md"):
        proc = _claude_hook(clone, command, env)
        assert proc.returncode == 0 and proc.stdout == "", (command, proc.stderr)


def test_fresh_clone_still_blocks_what_it_guards_and_names_the_setup(clone):
    env = _env(clone.parent)
    for command, reason in (("git push --force origin main", "protected branch 'main'"),
                            (CO_AUTHORED, "(Claude)"), ('git commit -m "$MSG"', "commit-msg hook is not installed")):
        proc = _claude_hook(clone, command, env)
        assert proc.returncode == 2 and reason in proc.stderr, (command, proc.stderr)
        assert "make install" in proc.stderr


def test_fresh_clone_after_write_fixes_with_the_standard_library(clone, tmp_path):
    work = tmp_path / "w"
    assert _git(tmp_path, "clone", "-q", str(clone), str(work)).returncode == 0
    target = work / "tools" / "new_module.py"
    target.write_text('"""New."""\n\n\ndef show(x: int):   \n    """Show."""\n    print(x)\n')
    payload = {"hook_event_name": "PostToolUse", "tool_name": "Write", "cwd": str(work),
               "tool_input": {"file_path": str(target)}}
    proc = subprocess.run([str(work / ".agent" / "hooks" / "after-write"), "--assistant", "claude"],
                          input=json.dumps(payload), capture_output=True, text=True, cwd=work,
                          env=_env(tmp_path), timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    text = target.read_text()
    assert text.startswith("# Copyright") and "def show(x: int) -> None:" in text and "   \n" not in text


def test_no_python_at_all_fails_closed(clone, tmp_path):
    tools = tmp_path / "bin"
    tools.mkdir()
    for name in ("dirname", "git", "sh"):
        (tools / name).symlink_to(shutil.which(name))
    proc = subprocess.run([str(clone / ".agent" / "hooks" / "before-shell")], input="{}", capture_output=True,
                          text=True, cwd=clone, env=_env(tmp_path, path=str(tools)), timeout=60, check=False)
    assert proc.returncode == 2 and "no Python >= 3.11" in proc.stderr and "fail closed" in proc.stderr


def _light_venv(root: Path) -> None:
    """What `make install`'s pip step leaves: .venv with this environment's packages, the console script, stamp."""
    venv = root / ".venv"
    subprocess.run([sys._base_executable, "-m", "venv", "--without-pip", str(venv)], check=True)  # noqa: SLF001
    site = next((venv / "lib").glob("python3*/site-packages"))
    paths = [str(root / "tools"), str(root)] + [p for p in sys.path if p.endswith("site-packages")]
    (site / "_hp_test_env.pth").write_text("\n".join(paths) + "\n")
    script = venv / "bin" / "hp-agent"
    script.write_text(f"#!{venv}/bin/python\nimport sys\nfrom hp_agent.cli import main\nsys.exit(main())\n")
    script.chmod(0o755)
    (venv / ".hp-installed").touch()
    os.utime(venv / ".hp-installed")


def test_make_install_then_the_clone_works_and_worktrees_share_it(clone, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    _light_venv(clone)
    env = _env(home, path=f"{home}/.local/bin:{BASE_PATH}")
    allowed = _claude_hook(clone, "make install", env)
    assert allowed.returncode == 0
    make = subprocess.run(["make", "install"], cwd=clone, capture_output=True, text=True, env=env, timeout=300,
                          check=False)
    assert make.returncode == 0, make.stdout + make.stderr
    hooks = Path(_git(clone, "rev-parse", "--git-path", "hooks").stdout.strip())
    hooks = hooks if hooks.is_absolute() else clone / hooks
    assert all((hooks / n).is_file() for n in ("commit-msg", "pre-commit", "pre-push"))
    assert (home / ".local" / "bin" / "hp-agent").is_file()
    again = subprocess.run(["make", "install"], cwd=clone, capture_output=True, text=True, env=env, timeout=300,
                           check=False)
    assert again.returncode == 0 and "installed" not in again.stdout  # idempotent
    # the environment is used now: the dynamic message is left to the installed commit-msg hook
    assert _claude_hook(clone, 'git commit -m "$MSG"', env).returncode == 0
    assert subprocess.run(["hp-agent", "--version"], cwd=clone, capture_output=True, text=True, env=env,
                          check=False).stdout.strip().endswith(_version(clone))
    # a linked work tree without its own .venv: the clone's environment, this tree's own code and hooks
    wt = tmp_path / "wt2"
    assert _git(clone, "worktree", "add", "-q", "-b", "wt2", str(wt), env=env).returncode == 0
    init = wt / "hyper_parallel" / "_version.py"
    init.write_text(init.read_text().replace(f'"{_version(clone)}"', '"9.9.9-wt2"'))
    shim = subprocess.run([str(wt / ".agent" / "bin" / "hp-agent"), "--version"], cwd=wt, capture_output=True,
                          text=True, env=env, check=False)
    assert shim.returncode == 0 and "9.9.9-wt2" in shim.stdout, shim.stderr
    launcher = subprocess.run(["hp-agent", "--version"], cwd=wt, capture_output=True, text=True, env=env, check=False)
    assert "9.9.9-wt2" in launcher.stdout
    (wt / "f.txt").write_text("x\n")
    assert _git(wt, "add", "f.txt", env=env).returncode == 0
    rejected = _git(wt, "commit", "-q", "-m", "feat(x): y\n\nCo-authored-by: Claude <noreply@anthropic.com>", env=env)
    assert rejected.returncode != 0 and "commit rejected" in rejected.stderr
    accepted = _git(wt, "commit", "-q", "-m", "feat(x): y\n\nCo-authored-by: Jane Doe <jane@example.org>", env=env)
    assert accepted.returncode == 0, accepted.stderr
    outside = subprocess.run(["hp-agent", "--version"], cwd=tmp_path, capture_output=True, text=True, env=env,
                             check=False)
    assert outside.returncode == 2 and "not inside a hyper-parallel work tree" in outside.stderr


def _version(root: Path) -> str:
    text = (root / "hyper_parallel" / "_version.py").read_text()
    return text.split('__version__ = "', 1)[1].split('"', 1)[0]
