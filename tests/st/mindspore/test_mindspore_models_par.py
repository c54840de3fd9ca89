# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ST: the MindSpore trainer (``LLMTrainer``, what ``hp-train --job.backend mindspore`` runs) with the models beyond
Llama 3 under the parallelisms their MindSpore plans now take, in ONE launch of 2 CPU ranks (mccl): Qwen3 TP + SP +
loss parallel (QK-norm heads, tied vocabulary-parallel embedding and head, vocabulary-parallel cross-entropy), Qwen3 PP 1F1B (the tied weight on both stages, its
gradient summed over the pp group), Qwen3-MoE EP 2 x FSDP 2 (dropless token all-to-all) and DeepSeek-V3 TP + SP
(MLA entries, the shared RoPE key's gradient, MoE blocks on the sequence shards), each 2 steps against the same
model and config on one process (every step's loss, the held-out loss, every final parameter). The other cases of
``tests/st/mindspore/model_par_checks.py`` (Qwen3 TP + SP alone / CP, Qwen3-MoE TP / CP / PP, DeepSeek-V3 EP / PP)
run in ``make matrix-mindspore`` (the composition matrix's ``*_mindspore`` rows) and ``run_all``."""
import pytest

from tests.st.mindspore.common import LaunchOnce
from tests.st.mindspore.model_par_checks import GATE_CASES, warm_data_cache

LAUNCH_TIMEOUT_S = 600
LAUNCH = LaunchOnce("tests.st.mindspore.model_par_checks:run_gate", timeout=LAUNCH_TIMEOUT_S, before=warm_data_cache)


@pytest.mark.parametrize("name", GATE_CASES)
def test_mindspore_model_parallelism_against_one_process(name):
    LAUNCH.check(name)
