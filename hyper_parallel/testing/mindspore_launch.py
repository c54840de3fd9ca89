# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Launch a function on N MindSpore ranks (CPU, ``mccl``) and collect one JSON result per rank.

A MindSpore cluster launch costs 11-15 s here, so a test launches once and runs many checks inside
it. The launch uses MindSpore's own dynamic-cluster variables (the mechanism ``msrun`` uses): one
scheduler process (``MS_ROLE=MS_SCHED``) and ``world_size`` worker processes (``MS_ROLE=MS_WORKER``,
``MS_NODE_ID`` = rank), all on 127.0.0.1 with a free port. Each worker imports ``module``, calls
``func()`` and writes ``{"rank", "ok", "result" | "traceback"}`` to ``<out>/rank<N>.json``.

:func:`launch` waits up to ``timeout`` seconds, kills the whole process tree when it runs past it,
and raises :class:`MindSporeLaunchError` with the failing rank's traceback (or the tail of its log
when it died without writing a result). This module imports only the standard library.

Command line (what each worker runs)::

    python -m hyper_parallel.testing.mindspore_launch --worker MODULE:FUNC --out DIR
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Dict, List, Optional

__all__ = ["launch", "MindSporeLaunchError", "worker_main"]

_SCHED_CODE = "from mindspore.communication import init; init()"
_LOG_TAIL = 4000


class MindSporeLaunchError(RuntimeError):
    """A MindSpore multi-rank launch failed: a rank raised, died, or the launch timed out."""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(role: str, port: int, world_size: int, node_id: Optional[int], extra: Dict[str, str]) -> Dict[str, str]:
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "") if env.get("PYTHONPATH") else root
    env.update({"MS_ROLE": role, "MS_SCHED_HOST": "127.0.0.1", "MS_SCHED_PORT": str(port),
                "MS_WORKER_NUM": str(world_size), "HYPER_PARALLEL_BACKEND": "mindspore",
                "GLOG_v": env.get("GLOG_v", "3"), "OMP_NUM_THREADS": env.get("OMP_NUM_THREADS", "1")})
    if node_id is not None:
        env["MS_NODE_ID"] = str(node_id)
        env["RANK_ID"] = str(node_id)
    env.update(extra)
    return env


def _tail(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return f"<no log: {exc}>"
    return text[-_LOG_TAIL:]


def _kill(procs: List[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
    for p in procs:
        p.wait()


def _wait(procs: List[subprocess.Popen], deadline: float) -> bool:
    """True when every worker exited before ``deadline``."""
    while time.monotonic() < deadline:
        if all(p.poll() is not None for p in procs):
            return True
        time.sleep(0.1)
    return False


def _collect(out: Path, workers: List[subprocess.Popen], logs: List[Path], target: str) -> List[Dict[str, Any]]:
    results, problems = [], []
    for rank, (proc, log) in enumerate(zip(workers, logs)):
        path = out / f"rank{rank}.json"
        if not path.exists():
            problems.append(f"rank {rank} exited with code {proc.returncode} without a result; log tail:\n{_tail(log)}")
            continue
        res = json.loads(path.read_text(encoding="utf-8"))
        if not res.get("ok"):
            problems.append(f"rank {rank} raised:\n{res.get('traceback')}")
        results.append(res)
    if problems:
        raise MindSporeLaunchError(f"MindSpore launch of {target} failed:\n" + "\n".join(problems))
    return [r["result"] for r in results]


def launch(target: str, world_size: int = 2, timeout: float = 120.0,
           env: Optional[Dict[str, str]] = None) -> List[Any]:
    """Run ``target`` (``"package.module:function"``) on ``world_size`` MindSpore ranks.

    Returns the list of per-rank return values (JSON round-tripped), rank order. Raises
    :class:`MindSporeLaunchError` naming the failing rank(s) with their traceback, or the ranks
    still running when ``timeout`` seconds pass (the processes are killed).
    """
    if ":" not in target:
        raise ValueError(f"launch(target={target!r}): expected 'package.module:function'")
    if world_size < 1:
        raise ValueError(f"launch(world_size={world_size}): expected a positive number of ranks")
    port = _free_port()
    extra = dict(env or {})
    with tempfile.TemporaryDirectory(prefix="hp_ms_launch_") as tmp:
        out = Path(tmp)
        procs: List[subprocess.Popen] = []
        logs: List[Path] = []
        try:
            sched_log = out / "scheduler.log"
            with open(sched_log, "wb") as fh:
                procs.append(subprocess.Popen(  # pylint: disable=consider-using-with
                    [sys.executable, "-c", _SCHED_CODE], stdout=fh, stderr=subprocess.STDOUT, cwd=tmp,
                    env=_env("MS_SCHED", port, world_size, None, extra), start_new_session=True))
            for rank in range(world_size):
                log = out / f"rank{rank}.log"
                logs.append(log)
                with open(log, "wb") as fh:
                    procs.append(subprocess.Popen(  # pylint: disable=consider-using-with
                        [sys.executable, "-m", "hyper_parallel.testing.mindspore_launch", "--worker", target,
                         "--out", str(out)], stdout=fh, stderr=subprocess.STDOUT, cwd=tmp,
                        env=_env("MS_WORKER", port, world_size, rank, extra), start_new_session=True))
            workers = procs[1:]
            if not _wait(workers, time.monotonic() + timeout):
                running = [r for r, p in enumerate(workers) if p.poll() is None]
                tails = "\n".join(f"--- rank {r} log tail:\n{_tail(logs[r])}" for r in running)
                raise MindSporeLaunchError(f"MindSpore launch of {target} timed out after {timeout:.0f} s; "
                                           f"ranks still running: {running}\n{tails}")
            return _collect(out, workers, logs, target)
        finally:
            _kill(procs)


def worker_main(target: str, out: str) -> int:
    """Worker entry: run ``target`` and write this rank's JSON result; the exit code is 0 or 1."""
    rank = int(os.environ.get("MS_NODE_ID", "0"))
    module, func = target.split(":", 1)
    try:
        result = getattr(importlib.import_module(module), func)()
        payload = {"rank": rank, "ok": True, "result": result}
    except Exception:  # pylint: disable=broad-except  # reported to the launcher with the traceback
        payload = {"rank": rank, "ok": False, "traceback": traceback.format_exc()}
    path = Path(out) / f"rank{rank}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, default=str), encoding="utf-8")
    tmp.replace(path)
    sys.stdout.flush()
    # MindSpore's cluster teardown can hang when one rank has failed: leave without it.
    os._exit(0 if payload["ok"] else 1)  # pylint: disable=protected-access


def _main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", required=True, help="module:function to run on this rank")
    parser.add_argument("--out", required=True, help="directory for rank<N>.json")
    args = parser.parse_args(argv)
    return worker_main(args.worker, args.out)


if __name__ == "__main__":
    sys.exit(_main())
