# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""A scripted GitCode/MindSpore gate on top of :class:`FakeForge`.

``/check-pr`` adds ``pr-check-pass`` after ``check_delay`` seconds.  ``/retest`` without that label starts
a 17-second fake-green bypass build (no stage executed); with it, the next scripted outcome runs as a
real pipeline for ``build_time`` seconds, and a success adds ``ci-pipeline-passed`` ``label_lag`` seconds
later.
"""
from __future__ import annotations

from .server import FakeForge, Scenario

STAGES = ("Checkout", "Codespell", "Pylint", "Lizard", "UT", "ST")
PYLINT_LOG = ("************* Module hyper_parallel.core.mesh\n"
              "hyper_parallel/core/mesh.py:7:0: [C0301(line-too-long), Mesh.build] Line too long (131/120)\n"
              "ERROR: script returned exit code 16\n")


def pytest_log(node: str) -> str:
    """A failing pytest stage log for ``node``."""
    path = node.split("::")[0]
    return (f"{path}:14: AssertionError\n=========================== short test summary info ====\n"
            f"FAILED {node} - AssertionError: 3 != 4\n1 failed, 20 passed in 3.2s\n")


def stages_for(outcome) -> tuple[str, list[dict]]:
    """``(result, stages)`` for an outcome: ``"pass"``, ``("pylint",)`` or ``("pytest", node)``."""
    if outcome == "pass":
        return "SUCCESS", [{"name": n, "status": "SUCCESS", "log": "ok"} for n in STAGES]
    failing = "Pylint" if outcome[0] == "pylint" else "UT"
    log = PYLINT_LOG if outcome[0] == "pylint" else pytest_log(outcome[1])
    stages, seen = [], False
    for name in STAGES:
        if name == failing:
            stages.append({"name": name, "status": "FAILED", "log": log})
            seen = True
        else:
            stages.append({"name": name, "status": "NOT_EXECUTED" if seen else "SUCCESS", "log": "ok"})
    return "FAILURE", stages


class GateScenario(Scenario):
    """The gate bot + pipeline, driven by the forge's clock."""

    def __init__(self, outcomes: list, check_delay: float = 300, build_time: float = 1500,
                 label_lag: float = 0, reject_description: bool = False, queue_time: float = 0) -> None:
        super().__init__()
        self.queue_time = queue_time
        self.outcomes = list(outcomes)
        self.check_delay = check_delay
        self.build_time = build_time
        self.label_lag = label_lag
        self.reject_description = reject_description
        self.bypass_builds: list[int] = []
        self.real_builds: list[int] = []

    def on_comment(self, forge: FakeForge, pr: int, body: str) -> None:
        """React like the bot and Jenkins would."""
        now = forge.clock.now()
        if body.strip() == "/check-pr":
            if self.reject_description:
                forge.schedule(now + self.check_delay, lambda: forge.bot_comment(
                    pr, "PR check failed: the description does not follow the template (不通过)"))
            else:
                forge.schedule(now + self.check_delay, lambda: forge.set_label(pr, "pr-check-pass"))
        elif body.strip() == "/retest":
            self._retest(forge, pr, now)

    def _retest(self, forge: FakeForge, pr: int, now: float) -> None:
        if "pr-check-pass" not in forge.labels(pr):
            build = forge.add_build(pr, "SUCCESS", 17, [{"name": n, "status": "NOT_EXECUTED"} for n in STAGES])
            self.bypass_builds.append(build["number"])
            return
        if self.queue_time:
            item = forge.enqueue(pr)

            def start() -> None:
                forge.queued.remove(item)
                self._start_real(forge, pr, forge.clock.now())
            forge.schedule(now + self.queue_time, start)
            return
        self._start_real(forge, pr, now)

    def _start_real(self, forge: FakeForge, pr: int, now: float) -> None:
        result, stages = stages_for(self.outcomes.pop(0))
        console = "\n".join(s.get("log", "") for s in stages)
        build = forge.add_build(pr, result, 0, stages, console=console, building=True)
        self.real_builds.append(build["number"])

        def finish() -> None:
            forge.finish_build(build, self.build_time)
            if result == "SUCCESS":
                forge.schedule(forge.clock.now() + self.label_lag,
                               lambda: forge.set_label(pr, "ci-pipeline-passed"))
        forge.schedule(now + self.build_time, finish)
