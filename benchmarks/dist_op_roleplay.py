# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Replay the four-op dist-op role-play: new ops taken to green by ``hp-agent dist-op`` commands only.

For each op, in a clone of this repository checked out at ``--base`` (a commit where the ops are not
registered yet; the clone's ``main`` is that commit, so ``gate run --changed`` sees only the op's files):

1. the assistant runs ``hp-agent dist-op analyze OP`` (draft plan);
2. the person's actions: one ``dist-op set PLAN frontends.mindspore.in_scope=false`` per open question
   the plan has (the MindSpore scope is always one), then ``dist-op confirm PLAN``;
3. the assistant runs ``hp-agent dist-op dev PLAN --commit`` (registry entry, case files, UT, gloo ST,
   report; one commit per op) and ``hp-agent gate run --changed`` (the per-op gate).

A plan with a ``[TBD]`` other than the MindSpore scope counts as a failed role-play for that op (it needs
a person's design decision). Prints one row per op: human actions, analyze / dev / gate seconds, exit
codes and the commit; ``--json FILE`` writes them. Takes minutes per op (the analysis probes and
synthesises, dev runs UT and a 2-rank gloo ST): run it by hand, not in ``make test``::

    python benchmarks/dist_op_roleplay.py --base 9e070c4 torch.gcd torch.greater_equal \\
        torch.nn.functional.lp_pool1d torch.margin_ranking_loss
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCOPE_KEY = "frontends.mindspore.in_scope"


def _run(argv: list[str], cwd: Path, env: dict) -> tuple[int, float, str]:
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    return proc.returncode, time.monotonic() - start, proc.stdout + proc.stderr


def _clone(base: str, into: Path) -> Path:
    repo = into / "repo"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(repo)], check=True)
    for args in (["checkout", "-q", "-B", "main", base], ["checkout", "-q", "-b", "roleplay"],
                 ["remote", "remove", "origin"], ["config", "user.name", "Role Play"],
                 ["config", "user.email", "roleplay@example.org"]):
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)
    return repo


def one_op(repo: Path, op: str, env: dict) -> dict:
    """The role-play of one op; the row of the table."""
    hp = [sys.executable, "-m", "hp_agent"]
    plan = f"plans/{op}.md"
    # main is where this op starts: `gate run --changed` sees this op's files only
    subprocess.run(["git", "branch", "-f", "main", "HEAD"], cwd=repo, check=True, capture_output=True)
    row: dict = {"op": op, "human_actions": 0}
    row["analyze_rc"], row["analyze_s"], _ = _run(hp + ["dist-op", "analyze", op], repo, env)
    text = (repo / plan).read_text(encoding="utf-8") if (repo / plan).is_file() else ""
    open_lines = [line.strip() for line in text.split("\n---", 1)[0].splitlines() if "[TBD]" in line]
    row["open"] = open_lines
    if any(not line.startswith("in_scope:") for line in open_lines):
        row["result"] = "needs a design decision"
        return row
    if open_lines:
        rc, _, out = _run(hp + ["dist-op", "set", plan, f"{SCOPE_KEY}=false"], repo, env)
        row["human_actions"] += 1
        if rc:
            row["result"] = f"set failed: {out.strip()[-200:]}"
            return row
    rc, _, out = _run(hp + ["dist-op", "confirm", plan, "--by", "role-play reviewer"], repo, env)
    row["human_actions"] += 1
    if rc:
        row["result"] = f"confirm refused: {out.strip()[-200:]}"
        return row
    row["dev_rc"], row["dev_s"], _ = _run(hp + ["dist-op", "dev", plan, "--commit"], repo, env)
    row["commit"] = subprocess.run(["git", "log", "-1", "--format=%h %s"], cwd=repo, capture_output=True,
                                   text=True, check=True).stdout.strip()
    row["gate_rc"], row["gate_s"], out = _run(hp + ["gate", "run", "--changed"], repo, env)
    row["gate_stages"] = re.findall(r"^\s*(passed|failed|not-run) (\S+)", out, re.M)
    row["result"] = "green" if row["dev_rc"] == 0 and row["gate_rc"] == 0 else "red"
    return row


def main() -> int:
    """Replay the role-play and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("ops", nargs="+", help="torch op names not registered at --base")
    parser.add_argument("--base", required=True, help="commit to start from (the ops unregistered there)")
    parser.add_argument("--json", type=Path, help="write the rows as JSON")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hp-roleplay-") as tmp:
        repo = _clone(args.base, Path(tmp))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(repo), str(repo / "tools")]))
        rows = [one_op(repo, op, env) for op in args.ops]
    print(f"{'op':34} {'actions':>7} {'analyze':>8} {'dev':>6} {'gate':>6}  result")
    for r in rows:
        print(f"{r['op']:34} {r['human_actions']:>7} {r['analyze_s']:>7.0f}s {r.get('dev_s', 0):>5.0f}s "
              f"{r.get('gate_s', 0):>5.0f}s  {r['result']}")
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    return 0 if all(r["result"] == "green" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
