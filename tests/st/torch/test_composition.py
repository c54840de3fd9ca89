# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The CI subset of the composition matrix: the pairwise-covering combinations (picked by
``hyper_parallel.devtools.composition.pairwise_cover`` from the combinations that passed in the committed results,
within the run-time budget below) through ``hp-train`` (torchrun), each against one process of the same model and
data; and refusals of the table through ``hp-train --check``. ``make matrix`` runs the whole table."""
import json

from hyper_parallel.devtools import composition as comp

#: the subset's run time in the results' seconds (measured with up to 7 runs at once at load 25-55 on 2 cores,
#: ~110 s per run; one run costs ~15 CPU-seconds, ~10-12 s on 2 idle cores): 6 runs + the one-process reference
BUDGET_S = 700.0
REF_COST_S = 110.0


def _results():
    with open(comp.RESULTS_PATH, encoding="utf-8") as fh:
        return json.load(fh)


def test_pairwise_subset_equals_one_process(tmp_path):
    table = comp.load_table()
    results = _results()
    pick = comp.pairwise_cover(results["combinations"], budget_s=BUDGET_S, ref_cost_s=REF_COST_S)
    combos = {c.cid: c for c in comp.expand(table)}
    assert len(pick["ids"]) >= 4 and all(cid in combos for cid in pick["ids"]), pick
    runner = comp.MatrixRunner(table, str(tmp_path), 400.0, comp.ROOT)
    bad = {}
    for cid in pick["ids"]:
        rec = runner.legal(combos[cid])
        if rec["status"] != "pass":
            bad[cid] = {k: rec.get(k) for k in ("status", "reason", "loss_rel_err", "param_rel_err")}
    assert not bad, bad


def test_refusals_exit_2_with_one_line_naming_both_settings():
    table = comp.load_table()
    refused = {}
    for combo in comp.expand(table):
        ok, reason = comp.judge(combo)
        if not ok and " conflicts with " in reason:
            refused.setdefault(reason.split(": ")[-1], combo)  # one combination per refusal rule
    assert len(refused) >= 4
    for combo in list(refused.values())[:3]:
        out = comp.check_refusal(combo, comp.ROOT)
        assert out["status"] == "refused" and out["check_rc"] == 2, out
        assert " conflicts with " in out["check_output"] and "\n" not in out["check_output"]
