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
