# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""A reusable pool of gloo worker processes that runs one function on N ranks.

Starting a process group costs about a second; a test case should cost milliseconds. A
:class:`WorkerPool` therefore spawns ``world_size`` processes once, initialises the default
``torch.distributed`` process group (gloo over 127.0.0.1) in each, and then runs any number of
cases on them. A case is a module-level function located by module and qualified name, called
on every rank with the same picklable arguments.

When a case goes wrong the pool reports it and starts afresh:

* a rank raises: the error carries that rank's full traceback (every failing rank, labelled);
  ranks still blocked in a collective get a short grace period, their Python stacks are dumped
  into the report, then the pool is killed and recreated;
* a rank dies: reported as ``rank N died (exit code X)``; the survivors get the collective
  timeout (plus the grace period) to fail by themselves, then the pool is recreated;
* the case runs past its timeout: :class:`MultiRankTimeout` names the case and the ranks still
  running, with their stacks; the pool is recreated.

This module imports only the standard library; torch is imported inside the worker processes.
Environment knobs: ``HYPER_PARALLEL_COLLECTIVE_TIMEOUT`` (seconds, process-group timeout,
default 30), ``HYPER_PARALLEL_FAIL_GRACE`` (seconds, default 1), ``HYPER_PARALLEL_POOL_START_TIMEOUT``
(seconds, default 120), ``HYPER_PARALLEL_MAX_POOLS`` (live pools kept at once, default 2) and
``HYPER_PARALLEL_START_METHOD`` (``forkserver``, the default on Linux, or ``spawn``).
"""
from __future__ import annotations

import ast
import atexit
import collections
import contextlib
import functools
import importlib
import importlib.util
import itertools
import multiprocessing
import os
import pickle
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import traceback
import weakref
from multiprocessing.connection import wait as _wait_ready
from typing import Any, Callable, NamedTuple, Optional

__all__ = [
    "COLLECTIVE_TIMEOUT_ENV",
    "MultiRankError",
    "MultiRankTimeout",
    "PoolStartupError",
    "WorkerPool",
    "default_collective_timeout",
    "get_pool",
    "multi_rank",
    "run_on_ranks",
    "shutdown_pools",
]

COLLECTIVE_TIMEOUT_ENV = "HYPER_PARALLEL_COLLECTIVE_TIMEOUT"
FAIL_GRACE_ENV = "HYPER_PARALLEL_FAIL_GRACE"
START_TIMEOUT_ENV = "HYPER_PARALLEL_POOL_START_TIMEOUT"
MAX_POOLS_ENV = "HYPER_PARALLEL_MAX_POOLS"
START_METHOD_ENV = "HYPER_PARALLEL_START_METHOD"
DEFAULT_COLLECTIVE_TIMEOUT = 30.0
DEFAULT_FAIL_GRACE = 1.0
DEFAULT_START_TIMEOUT = 120.0
DEFAULT_MAX_POOLS = 2
_START_ATTEMPTS = 2
_ORIGINAL_ATTR = "_hp_multi_rank_original"
_STACK_DUMP_WAIT = 1.0


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError as err:
        raise ValueError(f"{name}={raw!r} is not a number of seconds") from err
    if value <= 0:
        raise ValueError(f"{name}={raw!r} must be positive")
    return value


def default_collective_timeout() -> float:
    """The process-group timeout in seconds: ``$HYPER_PARALLEL_COLLECTIVE_TIMEOUT`` or 30."""
    return _env_float(COLLECTIVE_TIMEOUT_ENV, DEFAULT_COLLECTIVE_TIMEOUT)


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------
class MultiRankError(Exception):
    """A multi-rank case failed: a rank raised, died, or was still running when the case ended.

    Attributes:
        case: the case name (the pytest node id under pytest).
        world_size: number of ranks the case ran on.
        failures: rank -> formatted traceback of the exception that rank raised.
        died: rank -> process exit code (negative: killed by that signal).
        still_running: ranks that had not finished when the harness gave up (they were killed).
        stacks: rank -> Python stack dump of a rank that was still running.
    """

    def __init__(self, case: str, world_size: int, *, failures=None, died=None, still_running=(),
                 stacks=None, headline: str = ""):
        self.case = case
        self.world_size = world_size
        self.failures = dict(sorted((failures or {}).items()))
        self.died = dict(sorted((died or {}).items()))
        self.still_running = tuple(sorted(still_running))
        self.stacks = dict(sorted((stacks or {}).items()))
        self.headline = headline or f"multi-rank case {case!r} failed on {world_size} ranks:"
        super().__init__(self._format())

    def _summary_lines(self) -> list:
        lines = []
        for rank, tb in self.failures.items():
            lines.append(f"  rank {rank} raised: {_exception_line(tb)}")
        for rank, code in self.died.items():
            lines.append(f"  rank {rank} died (exit code {code}){_signal_note(code)}")
        for rank in self.still_running:
            lines.append(f"  rank {rank} still running (killed by the harness)")
        return lines

    def _format(self) -> str:
        parts = [self.headline] + self._summary_lines()
        for rank, tb in self.failures.items():
            parts.append(f"==================== rank {rank} traceback ====================")
            parts.append(tb.rstrip())
        for rank, stack in self.stacks.items():
            parts.append(f"==================== rank {rank} stack (still running) ====================")
            parts.append(stack.rstrip() or "(no stack dump received)")
        return "\n".join(parts)


class MultiRankTimeout(MultiRankError):
    """A multi-rank case ran past its per-case timeout; ``still_running`` names the hung ranks."""


class PoolStartupError(MultiRankError):
    """The worker processes could not start or initialise their process group."""


def _exception_line(tb: str) -> str:
    """The ``Type: message`` line of a formatted traceback (the last exception of a chain)."""
    lines = tb.rstrip().splitlines()
    frames = [i for i, line in enumerate(lines) if line.startswith("  File ")]
    for line in lines[frames[-1] + 1 if frames else 0:]:
        if line and not line[0].isspace():
            return line
    return lines[-1].strip() if lines else "an exception"


def _trim_stack(dump: str) -> str:
    """Drop the harness's and multiprocessing's own frames from a faulthandler dump."""
    own = (os.path.abspath(__file__), f"{os.sep}multiprocessing{os.sep}", 'File "<string>"')
    return "\n".join(line for line in dump.splitlines() if not any(mark in line for mark in own))


def _signal_note(code: Optional[int]) -> str:
    if code is None or code >= 0:
        return ""
    try:
        return f", signal {signal.Signals(-code).name}"
    except ValueError:
        return ""


# --------------------------------------------------------------------------------------------
# Locating the function to run
# --------------------------------------------------------------------------------------------
class _FunctionRef:
    """Picklable address of a module-level function (or test-class method): module, file, qualname."""

    def __init__(self, fn: Callable):
        if isinstance(fn, _FunctionRef):
            self.__dict__.update(fn.__dict__)
            return
        fn = getattr(fn, _ORIGINAL_ATTR, fn)
        qualname = getattr(fn, "__qualname__", None)
        module = getattr(fn, "__module__", None)
        if not qualname or not module or "<locals>" in qualname or "<lambda>" in qualname:
            raise ValueError(f"{fn!r} must be a function defined at module level (or a method of a "
                             f"module-level class) so that worker processes can import it")
        self.module = module
        self.qualname = qualname
        code = getattr(fn, "__code__", None)
        self.path = code.co_filename if code is not None else None
        self.is_method = "." in qualname

    def __repr__(self) -> str:
        return f"{self.module}.{self.qualname}"

    def resolve(self) -> Callable:
        """Import the module in this process and return the original (undecorated) callable.

        A method is bound to a fresh instance of its class (as pytest does for each test).
        """
        key = (self.module, self.qualname, self.path)
        found = _RESOLVED.get(key)
        if found is None:
            obj = _load_module(self.module, self.path)
            owner = None
            for part in self.qualname.split("."):
                owner, obj = obj, getattr(obj, part)
            found = _RESOLVED[key] = (_unwrap(obj), owner)
        fn, owner = found
        if self.is_method:
            return functools.partial(fn, owner())
        return fn


_RESOLVED: dict = {}  # worker side: (module, qualname, path) -> (function, owner)


def _unwrap(obj: Callable) -> Callable:
    seen = obj
    while seen is not None:
        original = getattr(seen, _ORIGINAL_ATTR, None)
        if original is not None:
            return original
        seen = getattr(seen, "__wrapped__", None)
    return obj


def _same_file(module, path: Optional[str]) -> bool:
    mod_file = getattr(module, "__file__", None)
    if path is None:
        return True
    return mod_file is not None and os.path.realpath(mod_file) == os.path.realpath(path)


def _is_test_file(path: Optional[str]) -> bool:
    base = os.path.basename(path or "")
    return base.endswith(".py") and (base.startswith("test_") or base.endswith("_test.py"))


def _assert_rewriter():
    """pytest's assertion rewriter, or None when pytest is not installed."""
    try:
        from _pytest.assertion.rewrite import rewrite_asserts  # pylint: disable=import-outside-toplevel
    except ImportError:
        return None
    return rewrite_asserts


def _exec_from_file(name: str, path: str):
    """Load ``path`` as module ``name``; test files get pytest's assertion rewriting, as under pytest."""
    parent = name.rpartition(".")[0]
    if parent and parent not in sys.modules:
        # a module outside any importable package: its relative imports then fail by themselves
        with contextlib.suppress(ImportError):
            importlib.import_module(parent)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    rewrite = _assert_rewriter() if _is_test_file(path) else None
    sys.modules[name] = module
    try:
        if rewrite is None:
            spec.loader.exec_module(module)
        else:
            with open(path, "rb") as handle:
                source = handle.read()
            tree = ast.parse(source, filename=path)
            rewrite(tree, source, path, None)
            exec(compile(tree, path, "exec", dont_inherit=True), module.__dict__)  # pylint: disable=exec-used
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def _load_module(name: str, path: Optional[str]):
    """Find module ``name`` (defined in ``path``) in this process, importing it if needed.

    A script's ``__main__`` is loaded as ``__mp_main__`` (as multiprocessing does), so that its
    ``if __name__ == "__main__":`` block does not run again in the worker.
    """
    for candidate in ((name, "__mp_main__") if name == "__main__" else (name,)):
        module = sys.modules.get(candidate)
        if module is not None and _same_file(module, path):
            return module
    if name == "__main__":
        name = "__mp_main__"
    if name != "__mp_main__" and not (_is_test_file(path) and os.path.exists(path)):
        try:
            module = importlib.import_module(name)
        except ImportError:
            module = None
        if module is not None and _same_file(module, path):
            return module
    if path is None or not os.path.exists(path):
        raise ImportError(f"cannot import module {name!r} (file {path!r}) in a worker process")
    return _exec_from_file(name, path)


# --------------------------------------------------------------------------------------------
# Worker process side
# --------------------------------------------------------------------------------------------
def _redirect_output(log_path: str) -> None:
    """Send this process's fd 1 and 2 to a per-rank log the parent reads after each case."""
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    for stream in (sys.stdout, sys.stderr):
        if stream is not None and hasattr(stream, "reconfigure"):
            stream.reconfigure(line_buffering=True)


_STACK_DUMP_FILES: list = []  # keeps the faulthandler target open for the worker's lifetime


def _install_stack_dump(stack_path: str) -> None:
    """Dump every thread's Python stack to ``stack_path`` on SIGUSR1 (works inside C calls too)."""
    import faulthandler  # pylint: disable=import-outside-toplevel
    if not hasattr(signal, "SIGUSR1"):
        return
    handle = open(stack_path, "w", encoding="utf-8")  # pylint: disable=consider-using-with
    _STACK_DUMP_FILES.append(handle)
    faulthandler.register(signal.SIGUSR1, file=handle, all_threads=True)


def _die_with_parent() -> None:
    """On Linux, have the kernel SIGKILL this worker when its parent process goes away.

    The parent is the multiprocessing fork server (which exits with the test process) or, with
    the spawn start method, the thread that started the pool.
    """
    if not sys.platform.startswith("linux"):
        return
    import ctypes  # pylint: disable=import-outside-toplevel
    pr_set_pdeathsig = 1
    parent = os.getppid()
    ctypes.CDLL(None).prctl(pr_set_pdeathsig, int(signal.SIGKILL))
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def _init_torch(rank: int, world_size: int, port: int, collective_timeout: float) -> None:
    import datetime  # pylint: disable=import-outside-toplevel
    import torch  # pylint: disable=import-outside-toplevel
    import torch.distributed as dist  # pylint: disable=import-outside-toplevel
    torch.set_num_threads(1)
    from hyper_parallel.platform.base import record_collective_timeout  # pylint: disable=import-outside-toplevel
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world_size, timeout=datetime.timedelta(seconds=collective_timeout))
    record_collective_timeout("torch", collective_timeout)  # error messages name the timeout in force


def _set_worker_env(rank: int, world_size: int, port: int) -> None:
    os.environ.update({
        "HYPER_PARALLEL_BACKEND": "torch",
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "WORLD_SIZE": str(world_size),
        "LOCAL_WORLD_SIZE": str(world_size),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "OMP_NUM_THREADS": "1",
    })
    if sys.platform.startswith("linux") and os.path.exists("/sys/class/net/lo"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")


def _flush_std_streams() -> None:
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()


class _CaseIsolation:
    """Undo what a case commonly changes in its worker: environment, default dtype, grad mode."""

    def __init__(self):
        self.environ = dict(os.environ)
        self.torch = sys.modules.get("torch")
        if self.torch is not None:
            self.dtype = self.torch.get_default_dtype()
            self.grad = self.torch.is_grad_enabled()

    def restore(self) -> None:
        """Put the saved state back."""
        if os.environ != self.environ:
            os.environ.clear()
            os.environ.update(self.environ)
        if self.torch is not None:
            self.torch.set_default_dtype(self.dtype)
            self.torch.set_grad_enabled(self.grad)


def _run_case(case_id: int, payload: bytes) -> tuple:
    isolation = _CaseIsolation()
    try:
        ref, args, kwargs = pickle.loads(payload)
        value = ref.resolve()(*args, **kwargs)
    except BaseException as err:  # pylint: disable=broad-exception-caught  # reported to the parent
        tb = err.__traceback__.tb_next or err.__traceback__  # drop this harness frame
        return ("error", case_id, "".join(traceback.format_exception(type(err), err, tb)))
    finally:
        _flush_std_streams()
        isolation.restore()
    return ("ok", case_id, value)


def _send_reply(conn, reply: tuple) -> None:
    try:
        conn.send(reply)
    except (pickle.PicklingError, TypeError, AttributeError) as err:
        conn.send(("error", reply[1], f"the return value could not be pickled: {err!r}\n"))


def _serve(conn) -> None:
    while True:
        try:
            message = conn.recv()
        except EOFError:  # the parent is gone
            return
        if message[0] == "stop":
            return
        _, case_id, payload = message
        _send_reply(conn, _run_case(case_id, payload))


class _WorkerSpec(NamedTuple):
    """What one worker process needs to know (pickled to it at start)."""

    rank: int
    world_size: int
    port: int
    workdir: str
    collective_timeout: float
    tie_to_parent: bool


def _worker_main(spec: _WorkerSpec, conn) -> None:
    """Entry point of one worker process: initialise the process group, then serve cases."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    # Workers are started as daemons (so that multiprocessing never waits for them at exit); a
    # case may still start processes of its own (a DataLoader with workers, say).
    multiprocessing.current_process().daemon = False
    _redirect_output(os.path.join(spec.workdir, f"rank{spec.rank}.log"))
    _install_stack_dump(os.path.join(spec.workdir, f"rank{spec.rank}.stack"))
    if spec.tie_to_parent:
        _die_with_parent()
    _set_worker_env(spec.rank, spec.world_size, spec.port)
    try:
        _init_torch(spec.rank, spec.world_size, spec.port, spec.collective_timeout)
    except BaseException:  # pylint: disable=broad-exception-caught  # reported to the parent
        conn.send(("error", None, traceback.format_exc()))
        return
    conn.send(("ready", None, os.getpid()))
    _serve(conn)
    import torch.distributed as dist  # pylint: disable=import-outside-toplevel
    dist.destroy_process_group()
    _flush_std_streams()
    os._exit(0)  # skip the interpreter teardown: nothing is left to clean up, and it is slow


# --------------------------------------------------------------------------------------------
# Parent side: one case
# --------------------------------------------------------------------------------------------
class _CaseRun:
    """Collects the replies of every rank for one case (or for pool start-up, ``case_id=None``)."""

    def __init__(self, pool: "WorkerPool", case_id: Optional[int], timeout: float):
        self.pool = pool
        self.case_id = case_id
        self.deadline = time.monotonic() + timeout
        self.give_up_at: Optional[float] = None
        self.pending = set(range(pool.world_size))
        self.results: dict = {}
        self.failures: dict = {}
        self.died: dict = {}

    @property
    def ok(self) -> bool:
        """True when every rank replied and none failed."""
        return not (self.pending or self.failures or self.died)

    def collect(self) -> "_CaseRun":
        """Wait for replies until all ranks answered, the deadline passed, or the grace ran out."""
        while self.pending:
            limit = self.deadline if self.give_up_at is None else min(self.deadline, self.give_up_at)
            remaining = limit - time.monotonic()
            if remaining <= 0:
                break
            watch = {}
            for rank in self.pending:
                watch[self.pool.conns[rank]] = (self._on_message, rank)
                watch[self.pool.procs[rank].sentinel] = (self._on_exit, rank)
            for ready in _wait_ready(list(watch), remaining):
                handler, rank = watch[ready]
                if rank in self.pending:
                    handler(rank)
        return self

    def _problem(self, grace: float) -> None:
        until = time.monotonic() + grace
        self.give_up_at = until if self.give_up_at is None else max(self.give_up_at, until)

    def _on_message(self, rank: int) -> None:
        try:
            tag, case_id, payload = self.pool.conns[rank].recv()
        except (EOFError, OSError):
            self._record_death(rank)
            return
        if case_id != self.case_id:
            return  # a stale reply; cannot happen after a restart, ignored defensively
        self.pending.discard(rank)
        if tag in ("ok", "ready"):
            self.results[rank] = payload
        else:
            self.failures[rank] = payload
            self._problem(self.pool.fail_grace)

    def _on_exit(self, rank: int) -> None:
        conn = self.pool.conns[rank]
        if conn.poll():
            self._on_message(rank)
        if rank in self.pending:
            self._record_death(rank)

    def _record_death(self, rank: int) -> None:
        proc = self.pool.procs[rank]
        proc.join(timeout=1.0)
        self.pending.discard(rank)
        self.died[rank] = proc.exitcode
        # During a case the survivors get the collective timeout to notice the loss by themselves;
        # during start-up they are only waiting for the rendezvous.
        survivors_wait = self.pool.collective_timeout if self.case_id is not None else 0.0
        self._problem(survivors_wait + self.pool.fail_grace)

    def error(self, case: str, timeout: float, error_cls=None) -> MultiRankError:
        """The error describing what went wrong (call only when not :attr:`ok`)."""
        stacks = self.pool.dump_stacks(self.pending)
        timed_out = not (self.failures or self.died)
        if error_cls is None:
            error_cls = MultiRankTimeout if timed_out else MultiRankError
        if timed_out:
            running = ", ".join(str(r) for r in sorted(self.pending))
            headline = (f"multi-rank case {case!r} timed out after {timeout:g} s on {self.pool.world_size} "
                        f"ranks; rank(s) still running: {running}")
        else:
            headline = f"multi-rank case {case!r} failed on {self.pool.world_size} ranks:"
        return error_cls(case, self.pool.world_size, failures=self.failures, died=self.died,
                         still_running=self.pending, stacks=stacks, headline=headline)


# --------------------------------------------------------------------------------------------
# Parent side: the pool
# --------------------------------------------------------------------------------------------
_PRELOAD = ["__main__", "torch", "torch.distributed"]


def _start_context():
    """The multiprocessing context for workers, and whether to tie workers to their parent's life.

    ``forkserver`` (default on Linux) imports torch once in the fork server, so a pool starts (and
    restarts after a failure) without paying the torch import per rank; ``spawn`` elsewhere or when
    ``HYPER_PARALLEL_START_METHOD=spawn``.
    """
    method = os.environ.get(START_METHOD_ENV, "").strip()
    if not method:
        method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
    if method not in ("forkserver", "spawn"):
        raise ValueError(f"{START_METHOD_ENV}={method!r}: expected 'forkserver' or 'spawn'")
    ctx = multiprocessing.get_context(method)
    if method == "forkserver":
        ctx.set_forkserver_preload(_PRELOAD)
        return ctx, True
    return ctx, threading.current_thread() is threading.main_thread()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class WorkerPool:
    """``world_size`` spawned worker processes sharing one gloo process group, reused across cases.

    Use :func:`get_pool` rather than constructing pools directly, so that pools are shared and shut
    down at interpreter exit. :meth:`run` is thread-safe (cases on one pool run one at a time).
    """

    def __init__(self, world_size: int = 2, collective_timeout: Optional[float] = None):
        if world_size < 1:
            raise ValueError(f"world_size must be >= 1, got {world_size}")
        self.world_size = int(world_size)
        self.collective_timeout = float(collective_timeout or default_collective_timeout())
        self.fail_grace = _env_float(FAIL_GRACE_ENV, DEFAULT_FAIL_GRACE)
        self.start_timeout = _env_float(START_TIMEOUT_ENV, DEFAULT_START_TIMEOUT)
        self.procs: list = []
        self.conns: list = []
        self.generation = 0
        self._ready = False
        self._workdir: Optional[str] = None
        self._logs: list = []
        self._case_ids = itertools.count()
        self._lock = threading.RLock()
        _ALL_POOLS.add(self)

    def __repr__(self) -> str:
        state = "ready" if self._ready else ("starting" if self.procs else "stopped")
        return (f"WorkerPool(world_size={self.world_size}, collective_timeout={self.collective_timeout:g}, "
                f"generation={self.generation}, {state})")

    @property
    def pids(self) -> tuple:
        """Process ids of the current workers, by rank (empty when stopped)."""
        return tuple(proc.pid for proc in self.procs)

    # ---- life cycle -------------------------------------------------------------------------
    def start(self) -> None:
        """Spawn the workers without waiting for them (no-op when already started)."""
        with self._lock:
            if self.procs:
                return
            ctx, tie = _start_context()
            port = _free_port()
            self._workdir = tempfile.mkdtemp(prefix="hp-pool-")
            self.generation += 1
            for rank in range(self.world_size):
                parent_end, child_end = ctx.Pipe(duplex=True)
                spec = _WorkerSpec(rank, self.world_size, port, self._workdir, self.collective_timeout, tie)
                proc = ctx.Process(target=_worker_main, name=f"hp-rank{rank}", daemon=True,
                                   args=(spec, child_end))
                proc.start()
                child_end.close()
                self.procs.append(proc)
                self.conns.append(parent_end)
                log = open(os.path.join(self._workdir, f"rank{rank}.log"), "a+b")  # pylint: disable=consider-using-with
                log.seek(0)
                self._logs.append(log)

    def ensure_ready(self) -> None:
        """Start the workers if needed and wait until every rank has initialised its process group."""
        with self._lock:
            if self._ready and all(proc.is_alive() for proc in self.procs):
                return
            if self._ready:
                self.shutdown(graceful=False)  # a worker died between cases
            for attempt in range(_START_ATTEMPTS):
                self.start()
                state = _CaseRun(self, None, self.start_timeout).collect()
                self.drain_output()
                if state.ok:
                    self._ready = True
                    return
                error = state.error(f"pool start-up (world_size={self.world_size})", self.start_timeout,
                                    PoolStartupError)
                self.shutdown(graceful=False)
                if attempt + 1 == _START_ATTEMPTS:
                    raise error

    def shutdown(self, graceful: bool = True) -> None:
        """Stop the workers: ask them to exit (``graceful``), then kill whatever is left."""
        with self._lock:
            if graceful and self._ready:
                self._ask_to_stop()
            for proc in self.procs:
                if proc.is_alive():
                    proc.kill()
                proc.join(timeout=5.0)
            for handle in self.conns + self._logs:
                handle.close()
            if self._workdir:
                shutil.rmtree(self._workdir, ignore_errors=True)
            self.procs, self.conns, self._logs = [], [], []
            self._workdir = None
            self._ready = False

    def restart(self) -> None:
        """Kill the workers and spawn fresh ones (they initialise in the background)."""
        with self._lock:
            self.shutdown(graceful=False)
            self.start()

    def _ask_to_stop(self) -> None:
        for conn in self.conns:
            try:
                conn.send(("stop", None, None))
            except OSError:
                continue  # that worker is already gone; it is killed/reaped below
        deadline = time.monotonic() + 5.0
        for proc in self.procs:
            proc.join(timeout=max(0.0, deadline - time.monotonic()))

    # ---- running cases ------------------------------------------------------------------------
    def run(self, fn: Callable, args: tuple = (), kwargs: Optional[dict] = None, timeout: float = 60.0,
            case: Optional[str] = None) -> list:
        """Call ``fn(*args, **kwargs)`` on every rank; return the per-rank return values.

        ``fn`` must be importable in the workers by module and qualified name; ``args``, ``kwargs``
        and return values must be picklable. ``timeout`` (seconds) bounds the case itself, not the
        pool start-up. Raises :class:`MultiRankError` (or :class:`MultiRankTimeout`) on any failure,
        after which the pool has been recreated.
        """
        __tracebackhide__ = True  # pylint: disable=unused-variable  # pytest: show the ranks' errors only
        ref = _FunctionRef(fn)
        case = case or f"{ref}"
        try:
            payload = pickle.dumps((ref, tuple(args), dict(kwargs or {})))
        except (pickle.PicklingError, TypeError, AttributeError) as err:
            raise TypeError(f"arguments of multi-rank case {case!r} must be picklable: {err}") from err
        with self._lock:
            self.ensure_ready()
            return self._run_payload(payload, case, timeout)

    def _run_payload(self, payload: bytes, case: str, timeout: float) -> list:
        __tracebackhide__ = True  # pylint: disable=unused-variable
        case_id = next(self._case_ids)
        try:
            for conn in self.conns:
                try:
                    conn.send(("run", case_id, payload))
                except OSError:
                    continue  # that rank is dead; its sentinel reports it while collecting
            state = _CaseRun(self, case_id, timeout).collect()
        except BaseException:
            self.shutdown(graceful=False)  # interrupted (Ctrl-C): the workers may be mid-case
            raise
        self.drain_output()
        if state.ok:
            return [state.results[rank] for rank in range(self.world_size)]
        error = state.error(case, timeout)
        self.drain_output()  # what the stuck ranks printed until now
        self.restart()
        raise error

    # ---- diagnostics ---------------------------------------------------------------------------
    def drain_output(self) -> None:
        """Copy what the workers printed since the last call to this process's stdout, per rank."""
        for rank, log in enumerate(self._logs):
            data = log.read()
            if data:
                text = data.decode("utf-8", errors="replace")
                prefixed = "".join(f"[rank {rank}] {line}" for line in text.splitlines(keepends=True))
                sys.stdout.write(prefixed if prefixed.endswith("\n") else prefixed + "\n")
        sys.stdout.flush()

    def dump_stacks(self, ranks) -> dict:
        """Ask the given (still running) ranks for a Python stack dump; return rank -> text."""
        if not ranks or not hasattr(signal, "SIGUSR1") or not self._workdir:
            return {}
        for rank in ranks:
            if self.procs[rank].is_alive():
                os.kill(self.procs[rank].pid, signal.SIGUSR1)
        paths = {rank: os.path.join(self._workdir, f"rank{rank}.stack") for rank in ranks}
        deadline = time.monotonic() + _STACK_DUMP_WAIT
        while time.monotonic() < deadline and not all(_has_content(p) for p in paths.values()):
            time.sleep(0.02)
        time.sleep(0.05)  # let a dump in progress finish
        return {rank: _trim_stack(_read_text(path)) for rank, path in paths.items()}


def _has_content(path: str) -> bool:
    try:
        return os.path.getsize(path) > 0
    except OSError:
        return False


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError as err:
        return f"(stack dump unavailable: {err})"


# --------------------------------------------------------------------------------------------
# Pool registry
# --------------------------------------------------------------------------------------------
_POOLS: "collections.OrderedDict[tuple, WorkerPool]" = collections.OrderedDict()
_POOLS_LOCK = threading.Lock()
_ALL_POOLS: "weakref.WeakSet[WorkerPool]" = weakref.WeakSet()  # shared or not, all are stopped at exit


def get_pool(world_size: int = 2, collective_timeout: Optional[float] = None) -> WorkerPool:
    """The shared pool for ``(world_size, collective_timeout)``, created on first use.

    ``collective_timeout`` defaults to ``$HYPER_PARALLEL_COLLECTIVE_TIMEOUT`` (30 s). At most
    ``$HYPER_PARALLEL_MAX_POOLS`` (2) pools stay alive; the least recently used one is shut down.
    """
    key = (int(world_size), float(collective_timeout or default_collective_timeout()))
    evicted = []
    with _POOLS_LOCK:
        pool = _POOLS.get(key)
        if pool is None:
            pool = _POOLS[key] = WorkerPool(*key)
        _POOLS.move_to_end(key)
        max_pools = int(_env_float(MAX_POOLS_ENV, DEFAULT_MAX_POOLS))
        while len(_POOLS) > max_pools:
            evicted.append(_POOLS.popitem(last=False)[1])
    for old in evicted:
        old.shutdown()
    return pool


def shutdown_pools() -> None:
    """Shut down every pool of this process (registered with :mod:`atexit`; safe to call repeatedly)."""
    with _POOLS_LOCK:
        _POOLS.clear()
        pools = list(_ALL_POOLS)
    for pool in pools:
        pool.shutdown()


atexit.register(shutdown_pools)


# --------------------------------------------------------------------------------------------
# Public entry points
# --------------------------------------------------------------------------------------------
def _case_name(ref: _FunctionRef, kwargs: dict) -> str:
    current = os.environ.get("PYTEST_CURRENT_TEST")
    if current:
        return current.rsplit(" (", 1)[0]
    params = ", ".join(f"{key}={value!r}" for key, value in kwargs.items())
    return f"{ref}({params[:200]})"


def multi_rank(world_size: Any = 2, timeout: float = 60.0, collective_timeout: Optional[float] = None):
    """Decorate a pytest test so that its body runs on ``world_size`` gloo ranks.

    The decorated test keeps its signature (parametrize arguments and fixtures are passed through
    as keyword arguments and must be picklable). The body runs in a shared :class:`WorkerPool`
    with the default process group initialised, ``torch.set_num_threads(1)`` and
    ``HYPER_PARALLEL_BACKEND=torch``. ``timeout`` bounds one case; ``collective_timeout`` sets the
    process-group timeout (pools are keyed by it). Returns rank 0's return value.
    Usable bare (``@multi_rank``) or called (``@multi_rank(world_size=4)``).
    """
    if callable(world_size):
        return multi_rank()(world_size)

    def decorate(fn: Callable) -> Callable:
        ref = _FunctionRef(fn)

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            __tracebackhide__ = True  # pylint: disable=unused-variable
            if ref.is_method:
                args = args[1:]  # the test-class instance; the worker makes its own
            pool = get_pool(world_size, collective_timeout)
            return pool.run(ref, args, kwargs, timeout=timeout, case=_case_name(ref, kwargs))[0]

        setattr(wrapper, _ORIGINAL_ATTR, fn)
        return wrapper

    return decorate


def run_on_ranks(fn: Callable, world_size: int = 2, args: tuple = (), kwargs: Optional[dict] = None,
                 timeout: float = 60.0, *, collective_timeout: Optional[float] = None) -> Any:
    """Run module-level ``fn(*args, **kwargs)`` on ``world_size`` ranks of a shared pool.

    For benchmarks and examples. Returns rank 0's return value; raises :class:`MultiRankError`
    on failure (with every failing rank's traceback).
    """
    __tracebackhide__ = True  # pylint: disable=unused-variable
    pool = get_pool(world_size, collective_timeout)
    return pool.run(fn, args, kwargs, timeout=timeout)[0]
