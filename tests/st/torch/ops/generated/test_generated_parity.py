# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ST parity on 2 gloo ranks of the ops added by ``hp-agent dist-op dev``: the cases of their plans.

One case file per op under ``cases/`` (written from the confirmed plan; change the plan and re-run dev);
this module is the same for every op. For every case, ``check_op`` runs the op on DTensors for every
placement combination (R, S(d), P(sum)) forward and backward against one process; no combination may
fail or be refused, and at least ``native_min`` must run without communication (``check_parity_cases``).
"""
from pathlib import Path

import pytest

from hyper_parallel.testing import multi_rank
from hyper_parallel.testing.op_cases import load_op_cases

CASES = {c.op: c for c in load_op_cases(Path(__file__).parent / "cases", "st")}


@pytest.mark.parametrize("op", sorted(CASES))
@multi_rank(world_size=2, timeout=120)
def test_plan_parity(op):
    from hyper_parallel.testing.op_cases import check_parity_cases
    assert check_parity_cases(CASES[op]) > 0
