# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ST: tensor parallel under ``mindspore.jit`` (``training.compile`` with ``tp = 2`` on MindSpore), ONE launch of 2
CPU ranks (mccl): Megatron's f / g with graph collectives, the local twin of Llama 3 / Qwen3 under the TP plan
(sequence parallel, loss parallel, an uneven sequence) and the trainer's compiled TP step, each against one process
(see ``tests/st/mindspore/tp_jit_checks.py``)."""
import pytest

from tests.st.mindspore.common import LaunchOnce
from tests.st.mindspore.tp_jit_checks import TRAINER_CASES, TWIN_CHECKS
from tests.st.mindspore.trainer_par_checks import warm_data_cache

LAUNCH_TIMEOUT_S = 600
LAUNCH = LaunchOnce("tests.st.mindspore.tp_jit_checks:run", timeout=LAUNCH_TIMEOUT_S, before=warm_data_cache)


@pytest.mark.parametrize("name", [*TWIN_CHECKS, *TRAINER_CASES])
def test_compiled_tensor_parallel_against_one_process(name):
    LAUNCH.check(name)
