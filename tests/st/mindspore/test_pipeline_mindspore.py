# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ST: the pipeline runtime on MindSpore ``nn.Cell`` stages, 2 CPU ranks, ONE cluster launch
(``tests/st/mindspore/pipeline_checks.py``): GPipe and 1F1B against one process, and errors."""
import pytest

from hyper_parallel.testing.mindspore_launch import MindSporeLaunchError, launch

NAMES = ["GPipe m=3", "1F1B m=3", "errors"]
_RESULT = {}


def _run():
    if "r" not in _RESULT:
        try:
            _RESULT["r"] = launch("tests.st.mindspore.pipeline_checks:run_pipeline_suite", world_size=2, timeout=240)
        except MindSporeLaunchError as exc:
            _RESULT["r"] = exc
    if isinstance(_RESULT["r"], MindSporeLaunchError):
        raise AssertionError(f"the MindSpore pipeline launch failed:\n{_RESULT['r']}")
    return _RESULT["r"]


@pytest.mark.parametrize("name", NAMES)
def test_mindspore_pipeline(name):
    per_rank = _run()
    assert len(per_rank) == 2
    for rank, res in enumerate(per_rank):
        assert res["results"].get(name) == "ok", f"rank {rank}: {name}: {res['results'].get(name)}"
    assert set(per_rank[0]["results"]) == set(NAMES)
