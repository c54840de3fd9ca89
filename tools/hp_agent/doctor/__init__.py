# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``hp-agent doctor``: are this clone's hooks alive, for each assistant configured here?

For every assistant whose hook file exists in the clone (``.claude/settings.json``, ``.codex/hooks.json``,
``.cursor/hooks.json``, ``.gemini/settings.json``), each registered hook command is run exactly as the
assistant would run it (``sh -c`` with the assistant's environment, from the repository root) with a test
event in the assistant's payload format: a harmless shell command (must pass without a decision), a force
push to ``main`` (must be refused), an edit of a file that does not exist (must pass) and, for Cursor, the
end of a turn. The report says whether each answered as expected and how fast, and what else is missing:
the environment the shim finds, ``hp-agent`` on PATH, the git hooks, and each assistant's own switches
(trust, feature flags).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from hp_agent.assistants import all_assistants
from hp_agent.assistants.base import Assistant
from hp_agent.install import HOOKS, MANAGED, hooks_dir

SHIM = Path(".agent") / "bin" / "hp-agent"
PROBE_FILE = ".hp-agent-doctor-probe.py"


@dataclass
class Probe:
    """One test event through one registered hook command."""

    assistant: str
    event: str
    what: str
    command: str
    ok: bool
    exit_code: int | None
    ms: float
    problem: str = ""


@dataclass
class DoctorReport:
    """Everything ``hp-agent doctor`` found."""

    root: str
    environment: str = ""
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    probes: list[Probe] = field(default_factory=list)
    configured: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every probe answered as expected and nothing is missing."""
        return not self.problems and all(p.ok for p in self.probes)

    def to_dict(self) -> dict:
        """JSON form."""
        return {**asdict(self), "ok": self.ok}


def environment(root: Path) -> tuple[str, str | None]:
    """Which Python ``.agent/bin/hp-agent`` runs (the shim's order) and a problem, if any."""
    if os.environ.get("HP_AGENT_PYTHON"):
        return f"$HP_AGENT_PYTHON ({os.environ['HP_AGENT_PYTHON']})", None
    if (root / ".venv" / "bin" / "python").is_file():
        return f"{root / '.venv'} (this work tree)", None
    common = subprocess.run(["git", "rev-parse", "--path-format=absolute", "--git-common-dir"], cwd=root,
                            capture_output=True, text=True, check=False).stdout.strip()
    main_venv = Path(common).parent / ".venv" if common else None
    if main_venv and (main_venv / "bin" / "python").is_file():
        return f"{main_venv} (the clone's main work tree, with this tree's tools/)", None
    python = shutil.which("python3")
    return (f"none: hooks run on {python or 'no python3'} with the standard library only",
            "no environment: run `make install` in the repository root")


def _path_problem() -> str | None:
    found = shutil.which("hp-agent")
    if found is None:
        from hp_agent.install import default_bin_dir  # pylint: disable=import-outside-toplevel
        return ("`hp-agent` is not on PATH, but every rule and skill runs `hp-agent ...`: run `make install` "
                f"(it installs the launcher into {default_bin_dir()}) and put that directory on PATH")
    return None


def _git_hook_problems(root: Path) -> list[str]:
    directory = hooks_dir(root)
    problems = []
    for name in HOOKS:
        path = directory / name
        if not path.is_file():
            problems.append(f"git hook {name} is not installed in {directory}: run `make install`")
        elif MANAGED not in path.read_text(encoding="utf-8", errors="replace"):
            problems.append(f"git hook {path} is not hp-agent's: run `hp-agent install` (it keeps yours, chained)")
        elif not os.access(path, os.X_OK):
            problems.append(f"git hook {path} is not executable: run `hp-agent install`")
    return problems


def _expectations(event: str) -> list[tuple[str, str, set[int]]]:
    """``(what, subject, expected exit codes)`` probes for an event."""
    if event == "before-shell":
        return [("allows `git status`", "git status", {0}), ("refuses `git push --force origin main`",
                                                             "git push --force origin main", {2})]
    if event == "after-write":
        return [("answers an edit", PROBE_FILE, {0})]
    return [("answers the end of a turn", "", {0})]


def _answer_problem(assistant: Assistant, event: str, proc: subprocess.CompletedProcess, expected: set[int]) -> str:
    if proc.returncode not in expected:
        text = (proc.stderr or proc.stdout).strip().splitlines()
        return f"exit {proc.returncode}, expected {sorted(expected)}: {text[0] if text else 'no output'}"
    if event == "before-shell" and proc.returncode == 0 and proc.stdout.strip() not in ("", "{}"):
        return (f"an allowed command got a decision ({proc.stdout.strip()[:80]}); it must leave the user's "
                "settings alone")
    if proc.stdout.strip():
        try:
            json.loads(proc.stdout)
        except json.JSONDecodeError:
            return f"stdout is not JSON: {proc.stdout.strip()[:80]}"
    del assistant
    return ""


def probe(assistant: Assistant, event: str, command: str, root: Path) -> list[Probe]:
    """Run the registered ``command`` with the assistant's test events for ``event``."""
    out = []
    env = {**os.environ, **assistant.probe_env(root)}
    env.pop("HP_AGENT_REPO", None)
    for what, subject, expected in _expectations(event):
        payload = assistant.probe_payload(event, root, subject)
        start = time.perf_counter()
        try:
            proc = subprocess.run(["sh", "-c", command], input=json.dumps(payload), capture_output=True, text=True,
                                  cwd=root, env=env, timeout=60, check=False)
        except subprocess.TimeoutExpired:
            out.append(Probe(assistant.name, event, what, command, False, None, 60_000.0, "no answer within 60 s"))
            continue
        ms = (time.perf_counter() - start) * 1e3
        problem = _answer_problem(assistant, event, proc, expected)
        out.append(Probe(assistant.name, event, what, command, not problem, proc.returncode, round(ms, 1), problem))
    return out


def run_doctor(root: Path, home: Path | None = None, only: tuple[str, ...] = ()) -> DoctorReport:
    """Probe every configured assistant's hooks (or only the named ones) and check the setup."""
    home = home or Path.home()
    report = DoctorReport(root=str(root))
    report.environment, env_problem = environment(root)
    report.problems.extend(p for p in (env_problem, _path_problem()) if p)
    if not (root / SHIM).is_file():
        report.problems.append(f"{SHIM} is missing: this checkout predates the shim; update it")
    report.problems.extend(_git_hook_problems(root))
    for assistant in all_assistants():
        if only and assistant.name not in only:
            continue
        registered = assistant.registrations(root)
        if not registered:
            report.notes.append(f"{assistant.title}: no hook registration in this clone"
                                + (f" ({assistant.hooks_file} missing: run `hp-agent sync`)" if assistant.hooks_file
                                   else " (register `.agent/hooks/<event> --assistant "
                                        f"{assistant.name}` in its own hook settings)"))
            continue
        report.configured.append(assistant.name)
        for event, command in sorted(registered.items()):
            report.probes.extend(probe(assistant, event, command, root))
        report.notes.extend(f"{assistant.title}: {p}" for p in assistant.setup_problems(root, home))
    return report


def render(report: DoctorReport) -> str:
    """Human-readable report."""
    lines = [f"hp-agent doctor: {report.root}", f"environment: {report.environment}"]
    for p in report.probes:
        mark = "ok  " if p.ok else "FAIL"
        lines.append(f"  {mark} {p.assistant:7} {p.event:12} {p.what:42} {p.ms:7.1f} ms"
                     + (f"  -> {p.problem}" if p.problem else ""))
    lines += [f"problem: {p}" for p in report.problems]
    lines += [f"note: {n}" for n in report.notes]
    lines.append("all hooks answered as expected" if report.ok else "hooks or setup need attention (see above)")
    return "\n".join(lines)
