# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""`hp-agent install`: idempotent, foreign hooks kept and chained, pre-commit config written or merged."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import yaml

from hp_agent.install import HOOKS, MANAGED, install


def test_install_is_idempotent(tmp_repo, cli):
    root = Path(tmp_repo.working_tree_dir)
    first = json.loads(cli(["install", "--json"], cwd=root).stdout)
    assert sorted(first["written"]) == sorted(HOOKS) and first["config"] == "written"
    second = json.loads(cli(["install", "--json"], cwd=root).stdout)
    assert second["written"] == [] and sorted(second["unchanged"]) == sorted(HOOKS)
    assert second["config"] == "unchanged" and second["kept"] == {}
    for name in HOOKS:
        hook = Path(tmp_repo.git_dir) / "hooks" / name
        assert os.access(hook, os.X_OK) and MANAGED in hook.read_text()


def test_foreign_hook_is_kept_and_chained(tmp_repo, tmp_path):
    root = Path(tmp_repo.working_tree_dir)
    hooks = Path(tmp_repo.git_dir) / "hooks"
    hooks.mkdir(exist_ok=True)
    marker = tmp_path / "foreign-ran"
    (hooks / "commit-msg").write_text(f"#!/bin/sh\necho ran > {marker}\ngrep -q ALLOWED \"$1\"\n")
    (hooks / "commit-msg").chmod(0o755)
    res = install(root)
    assert res.kept == {str(hooks / "commit-msg"): str(hooks / "commit-msg.local")}
    (root / "a.txt").write_text("a\n")
    tmp_repo.git.add("a.txt")
    # ours accepts, the foreign hook (chained after) rejects: the commit fails, the foreign hook ran
    bad = subprocess.run(["git", "commit", "-q", "-m", "feat(x): no token"], cwd=root, capture_output=True,
                         text=True, check=False)
    assert bad.returncode != 0 and marker.exists()
    good = subprocess.run(["git", "commit", "-q", "-m", "feat(x): ALLOWED token"], cwd=root, capture_output=True,
                          text=True, check=False)
    assert good.returncode == 0, good.stderr
    # ours runs first: an AI trailer is rejected before the foreign hook is reached
    marker.unlink()
    (root / "a.txt").write_text("b\n")
    tmp_repo.git.add("a.txt")
    ai = subprocess.run(["git", "commit", "-q", "-m", "feat(x): ALLOWED\n\nCo-authored-by: Claude <noreply@anthropic.com>"],
                        cwd=root, capture_output=True, text=True, check=False)
    assert ai.returncode != 0 and not marker.exists()
    # installing again keeps the chain and does not move anything else
    assert install(root).kept == {}


def test_second_foreign_hook_is_backed_up_not_overwritten(tmp_repo):
    root = Path(tmp_repo.working_tree_dir)
    hooks = Path(tmp_repo.git_dir) / "hooks"
    hooks.mkdir(exist_ok=True)
    (hooks / "pre-push.local").write_text("#!/bin/sh\nexit 0\n")
    (hooks / "pre-push").write_text("#!/bin/sh\necho other\n")
    res = install(root)
    backup = Path(res.kept[str(hooks / "pre-push")])
    assert backup.name.startswith("pre-push.backup-") and backup.read_text() == "#!/bin/sh\necho other\n"
    assert (hooks / "pre-push.local").read_text() == "#!/bin/sh\nexit 0\n"


def test_pre_commit_config_is_merged(tmp_repo):
    root = Path(tmp_repo.working_tree_dir)
    existing = {"repos": [{"repo": "https://github.com/psf/black", "rev": "24.1.0", "hooks": [{"id": "black"}]}]}
    (root / ".pre-commit-config.yaml").write_text(yaml.safe_dump(existing))
    assert install(root).config == "merged"
    data = yaml.safe_load((root / ".pre-commit-config.yaml").read_text())
    assert data["repos"][0]["hooks"] == [{"id": "black"}]
    local = data["repos"][1]
    assert local["repo"] == "local"
    assert {h["id"]: h["stages"] for h in local["hooks"]} == {
        "hp-agent-pre-commit": ["pre-commit"], "hp-agent-commit-msg": ["commit-msg"],
        "hp-agent-pre-push": ["pre-push"]}
    assert install(root).config == "unchanged"


def test_hooks_path_is_honoured(tmp_repo):
    root = Path(tmp_repo.working_tree_dir)
    tmp_repo.git.config("core.hooksPath", ".githooks")
    res = install(root, with_config=False)
    assert res.hooks_dir == str(root / ".githooks")
    assert (root / ".githooks" / "commit-msg").is_file() and not (root / ".pre-commit-config.yaml").exists()


def test_this_repository_pre_commit_config_lists_the_hooks():
    from .conftest import REPO
    data = yaml.safe_load((REPO / ".pre-commit-config.yaml").read_text())
    ids = {h["id"] for r in data["repos"] for h in r["hooks"]}
    assert {"hp-agent-pre-commit", "hp-agent-commit-msg", "hp-agent-pre-push"} <= ids


def test_launcher_goes_to_a_directory_on_path(tmp_path, monkeypatch):
    """`make install` puts the launcher where every shell looks: ~/.local/bin when on PATH, else another
    writable directory on PATH (never a version manager's shims), else ~/.local/bin with a note."""
    from hp_agent.install import default_bin_dir  # pylint: disable=import-outside-toplevel

    monkeypatch.delenv("XDG_BIN_HOME", raising=False)
    home = tmp_path / "home"
    local, tools, shims = home / ".local" / "bin", home / "tools" / "bin", home / ".pyenv" / "shims"
    for path in (local, tools, shims):
        path.mkdir(parents=True)
    assert default_bin_dir(f"/usr/bin:{local}", home) == local
    assert default_bin_dir(f"{shims}:/nonexistent:{tools}:/usr/bin", home) == tools
    assert default_bin_dir(f"{shims}:/usr/bin", home) == local  # nothing usable: the default, off PATH
    monkeypatch.setenv("XDG_BIN_HOME", str(tools))
    assert default_bin_dir(f"{local}:{tools}", home) == tools


def test_launcher_on_path_runs_this_clone(tmp_repo, tmp_path):
    """The launcher found on PATH runs the hp-agent of the work tree the shell is in."""
    from hp_agent.install import install_launcher  # pylint: disable=import-outside-toplevel

    root = Path(tmp_repo.working_tree_dir)
    bin_dir = tmp_path / "bin"
    assert install_launcher(bin_dir) == "written"
    shim = root / ".agent" / "bin" / "hp-agent"
    shim.parent.mkdir(parents=True)
    shim.write_text("#!/bin/sh\necho \"shim of $(pwd) $*\"\n")
    shim.chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:/usr/bin:/bin")
    proc = subprocess.run(["hp-agent", "doctor"], cwd=root, env=env, capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == f"shim of {root} doctor"
