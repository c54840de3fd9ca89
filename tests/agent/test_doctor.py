# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""`hp-agent doctor` on a clone: every configured assistant's registered hooks are fired; what is missing is named."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from hp_agent.doctor import run_doctor
from hp_agent.install import install, install_launcher

from .test_assistant_protocols import project  # noqa: F401  pylint: disable=unused-import


def test_doctor_fires_each_registered_hook_and_names_what_is_missing(project, tmp_path, monkeypatch, cli):
    bin_dir = tmp_path / "bin"
    install_launcher(bin_dir)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("HP_AGENT_PYTHON", sys.executable)
    install(project, with_config=False)
    report = run_doctor(project, home=tmp_path)
    assert sorted(report.configured) == ["claude", "codex", "cursor", "gemini"]
    assert report.problems == [] and all(p.ok for p in report.probes), [p for p in report.probes if not p.ok]
    events = {(p.assistant, p.event) for p in report.probes}
    assert ("cursor", "after-turn") in events and ("codex", "before-shell") in events
    assert any("Codex runs project hooks only in a trusted project" in n for n in report.notes)
    assert any(n.startswith("GitHub Copilot: no hook registration") for n in report.notes)
    (tmp_path / ".codex").mkdir()
    (tmp_path / ".codex" / "config.toml").write_text(f'[projects."{project}"]\ntrust_level = "trusted"\n')
    assert not any("Codex" in n for n in run_doctor(project, home=tmp_path, only=("codex",)).notes)

    hooks = json.loads((project / ".cursor" / "hooks.json").read_text())
    broken = json.loads(json.dumps(hooks))
    broken["hooks"]["beforeShellExecution"][0]["command"] = ".agent/hooks/before-shel --assistant cursor"
    (project / ".cursor" / "hooks.json").write_text(json.dumps(broken))
    (project / ".git" / "hooks" / "pre-push").unlink()
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    try:
        report = run_doctor(project, home=tmp_path, only=("cursor",))
        proc = cli(["doctor", "--assistant", "cursor", "--json"], cwd=project)
    finally:
        (project / ".cursor" / "hooks.json").write_text(json.dumps(hooks))
    failed = [p for p in report.probes if not p.ok]
    assert not report.ok and {p.event for p in failed} == {"before-shell"}
    assert all("exit" in p.problem for p in failed)
    assert any("git hook pre-push is not installed" in p for p in report.problems)
    assert any("`hp-agent` is not on PATH" in p for p in report.problems)
    assert proc.returncode == 1 and json.loads(proc.stdout)["ok"] is False
    assert Path(project / ".hp-agent-doctor-probe.py").exists() is False  # the edit probe names no real file
