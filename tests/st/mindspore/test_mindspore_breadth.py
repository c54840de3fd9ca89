# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ST: context parallel and pipeline parallel on MindSpore, against one process, in ONE launch of 2 CPU ranks
(mccl): the ring / all-gather / Ulysses CP attention under head-tail and contiguous layouts (forward and the
q/k/v gradients), shard/unshard and in-place buffers, the MindSpore Llama with CP (logits, loss, weight
gradients); then the MindSpore trainer (``LLMTrainer``, what ``hp-train --job.backend mindspore`` runs) with
PP 1F1B + gradient accumulation, PP Interleaved1F1B, CP ring and ``training.compile`` (the whole step's forward
and backward under ``mindspore.jit``; on one process, with ``dp_replicate`` + gradient accumulation, and with FSDP
+ gradient accumulation: ``CompiledFSDPStep``'s graph over an unsharded twin) and ``[activation]`` (selective-op x
replicate, full x TP, full x compile x replicate, every-k x PP 1F1B with ``pp_recompute_ahead``; the cells set to
recompute and the stages' ahead counts are checked), each
2 steps against the same config on one process in PyNative (losses and final parameters). The other trainer cases (GPipe, the other CP methods, PP x FSDP on 4
ranks) run in ``make matrix-mindspore`` (the composition matrix's MindSpore column)."""
import pytest

from tests.st.mindspore.common import LaunchOnce
from tests.st.mindspore.cp_checks import CP_CHECKS
from tests.st.mindspore.trainer_par_checks import GATE_CASES, warm_data_cache

LAUNCH_TIMEOUT_S = 480
LAUNCH = LaunchOnce("tests.st.mindspore.trainer_par_checks:run_gate", timeout=LAUNCH_TIMEOUT_S, before=warm_data_cache)


@pytest.mark.parametrize("name", [*CP_CHECKS, *GATE_CASES])
def test_mindspore_cp_and_pp_against_one_process(name):
    LAUNCH.check(name)
