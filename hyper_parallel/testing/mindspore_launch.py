# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Launch a function on N MindSpore ranks (CPU, ``mccl``) and collect one JSON result per rank.

A MindSpore cluster launch costs 11-15 s here, so a test launches once and runs many checks inside
it. Two launchers, the same workers:

* ``launcher="env"`` (default): MindSpore's own dynamic-cluster variables (the mechanism ``msrun`` uses):
  one scheduler process (``MS_ROLE=MS_SCHED``) and ``world_size`` worker processes
  (``MS_ROLE=MS_WORKER``, ``MS_NODE_ID`` = rank), all on 127.0.0.1 with a free port;
* ``launcher="msrun"``: ``msrun --worker_num N --local_worker_num N --master_addr 127.0.0.1
  --master_port P --join True --log_dir <out>/msrun <runner>.py MODULE:FUNC <out>``, as
  users launch (``msrun`` starts the scheduler and the workers; worker logs are
  ``<out>/msrun/worker_<i>.log``). Measured start-up cost: see ``docs/mindspore.md``.

Each worker imports ``module``, calls ``func()`` and writes ``{"rank", "ok", "result" | "traceback"}`` to
``<out>/rank<N>.json`` (N = the MindSpore rank).

:func:`launch` waits up to ``timeout`` seconds, kills the whole process tree when it runs past it,
and raises :class:`MindSporeLaunchError` with the failing rank's traceback (or the tail of its log
when it died without writing a result). This module imports only the standard library.

Command line (what each worker runs)::

    python -m hyper_parallel.testing.mindspore_launch --worker MODULE:FUNC --out DIR
"""
from __future__ import annotations

import argparse
import faulthandler
import importlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Dict, List, Optional
from hyper_parallel.trainer._mindspore.launch import end_process_groups

__all__ = ["launch", "MindSporeLaunchError", "ClusterStartError", "worker_main"]

#: a worker started by :func:`launch` (``launcher="env"``) writes every thread's Python stack to
#: ``rank<N>.stacks`` after this many seconds (``faulthandler``), so a launch that times out says where each
#: rank was
_STACKS_ENV = "HP_MS_LAUNCH_STACKS_AFTER_S"
_STACKS_BEFORE_S = 5.0
_SCHED_CODE = "from mindspore.communication import init; init()"
_LOG_TAIL = 4000


class MindSporeLaunchError(RuntimeError):
    """A MindSpore multi-rank launch failed: a rank raised, died, or the launch timed out."""


class ClusterStartError(MindSporeLaunchError):
    """The MindSpore cluster never formed: a rank's ``init`` reported the cluster in error (heartbeats lost
    before any collective ran). :func:`launch` starts the whole launch once more on a new port."""


#: what MindSpore's ``init_cluster`` raises when the scheduler lost the nodes' heartbeats while forming
_CLUSTER_START_FAILED = "The state of the cluster is error"


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


def _stacks_of(out: Path, rank: int) -> str:
    """What ``rank<rank>.stacks`` holds (the worker's Python stacks on SIGTERM or before the timeout), or ''."""
    path = out / f"rank{rank}.stacks"
    text = path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""
    return f"\n--- rank {rank} Python stacks when it was ended:\n{text[-_LOG_TAIL:]}" if text.strip() else ""


_kill = end_process_groups  # one implementation, shared with hp-train's own MindSpore launcher


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
            problems.append(f"rank {rank} exited with code {proc.returncode} without a result; log tail:\n{_tail(log)}"
                            f"{_stacks_of(out, rank)}")
            continue
        res = json.loads(path.read_text(encoding="utf-8"))
        if not res.get("ok"):
            problems.append(f"rank {rank} raised:\n{res.get('traceback')}")
        results.append(res)
    if problems:
        text = f"MindSpore launch of {target} failed:\n" + "\n".join(problems)
        start_failed = _CLUSTER_START_FAILED in text and "init_cluster" in text  # raised inside ``init``
        raise (ClusterStartError if start_failed else MindSporeLaunchError)(text)
    return [r["result"] for r in results]


#: the script msrun runs: positional arguments (msrun's own parser would take ``--worker`` for an
#: abbreviation of ``--worker_num``)
_RUNNER = ("import sys\nfrom hyper_parallel.testing.mindspore_launch import _main\n"
           "sys.exit(_main(['--worker', sys.argv[1], '--out', sys.argv[2]]))\n")


def _msrun_executable() -> str:
    found = Path(sys.executable).with_name("msrun")
    if found.exists():
        return str(found)
    which = shutil.which("msrun")
    if which is None:
        raise MindSporeLaunchError("launch(launcher='msrun'): the msrun executable (installed with mindspore) was "
                                   f"not found next to {sys.executable} nor on PATH")
    return which


def _wait_results(proc: subprocess.Popen, out: Path, world_size: int, deadline: float) -> bool:
    """True when msrun exited or every rank wrote its result before ``deadline``. The workers leave with
    ``os._exit`` (no cluster teardown), so msrun's scheduler would wait for their heartbeats to time out
    before exiting; the launcher ends the process tree itself once every result is in."""
    while time.monotonic() < deadline:
        if proc.poll() is not None or all((out / f"rank{r}.json").exists() for r in range(world_size)):
            return True
        time.sleep(0.1)
    return False


def _launch_msrun(target: str, world_size: int, timeout: float, extra: Dict[str, str]) -> List[Any]:
    """The same workers started by ``msrun`` (its scheduler included), as users launch them."""
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="hp_msrun_") as tmp:
        out = Path(tmp)
        runner = out / "hp_worker.py"
        runner.write_text(_RUNNER, encoding="utf-8")
        log_dir = out / "msrun"
        env = _env("MS_WORKER", port, world_size, None, extra)
        for name in ("MS_ROLE", "MS_SCHED_HOST", "MS_SCHED_PORT", "MS_WORKER_NUM"):
            env.pop(name, None)  # msrun sets its own
        # msrun runs ``python`` from PATH: this interpreter's, as in an activated virtual environment
        env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
        cmd = [_msrun_executable(), "--worker_num", str(world_size), "--local_worker_num", str(world_size),
               "--master_addr", "127.0.0.1", "--master_port", str(port), "--join", "True",
               "--cluster_time_out", str(max(30, int(timeout))), "--log_dir", str(log_dir), str(runner),
               target, str(out)]
        main_log = out / "msrun.log"
        with open(main_log, "wb") as fh:
            proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=tmp, env=env,  # pylint: disable=consider-using-with
                                    start_new_session=True)
        logs = [log_dir / f"worker_{r}.log" for r in range(world_size)]
        try:
            if not _wait_results(proc, out, world_size, time.monotonic() + timeout):
                tails = "\n".join(f"--- worker {r} log tail:\n{_tail(log)}" for r, log in enumerate(logs))
                raise MindSporeLaunchError(f"msrun launch of {target} timed out after {timeout:.0f} s\n{tails}")
            fake = [SimpleNamespace(returncode=proc.returncode) for _ in range(world_size)]
            try:
                return _collect(out, fake, logs, target)
            except MindSporeLaunchError as exc:
                raise MindSporeLaunchError(f"{exc}\n--- msrun output tail:\n{_tail(main_log)}") from None
        finally:
            _kill([proc])


def launch(target: str, world_size: int = 2, timeout: float = 120.0,
           env: Optional[Dict[str, str]] = None, launcher: str = "env") -> List[Any]:
    """Run ``target`` (``"package.module:function"``) on ``world_size`` MindSpore ranks.

    ``launcher``: ``"env"`` (scheduler and workers started here with the dynamic-cluster variables) or
    ``"msrun"`` (MindSpore's launcher). Returns the list of per-rank return values (JSON round-tripped),
    rank order. Raises :class:`MindSporeLaunchError` naming the failing rank(s) with their traceback, or
    the ranks still running when ``timeout`` seconds pass (the processes are killed).
    """
    if ":" not in target:
        raise ValueError(f"launch(target={target!r}): expected 'package.module:function'")
    if world_size < 1:
        raise ValueError(f"launch(world_size={world_size}): expected a positive number of ranks")
    if launcher not in ("env", "msrun"):
        raise ValueError(f"launch(launcher={launcher!r}): expected 'env' or 'msrun'")
    extra = dict(env or {})
    if launcher == "msrun":
        return _launch_msrun(target, world_size, timeout, extra)
    try:
        return _launch_env(target, world_size, timeout, extra)
    except ClusterStartError as exc:  # init failed: no collective of the target ran
        first = str(exc).splitlines()[0]
        print(f"hyper_parallel.testing.mindspore_launch: {first} (the cluster did not form: "
              f"{_CLUSTER_START_FAILED!r}); starting the launch once more on a new port", file=sys.stderr)
        return _launch_env(target, world_size, timeout, extra)


def _launch_env(target: str, world_size: int, timeout: float, extra: Dict[str, str]) -> List[Any]:
    """One launch with the dynamic-cluster variables: a scheduler process and ``world_size`` workers."""
    port = _free_port()
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
                        env=_env("MS_WORKER", port, world_size, rank,
                                 {**extra, _STACKS_ENV: str(max(1.0, timeout - _STACKS_BEFORE_S))}),
                        start_new_session=True))
            workers = procs[1:]
            if not _wait(workers, time.monotonic() + timeout):
                running = [r for r, p in enumerate(workers) if p.poll() is None]
                tails = "\n".join(f"--- rank {r} log tail:\n{_tail(logs[r])}{_stacks_of(out, r)}" for r in running)
                raise MindSporeLaunchError(f"MindSpore launch of {target} timed out after {timeout:.0f} s; "
                                           f"ranks still running: {running}\n{tails}")
            return _collect(out, workers, logs, target)
        finally:
            _kill(procs)


def _rank_now() -> int:
    """This worker's MindSpore rank (after ``init``; msrun assigns it), else the launch variables'."""
    try:
        from mindspore.communication import get_rank
        return int(get_rank())
    except Exception:  # pylint: disable=broad-except  # not initialised: the variables say it
        return int(os.environ.get("MS_NODE_ID", os.environ.get("RANK_ID", "0")))


def _stacks_on_timeout(out: Path) -> None:
    """Arm ``faulthandler`` to write every thread's stack to ``rank<N>.stacks`` when this worker receives SIGTERM
    (then the signal's previous action runs) and shortly before the launch times out
    (``HP_MS_LAUNCH_STACKS_AFTER_S``, set by :func:`launch`), so a rank that ends without a result says where it
    was."""
    rank = os.environ.get("MS_NODE_ID", os.environ.get("RANK_ID"))
    if rank is None:  # under msrun the rank is known only after init: a name of its own
        rank = f"-pid{os.getpid()}"
    stacks = open(out / f"rank{rank}.stacks", "w", encoding="utf-8")  # pylint: disable=consider-using-with
    faulthandler.register(signal.SIGTERM, file=stacks, all_threads=True, chain=True)
    after = os.environ.get(_STACKS_ENV)
    if after:
        faulthandler.dump_traceback_later(float(after), exit=False, file=stacks)


def _world_size() -> int:
    """The launch's number of workers (``MS_WORKER_NUM``, set by both launchers), else MindSpore's group size."""
    if os.environ.get("MS_WORKER_NUM"):
        return int(os.environ["MS_WORKER_NUM"])
    try:
        from mindspore.communication import get_group_size
        return int(get_group_size())
    except Exception:  # pylint: disable=broad-except  # not initialised: this rank alone
        return 1


def _await_peers(out: Path, poll_s: float = 0.05) -> None:
    """Wait until every rank has written its result before leaving. A worker that leaves first drops out of the
    MindSpore cluster; a CI run on a loaded machine saw a rank ended by SIGTERM, without its result, after its
    peer had written its own and left, so every rank stays in the cluster until all results are in. A failed rank
    does not wait (its peers may be blocked in a collective it will never join; the launcher ends them), and the
    launch timeout bounds the wait (the launcher kills every process when it passes)."""
    world = _world_size()
    while not all((out / f"rank{r}.json").exists() for r in range(world)):
        time.sleep(poll_s)


def worker_main(target: str, out: str) -> int:
    """Worker entry: run ``target`` and write this rank's JSON result; the exit code is 0 or 1.

    A rank whose ``target`` returned waits for the other ranks' results before it leaves (:func:`_await_peers`).
    Under ``msrun`` the scheduler process runs this script too (``MS_ROLE=MS_SCHED``): it only serves the
    cluster (``init()``) and exits normally once the workers are done, writing no result."""
    if os.environ.get("MS_ROLE") == "MS_SCHED":
        from mindspore.communication import init
        init()
        return 0
    module, func = target.split(":", 1)
    _stacks_on_timeout(Path(out))
    try:
        from hyper_parallel.platform.mindspore.runtime import configure  # pylint: disable=import-outside-toplevel
        configure()  # what the trainer runs with: synchronous launch, one dispatch and one kernel thread
        result = getattr(importlib.import_module(module), func)()
        payload = {"rank": _rank_now(), "ok": True, "result": result}
    except Exception:  # pylint: disable=broad-except  # reported to the launcher with the traceback
        payload = {"rank": _rank_now(), "ok": False, "traceback": traceback.format_exc()}
    rank = payload["rank"]
    path = Path(out) / f"rank{rank}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, default=str), encoding="utf-8")
    tmp.replace(path)
    sys.stdout.flush()
    if payload["ok"]:
        _await_peers(Path(out))
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
