# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""System tests of the multi-rank harness (``hyper_parallel.testing``) on real gloo process groups.

The fault cases call the pool API directly and assert on the error it raises, so that a correct
harness yields passing tests. The ``_case_*`` functions run inside worker processes.
"""
import importlib.util
import inspect
import os
import signal
import subprocess
import sys
import time

import pytest

from hyper_parallel.testing import (
    COLLECTIVE_TIMEOUT_ENV,
    MultiRankError,
    MultiRankTimeout,
    default_collective_timeout,
    get_pool,
    multi_rank,
    run_on_ranks,
)

# A small process-group timeout for the fault cases (the default is 30 s), and a per-case timeout
# below the default collective timeout, so that a collective timeout that was not applied shows up
# as a harness timeout instead of the expected error.
SHORT_COLLECTIVE_TIMEOUT = 3.0
FAULT_CASE_TIMEOUT = 20.0
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _rank_tensor(rank, shape):
    import torch  # pylint: disable=import-outside-toplevel
    gen = torch.Generator().manual_seed(1000 + rank)
    return torch.randn(shape, generator=gen, dtype=torch.float64)


# ----------------------------------------------------------------------------------------------
# Bodies run through the decorator
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(5,), (3, 4), (2, 0, 3)])
@multi_rank(world_size=2, timeout=30)
def test_all_reduce_matches_single_process_sum(shape):
    """all_reduce(SUM) on 2 ranks equals the sum of every rank's input computed on one process."""
    import torch  # pylint: disable=import-outside-toplevel
    import torch.distributed as dist  # pylint: disable=import-outside-toplevel
    rank, world = dist.get_rank(), dist.get_world_size()
    got = _rank_tensor(rank, shape)
    dist.all_reduce(got)
    expected = sum(_rank_tensor(r, shape) for r in range(world))
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)
    assert got.shape == torch.Size(shape)


@pytest.mark.parametrize("n,scale", [(1, 2.0), (4, -1.5), (7, 0.25)])
@multi_rank(world_size=2)
def test_parametrized_case_runs_with_its_params(n, scale):
    """Each rank receives the parametrize arguments; all ranks agree on them."""
    import torch  # pylint: disable=import-outside-toplevel
    import torch.distributed as dist  # pylint: disable=import-outside-toplevel
    t = torch.arange(n, dtype=torch.float64) * scale * (dist.get_rank() + 1)
    dist.all_reduce(t)
    torch.testing.assert_close(t, torch.arange(n, dtype=torch.float64) * scale * 3)
    seen = [None, None]
    dist.all_gather_object(seen, (n, scale))
    assert seen == [(n, scale), (n, scale)]


@multi_rank
def test_worker_environment():
    """Workers run gloo with the torch backend selected and one intra-op thread."""
    import torch  # pylint: disable=import-outside-toplevel
    import torch.distributed as dist  # pylint: disable=import-outside-toplevel
    assert os.environ["HYPER_PARALLEL_BACKEND"] == "torch"
    assert dist.is_initialized() and dist.get_backend() == "gloo"
    assert dist.get_world_size() == 2
    assert os.environ["RANK"] == str(dist.get_rank())
    assert torch.get_num_threads() == 1


@multi_rank(world_size=4, timeout=60)
def test_four_ranks_gather_their_ranks():
    """A 4-rank pool runs; every rank sees all ranks in order."""
    import torch.distributed as dist  # pylint: disable=import-outside-toplevel
    seen = [None] * 4
    dist.all_gather_object(seen, dist.get_rank())
    assert seen == [0, 1, 2, 3]


class TestMethodBodies:
    """Test-class methods can be decorated too (the worker builds its own instance)."""

    factor = 5

    @pytest.mark.parametrize("value", [1, 3])
    @multi_rank(world_size=2)
    def test_method_sees_class_and_param(self, value):
        """The method body runs on both ranks with ``self`` bound to a fresh instance."""
        import torch  # pylint: disable=import-outside-toplevel
        import torch.distributed as dist  # pylint: disable=import-outside-toplevel
        t = torch.tensor([float(value * self.factor)])
        dist.all_reduce(t)
        assert t.item() == 2 * value * self.factor


# ----------------------------------------------------------------------------------------------
# Bodies run through the pool API (functions at module level so that workers can import them)
# ----------------------------------------------------------------------------------------------
def _case_rank_and_world():
    import torch.distributed as dist  # pylint: disable=import-outside-toplevel
    return dist.get_rank(), dist.get_world_size()


def _case_noop():
    return None


def _case_rank_sum():
    import torch  # pylint: disable=import-outside-toplevel
    import torch.distributed as dist  # pylint: disable=import-outside-toplevel
    t = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(t)
    return t.item()


def _case_print(tag):
    import torch.distributed as dist  # pylint: disable=import-outside-toplevel
    print(f"hello {tag} from {dist.get_rank()}")


def _case_raise_on_rank_1():
    import torch.distributed as dist  # pylint: disable=import-outside-toplevel
    if dist.get_rank() == 1:
        raise ValueError("deliberate failure on rank 1")
    dist.barrier()  # rank 0 blocks here: the harness must not wait for the collective timeout


def _case_raise_on_every_rank():
    import torch.distributed as dist  # pylint: disable=import-outside-toplevel
    raise KeyError(f"deliberate failure on rank {dist.get_rank()}")


def _case_sleep_on_rank_1():
    import torch.distributed as dist  # pylint: disable=import-outside-toplevel
    if dist.get_rank() == 1:
        time.sleep(3600)


def _case_exit_on_rank_1_during_all_reduce():
    import torch  # pylint: disable=import-outside-toplevel
    import torch.distributed as dist  # pylint: disable=import-outside-toplevel
    if dist.get_rank() == 1:
        time.sleep(0.5)  # let rank 0 enter the all_reduce first
        os._exit(3)
    started = time.monotonic()
    try:
        dist.all_reduce(torch.ones(4))
    finally:
        print(f"rank 0 left all_reduce after {time.monotonic() - started:.2f} s")


def _case_rank_1_skips_all_reduce():
    import torch  # pylint: disable=import-outside-toplevel
    import torch.distributed as dist  # pylint: disable=import-outside-toplevel
    if dist.get_rank() == 0:
        dist.all_reduce(torch.ones(4))


def _case_assert_on_rank_1():
    import torch.distributed as dist  # pylint: disable=import-outside-toplevel
    value = dist.get_rank() * 10
    if dist.get_rank() == 1:
        assert value == 11


def _grandchild(code):
    sys.exit(code)


def _case_start_own_process():
    import multiprocessing  # pylint: disable=import-outside-toplevel
    import torch.distributed as dist  # pylint: disable=import-outside-toplevel
    child = multiprocessing.get_context("spawn").Process(target=_grandchild, args=(40 + dist.get_rank(),))
    child.start()
    child.join(timeout=120)
    return child.exitcode


def _case_change_process_state():
    import torch  # pylint: disable=import-outside-toplevel
    os.environ["HP_HARNESS_LEAK"] = "1"
    torch.set_default_dtype(torch.float64)
    torch.set_grad_enabled(False)


def _case_read_process_state():
    import torch  # pylint: disable=import-outside-toplevel
    return os.environ.get("HP_HARNESS_LEAK"), torch.get_default_dtype(), torch.is_grad_enabled()


def _case_returns_unpicklable():
    return lambda: None


@multi_rank(world_size=2, timeout=FAULT_CASE_TIMEOUT)
def _decorated_fails_on_rank_1(label, *, factor=1):
    import torch.distributed as dist  # pylint: disable=import-outside-toplevel
    if dist.get_rank() == 1 and label != "ok":
        raise RuntimeError(f"decorated failure {label} x{factor}")
    return label * factor


def test_decorator_keeps_signature_and_names_the_pytest_case():
    """The wrapper exposes the original signature; its errors name the running pytest node id."""
    original = _decorated_fails_on_rank_1.__wrapped__
    assert inspect.signature(_decorated_fails_on_rank_1) == inspect.signature(original)
    assert _decorated_fails_on_rank_1.__name__ == "_decorated_fails_on_rank_1"
    with pytest.raises(MultiRankError) as info:
        _decorated_fails_on_rank_1("abc", factor=2)
    text = str(info.value)
    assert "test_harness.py::test_decorator_keeps_signature_and_names_the_pytest_case" in text
    assert "RuntimeError: decorated failure abc x2" in info.value.failures[1]


def test_collective_timeout_setting(monkeypatch):
    """The process-group timeout comes from the environment, defaults to 30 s and rejects junk."""
    monkeypatch.delenv(COLLECTIVE_TIMEOUT_ENV, raising=False)
    assert default_collective_timeout() == 30.0
    monkeypatch.setenv(COLLECTIVE_TIMEOUT_ENV, "7.5")
    assert default_collective_timeout() == 7.5
    assert get_pool.__module__ == "hyper_parallel.testing.multiprocess"
    for bad in ("soon", "0", "-1"):
        monkeypatch.setenv(COLLECTIVE_TIMEOUT_ENV, bad)
        with pytest.raises(ValueError, match=COLLECTIVE_TIMEOUT_ENV):
            default_collective_timeout()


def test_pool_returns_every_rank_value_and_run_on_ranks_rank0():
    """``WorkerPool.run`` returns per-rank values; ``run_on_ranks`` returns rank 0's."""
    assert get_pool(2).run(_case_rank_and_world) == [(0, 2), (1, 2)]
    assert run_on_ranks(_case_rank_and_world, world_size=2) == (0, 2)
    assert run_on_ranks(_case_rank_sum) == 3.0
    assert run_on_ranks(_decorated_fails_on_rank_1, args=("ok",), kwargs={"factor": 3}) == "okokok"


def test_rank_can_start_its_own_process():
    """A case may start processes (a DataLoader with workers, say): workers are not daemonic inside."""
    assert get_pool(2).run(_case_start_own_process, timeout=150) == [40, 41]


def test_cases_do_not_leak_process_state():
    """Environment, default dtype and grad mode changed by one case are restored for the next."""
    import torch  # pylint: disable=import-outside-toplevel
    pool = get_pool(2)
    pool.run(_case_change_process_state)
    assert pool.run(_case_read_process_state) == [(None, torch.float32, True)] * 2


def test_worker_output_reaches_pytest_capture(capsys):
    """What a rank prints is copied to the parent's stdout, labelled by rank, after the case."""
    get_pool(2).run(_case_print, args=("capture-check",))
    out = capsys.readouterr().out
    assert "[rank 0] hello capture-check from 0" in out
    assert "[rank 1] hello capture-check from 1" in out


def test_failing_rank_traceback_is_in_the_error():
    """A rank that raises: the error carries its labelled traceback; the blocked peer is dumped."""
    pool = get_pool(2)
    before = pool.pids
    with pytest.raises(MultiRankError) as info:
        pool.run(_case_raise_on_rank_1, case="deliberate-failure", timeout=FAULT_CASE_TIMEOUT)
    err, text = info.value, str(info.value)
    assert not isinstance(err, MultiRankTimeout)
    assert "'deliberate-failure'" in text
    assert list(err.failures) == [1]
    assert "rank 1 traceback" in text and "rank 0 traceback" not in text
    assert "Traceback (most recent call last)" in err.failures[1]
    assert "_case_raise_on_rank_1" in err.failures[1]
    assert "rank 1 raised: ValueError: deliberate failure on rank 1" in text
    assert err.still_running == (0,)
    assert "barrier" in err.stacks[0]
    assert pool.pids != before  # torn down and recreated
    assert pool.run(_case_rank_sum) == [3.0, 3.0]


def test_failing_assert_is_explained_like_pytest():
    """Test modules are loaded with pytest's assertion rewriting, so a failed assert shows its values."""
    with pytest.raises(MultiRankError) as info:
        get_pool(2).run(_case_assert_on_rank_1, timeout=FAULT_CASE_TIMEOUT)
    assert list(info.value.failures) == [1]
    assert "AssertionError: assert 10 == 11" in info.value.failures[1]
    assert "rank 1 raised: AssertionError: assert 10 == 11" in str(info.value)


def test_every_failing_rank_is_labelled():
    """When several ranks raise, each traceback appears under its own rank label."""
    pool = get_pool(2)
    with pytest.raises(MultiRankError) as info:
        pool.run(_case_raise_on_every_rank, case="all-fail", timeout=FAULT_CASE_TIMEOUT)
    text = str(info.value)
    assert list(info.value.failures) == [0, 1]
    for rank in (0, 1):
        assert f"rank {rank} traceback" in text
        assert f"KeyError: 'deliberate failure on rank {rank}'" in info.value.failures[rank]
    assert pool.run(_case_noop) == [None, None]


def test_hang_is_reported_naming_case_and_rank_then_next_case_passes():
    """Rank 1 sleeping past a 2 s case timeout: a timeout naming the case and rank 1; pool recreated."""
    pool = get_pool(2)
    before = pool.pids
    with pytest.raises(MultiRankTimeout) as info:
        pool.run(_case_sleep_on_rank_1, case="hang-case", timeout=2.0)
    err, text = info.value, str(info.value)
    assert "'hang-case' timed out" in text
    assert "rank(s) still running: 1" in text
    assert err.still_running == (1,)
    assert not err.failures and not err.died
    assert "_case_sleep_on_rank_1" in err.stacks[1]
    assert "_run_case" not in err.stacks[1]  # the harness's own frames are trimmed
    assert pool.pids != before
    assert pool.run(_case_rank_sum, timeout=30) == [3.0, 3.0]


def test_rank_death_is_reported_and_survivor_errors_within_collective_timeout():
    """Rank 1 exits while rank 0 is in all_reduce: rank 0 fails by itself; the report names the death."""
    pool = get_pool(2, collective_timeout=SHORT_COLLECTIVE_TIMEOUT)
    before = pool.pids
    with pytest.raises(MultiRankError) as info:
        pool.run(_case_exit_on_rank_1_during_all_reduce, case="rank-death", timeout=FAULT_CASE_TIMEOUT)
    err, text = info.value, str(info.value)
    print(text)
    assert not isinstance(err, MultiRankTimeout)
    assert "rank 1 died (exit code 3)" in text
    assert err.died == {1: 3}
    # Rank 0 raised by itself (it was not still running when the harness gave up, which it does
    # after the collective timeout plus the grace period).
    assert err.still_running == ()
    assert list(err.failures) == [0]
    assert "all_reduce" in err.failures[0]
    assert pool.pids != before
    assert pool.run(_case_rank_sum, timeout=30) == [3.0, 3.0]


def test_collective_timeout_is_applied_to_the_process_group():
    """Rank 0 alone in an all_reduce fails with gloo's timeout (3 s), before the 20 s case timeout."""
    pool = get_pool(2, collective_timeout=SHORT_COLLECTIVE_TIMEOUT)
    with pytest.raises(MultiRankError) as info:
        pool.run(_case_rank_1_skips_all_reduce, case="collective-timeout", timeout=FAULT_CASE_TIMEOUT)
    err = info.value
    assert not isinstance(err, MultiRankTimeout)
    assert list(err.failures) == [0] and not err.died and err.still_running == ()
    assert "timed out" in err.failures[0].lower() or "timeout" in err.failures[0].lower()
    assert pool.run(_case_noop) == [None, None]


def test_worker_killed_between_cases_is_replaced():
    """A worker that disappears between cases is noticed and the pool restarted before the next case."""
    pool = get_pool(2)
    pool.ensure_ready()
    victim = pool.procs[1]
    victim.kill()
    victim.join(timeout=10)
    assert pool.run(_case_rank_and_world) == [(0, 2), (1, 2)]
    assert victim.pid not in pool.pids


def test_bad_inputs_are_rejected_clearly():
    """Nested functions, unpicklable arguments and unpicklable results give clear errors."""
    def nested():
        return None

    pool = get_pool(2)
    with pytest.raises(ValueError, match="module level"):
        pool.run(nested)
    with pytest.raises(TypeError, match="must be picklable"):
        pool.run(_case_print, args=(lambda: None,))
    with pytest.raises(MultiRankError, match="could not be pickled"):
        pool.run(_case_returns_unpicklable, timeout=FAULT_CASE_TIMEOUT)
    assert pool.run(_case_noop) == [None, None]


def test_importing_the_harness_does_not_import_torch():
    """``import hyper_parallel.testing`` stays cheap: torch is imported only in the workers."""
    code = (
        "import sys\n"
        "import hyper_parallel.testing\n"
        "assert callable(hyper_parallel.testing.multi_rank)\n"
        "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                         cwd=_ROOT).stdout
    assert out.strip() == "[]"
    assert importlib.util.find_spec("torch") is not None  # the probe is meaningful: torch is installed


def test_empty_case_overhead_is_measured():
    """Measure (print, not assert) the cost of an empty case on 2 ranks of a warm pool."""
    pool = get_pool(2)
    pool.run(_case_noop)
    cases = 50
    started = time.perf_counter()
    results = [pool.run(_case_noop) for _ in range(cases)]
    per_case_ms = (time.perf_counter() - started) / cases * 1e3
    print(f"\nmulti-rank harness: empty case on 2 ranks costs {per_case_ms:.3f} ms ({cases} cases)")
    assert results == [[None, None]] * cases


# A script in the style of a benchmark: the function it runs on the ranks lives in ``__main__``.
_SCRIPT = """
import sys, time
from hyper_parallel.testing import get_pool


def rank_sum():
    import torch, torch.distributed as dist
    t = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(t)
    return t.item()


if __name__ == "__main__":
    print("main block runs", flush=True)
    pool = get_pool(2)
    print("result", pool.run(rank_sum), flush=True)
    print("pids", *pool.pids, flush=True)
    if sys.argv[1] == "wait":
        time.sleep(600)
"""


def _process_alive(pid):
    """True while ``pid`` runs (a zombie waiting for a reaper counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _wait_gone(pids, limit=60.0):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and any(_process_alive(pid) for pid in pids):
        time.sleep(0.1)
    return [pid for pid in pids if _process_alive(pid)]


def _start_script(tmp_path, mode, method):
    script = tmp_path / "bench_like.py"
    script.write_text(_SCRIPT, encoding="utf-8")
    env = dict(os.environ, HYPER_PARALLEL_START_METHOD=method, PYTHONPATH=_ROOT)
    return subprocess.Popen([sys.executable, str(script), mode], cwd=str(tmp_path), env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _pids_from(line):
    assert line.startswith("pids "), line
    return [int(pid) for pid in line.split()[1:]]


@pytest.mark.parametrize("method", ["forkserver", "spawn"])
def test_script_main_function_runs_and_no_worker_outlives_exit(tmp_path, method):
    """A script's ``__main__`` function runs on the ranks; at exit no worker is left behind."""
    proc = _start_script(tmp_path, "exit", method)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    lines = out.splitlines()
    assert lines.count("main block runs") == 1, out  # the workers did not re-run the main block
    assert "result [3.0, 3.0]" in lines, out
    pids = _pids_from([line for line in lines if line.startswith("pids ")][0])
    assert len(pids) == 2
    assert [pid for pid in pids if _process_alive(pid)] == []


def test_no_worker_outlives_a_killed_test_process(tmp_path):
    """SIGKILL of the process that owns the pool: the workers follow it (no orphans)."""
    proc = _start_script(tmp_path, "wait", "forkserver")
    try:
        lines = [proc.stdout.readline().strip() for _ in range(3)]
        pids = _pids_from(lines[2])
        assert len(pids) == 2 and all(_process_alive(pid) for pid in pids)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
    assert _wait_gone(pids) == []
