# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Names and rules of the gate protocol."""
from __future__ import annotations

import re

LABEL_CHECK = "pr-check-pass"
LABEL_PIPELINE = "ci-pipeline-passed"
CMD_CHECK = "/check-pr"
CMD_RETEST = "/retest"
SUCCESS_RESULTS = ("SUCCESS",)
FAILURE_RESULTS = ("FAILURE", "UNSTABLE")
NOT_EXECUTED = ("NOT_EXECUTED", "SKIPPED", "NOT_BUILT", "not-run")
CHECK_FAILED_RE = re.compile(r"(?i)(pr[-_ ]?check|check-pr|description).*(fail|不通过|未通过|不合规|reject)")


def is_green(labels: list[str], real_success: bool) -> bool:
    """Green only after a real (non-bypass) successful build *and* both gate labels are present."""
    return real_success and LABEL_CHECK in labels and LABEL_PIPELINE in labels
