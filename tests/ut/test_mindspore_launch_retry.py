# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``hyper_parallel.testing.mindspore_launch``: a cluster that never formed is started once more; any other
failure is reported at once."""
import json
from types import SimpleNamespace

import pytest

from hyper_parallel.testing import mindspore_launch as ml

_INIT_TRACE = ('Traceback (most recent call last):\n  File "management.py", line 210, in init\n    init_cluster()\n'
               'RuntimeError: The state of the cluster is error, total nodes num: 2, abnormal nodes num: 2\n')


def _outcome(tmp_path, trace):
    (tmp_path / "rank0.json").write_text(json.dumps({"rank": 0, "ok": False, "traceback": trace}))
    (tmp_path / "rank1.log").write_text("killed\n")
    (tmp_path / "rank0.log").write_text("")
    workers = [SimpleNamespace(returncode=1), SimpleNamespace(returncode=-15)]
    return tmp_path, workers, [tmp_path / "rank0.log", tmp_path / "rank1.log"]


def test_cluster_start_failure_is_classified(tmp_path):
    out, workers, logs = _outcome(tmp_path, _INIT_TRACE)
    with pytest.raises(ml.ClusterStartError, match="rank 1 exited with code -15"):
        ml._collect(out, workers, logs, "m:f")  # pylint: disable=protected-access


def test_other_failures_are_not_retried_kinds(tmp_path):
    out, workers, logs = _outcome(tmp_path, "Traceback ...\nAssertionError: loss differs\n")
    with pytest.raises(ml.MindSporeLaunchError) as info:
        ml._collect(out, workers, logs, "m:f")  # pylint: disable=protected-access
    assert not isinstance(info.value, ml.ClusterStartError)


def test_launch_starts_once_more_only_after_a_cluster_start_failure(monkeypatch, capsys):
    calls = []

    def flaky(target, world_size, timeout, extra):
        calls.append(target)
        if len(calls) == 1:
            raise ml.ClusterStartError("MindSpore launch of m:f failed:\nrank 0 raised: ...")
        return ["r0", "r1"]

    monkeypatch.setattr(ml, "_launch_env", flaky)
    assert ml.launch("m:f", world_size=2) == ["r0", "r1"] and len(calls) == 2
    assert "starting the launch once more" in capsys.readouterr().err

    def broken(target, world_size, timeout, extra):
        calls.append(target)
        raise ml.MindSporeLaunchError("MindSpore launch of m:f failed: assertion")

    calls.clear()
    monkeypatch.setattr(ml, "_launch_env", broken)
    with pytest.raises(ml.MindSporeLaunchError, match="assertion"):
        ml.launch("m:f", world_size=2)
    assert len(calls) == 1


def test_a_rank_ended_without_a_result_shows_its_stacks(tmp_path):
    """A worker arms faulthandler: SIGTERM writes its Python stacks (then the signal ends it), and the
    launcher's report of a rank without a result carries them."""
    import signal
    import subprocess
    import sys
    code = ("import os, signal, sys\nfrom pathlib import Path\n"
            "from hyper_parallel.testing import mindspore_launch as ml\n"
            "def waiting_in_a_collective():\n    ml._stacks_on_timeout(Path(sys.argv[1]))\n"
            "    os.kill(os.getpid(), signal.SIGTERM)\n"
            "waiting_in_a_collective()\n")
    env = {**__import__("os").environ, "MS_NODE_ID": "1"}
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], env=env, capture_output=True, timeout=60,
                          check=False)
    assert proc.returncode == -signal.SIGTERM
    (tmp_path / "rank0.json").write_text(json.dumps({"rank": 0, "ok": True, "result": 1}))
    for r in (0, 1):
        (tmp_path / f"rank{r}.log").write_text("step 2/2\n")
    workers = [SimpleNamespace(returncode=0), SimpleNamespace(returncode=proc.returncode)]
    with pytest.raises(ml.MindSporeLaunchError) as info:
        ml._collect(tmp_path, workers, [tmp_path / "rank0.log", tmp_path / "rank1.log"], "m:f")  # pylint: disable=W0212
    text = str(info.value)
    assert "rank 1 exited with code -15 without a result" in text
    assert "rank 1 Python stacks when it was ended" in text and "waiting_in_a_collective" in text
    assert "rank 0 Python stacks" not in text


def test_a_finished_rank_waits_for_its_peers_results(tmp_path, monkeypatch):
    """``_await_peers`` returns only once every rank of the launch has written its result."""
    import threading
    import time
    monkeypatch.setenv("MS_WORKER_NUM", "2")
    (tmp_path / "rank0.json").write_text("{}")
    done = threading.Event()
    waiter = threading.Thread(target=lambda: (ml._await_peers(tmp_path, poll_s=0.01), done.set()))  # pylint: disable=W0212
    waiter.start()
    time.sleep(0.3)
    assert not done.is_set()  # rank 1 has no result yet
    (tmp_path / "rank1.json").write_text("{}")
    waiter.join(timeout=10)
    assert done.is_set()
