# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT of the ops added by ``hp-agent dist-op dev``: each registered rule against its plan's scenarios.

One case file per op under ``cases/`` (written from the confirmed plan; change the plan and re-run dev);
this module is the same for every op. Each accepted scenario is checked with the layout argument by
keyword and by position, each rejected call must raise a ``RuleError`` (``check_rule_cases``).
"""
from pathlib import Path

import pytest

from hyper_parallel.testing.op_cases import check_rule_cases, load_op_cases

CASES = load_op_cases(Path(__file__).parent / "cases", "ut")


@pytest.mark.parametrize("cases", CASES, ids=[c.op for c in CASES])
def test_plan_cases(cases):
    assert check_rule_cases(cases) >= len(cases.data["accepted"]) * 2 * len(cases.names) > 0
