# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The CI subset of the composition matrix: a complete pairwise cover (every pair of dimension values -- model
included -- that a passing combination of the committed results holds appears in at least one combination run
here), picked by ``hyper_parallel.devtools.composition.pairwise_cover``, each run inside reused gloo worker
processes (``run_in_process``: ``LLMTrainer`` in the test's process group, no launch per combination) and compared
with one process of the same model and data (losses per step and final parameters, the matrix's tolerances); and
refusals of the table through ``hp-train --check``. ``make matrix`` runs the whole table through ``hp-train``."""
import json

from hyper_parallel.devtools import composition as comp
from hyper_parallel.testing import multi_rank


def _cover():
    table = comp.load_table()
    with open(comp.RESULTS_PATH, encoding="utf-8") as fh:
        results = json.load(fh)
    # the MindSpore column (job.backend = mindspore) is checked by tests/st/mindspore/test_mindspore_breadth.py
    # the vision-language models (their data: the generated set under runs/vl_data) by test_vl_trainer.py
    results = {**results, "combinations": [r for r in results["combinations"]
                                           if table["models"][r["model"]].get("job.backend", "torch") == "torch"
                                           and "data.processor" not in table["models"][r["model"]]]}
    pick = comp.pairwise_cover(results["combinations"])  # no budget: the whole cover
    combos = {c.cid: c for c in comp.expand(table)}
    return table, results, pick, [combos[cid] for cid in pick["ids"]]


def test_pairwise_cover_is_complete():
    """Every pair of the passing combinations is covered; prints the coverage and what stays out (pairs that only
    failing combinations of the matrix hold: see docs/parallelism.md, "Known failures")."""
    _, results, pick, chosen = _cover()
    passing = [r for r in results["combinations"] if r.get("status") == "pass"]
    covered = set().union(*(comp.pairs_of(r["all_dims"]) for r in passing if r["id"] in pick["ids"]))
    target = set().union(*(comp.pairs_of(r["all_dims"]) for r in passing))
    legal = set().union(*(comp.pairs_of(r["all_dims"]) for r in results["combinations"] if r.get("legal")))
    print(f"pairwise cover: {len(chosen)} of {len(passing)} passing combinations "
          f"({sum(c.nproc == 1 for c in chosen)} on 1 rank, {sum(c.nproc == 2 for c in chosen)} on 2, "
          f"{sum(c.nproc == 4 for c in chosen)} on 4); pairs covered {len(covered)}/{len(target)} of the passing "
          f"combinations, {len(covered)}/{len(legal)} of the legal ones")
    for pair in sorted(legal - target):
        print(f"  left out (only in failing combinations): {pair}")
    assert covered == target and pick["pairs_covered"] == len(target)
    assert {c.nproc for c in chosen} <= {1, 2, 4}


def _run(tmp_path, cache, sizes):
    import torch.distributed as dist
    table, _, _, chosen = _cover()
    mine = [c for c in chosen if c.nproc in sizes]
    records = comp.run_in_process(table, mine, str(tmp_path), cache)
    if dist.get_rank() == 0:
        assert [r["id"] for r in records] == [c.cid for c in mine]
        bad = {r["id"]: {k: r.get(k) for k in ("reason", "loss_rel_err", "param_rel_err", "worst_param")}
               for r in records if r["status"] != "pass"}
        assert not bad, bad
    dist.barrier()


@multi_rank(world_size=2, timeout=900)
def test_pairwise_cover_on_1_and_2_ranks_equals_one_process(tmp_path, trainer_cache_dir):
    _run(tmp_path, trainer_cache_dir, (1, 2))


@multi_rank(world_size=4, timeout=900)
def test_pairwise_cover_on_4_ranks_equals_one_process(tmp_path, trainer_cache_dir):
    _run(tmp_path, trainer_cache_dir, (4,))


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
