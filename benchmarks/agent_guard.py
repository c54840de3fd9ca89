# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Benchmark: false positives / false negatives of the before-shell guard on the project's guard corpus, through
the hook entry points exactly as Claude Code, Codex, Cursor and Gemini CLI run them.

Every line of ``tests/agent/data/shell_corpus.yaml`` (harmless: ``expect: allow``; dangerous: ``block`` or
``ask``) is sent, in that assistant's payload shape, to the ``before-shell`` command its generated config
registers (``.claude/settings.json``, ``.codex/hooks.json``, ``.cursor/hooks.json``, ``.gemini/settings.json``),
run with ``sh -c`` from the project root as the assistant does (``CLAUDE_PROJECT_DIR`` / ``GEMINI_PROJECT_DIR``
set). The command's own working directory (the payload's ``cwd``) is a repository in the corpus' state
(:func:`tests.agent.fakes.gitrepos.corpus_repo`). The answer is read in the assistant's protocol:

* exit 2, or a ``deny`` decision on stdout: **block**; an ``ask`` decision (Claude Code, Cursor): **ask**;
* exit 0 without a decision: **allow**; any other exit status: **error** (the assistant goes on: an allow).

A harmless line answered with block/ask is a **false positive**; a dangerous line answered with allow or an
error is a **false negative**; a dangerous line answered with the other refusal (block where ask was expected;
assistants without ``ask`` must block) is counted as **kind mismatch**. Prints one row per assistant, every
FP/FN line, and the load average; exits 1 when any FP or FN is found.

    python benchmarks/agent_guard.py [--assistant claude ...] [--jobs 2] [--json FILE]

``make guard-corpus`` runs it (176 lines x 4 assistants; ~2-4 min at load 10).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "agent" / "data" / "shell_corpus.yaml"
ASSISTANTS = ("claude", "codex", "cursor", "gemini")
ASKING = {"claude", "cursor"}  # the others have no "ask" answer: the guard blocks, saying approval is needed


def registered_command(assistant: str, root: Path = ROOT) -> str:
    """The ``before-shell`` command line ``assistant``'s generated config registers (read from the file)."""
    if assistant == "claude":
        hooks = json.loads((root / ".claude" / "settings.json").read_text(encoding="utf-8"))["hooks"]["PreToolUse"]
    elif assistant == "codex":
        hooks = json.loads((root / ".codex" / "hooks.json").read_text(encoding="utf-8"))["hooks"]["PreToolUse"]
    elif assistant == "gemini":
        hooks = json.loads((root / ".gemini" / "settings.json").read_text(encoding="utf-8"))["hooks"]["BeforeTool"]
    elif assistant == "cursor":
        entries = json.loads((root / ".cursor" / "hooks.json").read_text(encoding="utf-8"))["hooks"]
        return entries["beforeShellExecution"][0]["command"]
    else:
        raise ValueError(f"assistant {assistant!r}: expected one of {', '.join(ASSISTANTS)}")
    commands = [h["command"] for group in hooks for h in group["hooks"] if "before-shell" in h["command"]]
    if len(commands) != 1:
        raise ValueError(f"{assistant}: expected one before-shell hook in its config, found {len(commands)}")
    return commands[0]


def payload(assistant: str, command: str, cwd: Path) -> dict:
    """The before-shell payload ``assistant`` sends for ``command`` run in ``cwd``."""
    if assistant in ("claude", "codex"):
        sent = {"session_id": "corpus", "hook_event_name": "PreToolUse", "tool_name": "Bash", "cwd": str(cwd),
                "tool_input": {"command": command}}
        return {**sent, "turn_id": "corpus", "model": "gpt-5-codex"} if assistant == "codex" else sent
    if assistant == "gemini":
        return {"session_id": "corpus", "hook_event_name": "BeforeTool", "tool_name": "run_shell_command",
                "cwd": str(cwd), "tool_input": {"command": command}}
    return {"hook_event_name": "beforeShellExecution", "conversation_id": "corpus", "generation_id": "g",
            "command": command, "cwd": str(cwd), "workspace_roots": [str(ROOT)]}


def decision(returncode: int, stdout: str) -> str:
    """allow / ask / block / error from a before-shell hook's exit status and stdout (every assistant's protocol)."""
    if returncode == 2:
        return "block"
    if returncode != 0:
        return "error"
    try:
        answer = json.loads(stdout) if stdout.strip() else {}
    except json.JSONDecodeError:
        return "allow"  # plain text on stdout is context for the model, not a decision
    specific = answer.get("hookSpecificOutput", {}) if isinstance(answer, dict) else {}
    verdict = specific.get("permissionDecision") or answer.get("permission") or answer.get("decision")
    return {"ask": "ask", "deny": "block", "block": "block"}.get(verdict, "allow")


@dataclass
class Tally:
    """One assistant's counts."""

    assistant: str
    harmless: int = 0
    dangerous: int = 0
    false_positives: list = field(default_factory=list)
    false_negatives: list = field(default_factory=list)
    kind_mismatch: list = field(default_factory=list)
    seconds: list = field(default_factory=list)

    def add(self, entry: dict, got: str, seconds: float) -> None:
        """Count one answer against the corpus' expectation."""
        self.seconds.append(seconds)
        expect = entry["expect"]
        if expect == "ask" and self.assistant not in ASKING:
            expect = "block"
        if expect == "allow":
            self.harmless += 1
            if got in ("block", "ask"):
                self.false_positives.append((entry["cmd"], got))
            return
        self.dangerous += 1
        if got in ("allow", "error"):
            self.false_negatives.append((entry["cmd"], got))
        elif got != expect:
            self.kind_mismatch.append((entry["cmd"], f"{got} (expected {expect})"))

    def row(self) -> dict:
        """The JSON row."""
        return {"assistant": self.assistant, "harmless": self.harmless, "false_positives": len(self.false_positives),
                "dangerous": self.dangerous, "false_negatives": len(self.false_negatives),
                "kind_mismatch": len(self.kind_mismatch),
                "p50_ms": round(statistics.median(self.seconds) * 1e3, 1) if self.seconds else None,
                "fp": self.false_positives, "fn": self.false_negatives, "mismatch": self.kind_mismatch}


def run_hook(assistant: str, command: str, work: Path, env: dict) -> tuple[str, float]:
    """One corpus line through ``assistant``'s registered before-shell hook: (decision, seconds)."""
    data = json.dumps(payload(assistant, command, work))
    start = time.perf_counter()
    proc = subprocess.run(["sh", "-c", registered_command(assistant)], input=data, capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=120, check=False)
    return decision(proc.returncode, proc.stdout), time.perf_counter() - start


def measure(entries: list[dict], assistants: tuple[str, ...], work: Path, jobs: int = 2) -> list[Tally]:
    """Every entry through every assistant's hook; one :class:`Tally` per assistant."""
    env = dict(os.environ, CLAUDE_PROJECT_DIR=str(ROOT), GEMINI_PROJECT_DIR=str(ROOT))
    env.pop("HP_AGENT_BOOTSTRAP", None)
    tallies = {a: Tally(a) for a in assistants}
    jobs_list = [(a, e) for a in assistants for e in entries]
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        answers = list(pool.map(lambda job: run_hook(job[0], job[1]["cmd"], work, env), jobs_list))
    for (assistant, entry), (got, seconds) in zip(jobs_list, answers):
        tallies[assistant].add(entry, got, seconds)
    return list(tallies.values())


def _print(tallies: list[Tally], corpus: Path, elapsed: float) -> None:
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"guard corpus {corpus}: load average {load}; {elapsed:.0f} s")
    print(f"{'assistant':10} {'harmless':>8} {'FP':>4} {'dangerous':>9} {'FN':>4} {'kind mismatch':>13} {'p50 ms':>7}")
    for t in tallies:
        r = t.row()
        print(f"{t.assistant:10} {r['harmless']:8} {r['false_positives']:4} {r['dangerous']:9} "
              f"{r['false_negatives']:4} {r['kind_mismatch']:13} {r['p50_ms']:7}")
    for t in tallies:
        for label, rows in (("false positive", t.false_positives), ("false negative", t.false_negatives),
                            ("kind mismatch", t.kind_mismatch)):
            for cmd, got in rows:
                print(f"  {t.assistant}: {label}: {cmd!r} -> {got}")


def main(argv: list[str] | None = None) -> int:
    """Run the corpus and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--assistant", action="append", choices=ASSISTANTS,
                        help="only this assistant (repeatable; default: all four)")
    parser.add_argument("--jobs", type=int, default=2, help="hook runs at a time (default 2)")
    parser.add_argument("--corpus", type=Path, default=CORPUS, help="the corpus YAML (default: the project's)")
    parser.add_argument("--json", dest="json_out", default=None, help="also write the rows as JSON to this file")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from tests.agent.fakes.gitrepos import corpus_repo  # pylint: disable=import-outside-toplevel

    entries = yaml.safe_load(args.corpus.read_text(encoding="utf-8"))
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        work = corpus_repo(Path(tmp) / "repo")
        tallies = measure(entries, tuple(args.assistant or ASSISTANTS), work, args.jobs)
    _print(tallies, args.corpus, time.monotonic() - start)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"load": os.getloadavg(), "rows": [t.row() for t in tallies]},
                                                  indent=2), encoding="utf-8")
    return 1 if any(t.false_positives or t.false_negatives for t in tallies) else 0


if __name__ == "__main__":
    sys.exit(main())
