# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The composition table (hyper_parallel/trainer/composition.yaml), its expansion, the pairwise cover and the
rendered docs/parallelism.md (which must be current: rendered from the table and the committed results)."""
import json
import os

from hyper_parallel.devtools import composition as comp

TABLE = comp.load_table()
COMBOS = comp.expand(TABLE)


def test_table_expands_to_unique_runnable_combinations():
    ids = [c.cid for c in COMBOS]
    assert len(ids) == len(set(ids)) and len(ids) > 100
    assert all(1 <= c.nproc <= TABLE["max_ranks"] for c in COMBOS)
    models = {c.model for c in COMBOS}
    assert models == set(TABLE["models"])
    for c in COMBOS:  # every override is a real trainer key: the config loads
        cfg = comp.job_config(c)
        assert cfg.job.nproc == c.nproc


def test_every_dimension_value_is_used_by_some_row():
    used = {}
    for c in COMBOS:
        for name, value in comp.all_dims(TABLE, c).items():
            used.setdefault(name, []).append(json.dumps(value))
    for name, dim in TABLE["dimensions"].items():
        values = list(dim["values"])
        missing = [v for v in values if json.dumps(v) not in used.get(name, [])]
        assert not missing, f"dimensions.{name}: values {missing} appear in no row"


def test_eight_rank_rows_run_at_four_with_one_degree_halved():
    scaled = [c for c in COMBOS if c.scaled_from]
    assert len(scaled) >= 4
    for c in scaled:
        assert c.nproc == 4 and c.scaled_from.startswith("8-rank shape ") and "halved" in c.cid


def test_legality_comes_from_the_one_validation():
    """Illegal combinations exist and each reason is one line naming a key; the table holds no legality."""
    verdicts = [comp.judge(c) for c in COMBOS]
    illegal = [r for ok, r in verdicts if not ok]
    assert 10 <= len(illegal) < len(COMBOS) // 2
    assert all("\n" not in r and ("parallelism." in r or "model." in r or "training." in r) for r in illegal)
    assert not any("legal" in row for row in TABLE["rows"])


def test_reference_runs_the_same_micro_batches_for_per_micro_batch_models():
    """An auxiliary-loss MoE model is compared with one process accumulating over the combination's micro-batches
    (grad_accum x pp_microbatches); other models with one process on the whole batch."""
    by_id = {c.cid: c for c in COMBOS}
    cases = {"qwen3_moe pp=2": 2, "qwen3_moe pp=2 pp_microbatches=1": 1, "qwen3_moe dp_shard=2 ep=2 grad_accum=2": 2,
             "qwen3_moe dp_shard=2 ep=2": 1, "llama3 pp=2": 1, "llama3 grad_accum=2": 1, "deepseek_v3 pp=2": 1,
             "qwen3_5_moe pp=2": 2}
    for cid, accum in cases.items():
        over = dict(comp.reference_overrides(TABLE, by_id[cid]))
        assert over["training.grad_accum"] == accum, cid
        assert comp.reference_label(TABLE, by_id[cid]) == "one process" + (f", grad_accum={accum}" if accum > 1 else "")
    assert comp.micro_batch_count(TABLE, by_id["llama3 pp=2 pp_microbatches=4"]) == 4
    assert comp.micro_batch_count(TABLE, by_id["llama3 pp=2 grad_accum=2"]) == 4


def test_per_micro_batch_list_is_the_models_with_router_losses():
    """The table's ``per_micro_batch`` list is exactly the table's models whose flavor has an auxiliary loss or a
    z-loss (read from the model configs, not from the table)."""
    from hyper_parallel.models.registry import get_model_spec
    from hyper_parallel.trainer.config import load_config
    with_losses = set()
    for name, over in TABLE["models"].items():
        cfg = load_config(None, list(over.items()))  # one MoEConfig per flavor, the same on both backends
        mcfg = get_model_spec(cfg.model.name).config(cfg.model.flavor)
        moe = getattr(getattr(mcfg, "text", mcfg), "moe", None)  # a vision-language model: its language model
        if moe is not None and (moe.uses_aux_loss or moe.z_loss_coeff > 0):
            with_losses.add(name)
    assert with_losses == set(TABLE["per_micro_batch"]) and with_losses


def _records():
    def rec(cid, dims, status="pass", seconds=10.0):
        return {"id": cid, "all_dims": dims, "status": status, "legal": status != "refused", "seconds": seconds}
    return [rec("a", {"m": 1, "x": 1, "y": 1}), rec("b", {"m": 1, "x": 2, "y": 2}),
            rec("c", {"m": 2, "x": 1, "y": 2}), rec("d", {"m": 2, "x": 2, "y": 1}),
            rec("e", {"m": 1, "x": 1, "y": 2}, seconds=100.0), rec("f", {"m": 2, "x": 3, "y": 1}, status="fail")]


def test_pairwise_cover_covers_every_pair_of_the_passing_combinations():
    out = comp.pairwise_cover(_records())
    chosen = [r for r in _records() if r["id"] in out["ids"]]
    covered = set().union(*(comp.pairs_of(r["all_dims"]) for r in chosen))
    target = set().union(*(comp.pairs_of(r["all_dims"]) for r in _records() if r["status"] == "pass"))
    assert covered == target and out["pairs_covered"] == out["pairs_passing"] == len(target)
    assert "f" not in out["ids"] and out["pairs_legal"] > out["pairs_passing"]  # the failing one's pairs count
    assert "e" not in out["ids"]  # a, b, c, d cover every pair; e is dearer for nothing new


def test_pairwise_cover_respects_the_budget():
    out = comp.pairwise_cover(_records(), budget_s=25.0)
    assert out["cost_s"] <= 25.0 and len(out["ids"]) == 2 and out["pairs_covered"] < out["pairs_passing"]


def test_docs_parallelism_md_is_rendered_from_the_table_and_the_results():
    with open(comp.RESULTS_PATH, encoding="utf-8") as fh:
        results = json.load(fh)
    with open(comp.DOC_PATH, encoding="utf-8") as fh:
        doc = fh.read()
    assert doc == comp.render_doc(TABLE, results), ("docs/parallelism.md is stale: run "
                                                     "python -m hyper_parallel.devtools.composition doc")
    assert os.path.basename(comp.TABLE_PATH) == "composition.yaml"


def test_render_marks_pass_fail_refused_and_lists_failures():
    first, second, third = COMBOS[0], COMBOS[1], next(c for c in COMBOS if not comp.judge(c)[0])
    results = {"generated": "t", "combinations": [
        {"id": first.cid, "status": "pass"},
        {"id": second.cid, "status": "fail", "loss_rel_err": 3e-4, "param_rel_err": 1e-3, "worst_param": "w"},
        {"id": third.cid, "status": "refused", "refusal": comp.judge(third)[1]}]}
    text = comp.render_doc(TABLE, results)
    assert "| ✓ |" in text or " ✓ " in text
    assert "✗ 1.0e-03" in text and f"`{second.cid}` | {second.nproc} | 3.0e-04 | 1.0e-03 |" in text
    assert "refused" in text and f"`{third.cid}`" in text
    assert "not run" in text  # the rest of the table


def _in_process_results():
    first, second, third = COMBOS[0], COMBOS[1], next(c for c in COMBOS if not comp.judge(c)[0])
    return first, second, third, {"generated": "t", "runner": "in-process", "combinations": [
        {"id": first.cid, "status": "pass", "seconds": 2.0, "loss_rel_err": 0.0, "param_rel_err": 0.0},
        {"id": second.cid, "status": "pass", "seconds": 3.0, "loss_rel_err": 1e-7, "param_rel_err": 2e-7},
        {"id": third.cid, "status": "refused", "refusal": comp.judge(third)[1]}]}


def test_merge_runs_takes_the_hp_train_verdict_and_reports_a_discrepancy():
    first, second, third, results = _in_process_results()
    extra = COMBOS[2]
    run = {"generated": "g", "runner": "hp-train", "wall_s": 99.0, "load_avg": [20.0, 18.0, 15.0], "combinations": [
        {"id": first.cid, "status": "pass", "seconds": 50.0, "loss_rel_err": 1e-8, "param_rel_err": 3e-8,
         "runner": "hp-train"},
        {"id": second.cid, "status": "fail", "seconds": 60.0, "loss_rel_err": 3e-4, "param_rel_err": 1e-3,
         "worst_param": "w", "runner": "hp-train"},
        {"id": third.cid, "status": "refused", "check_rc": 2, "runner": "hp-train --check"},
        {"id": extra.cid, "status": "pass", "seconds": 40.0, "loss_rel_err": 0.0, "param_rel_err": 0.0,
         "runner": "hp-train"}]}
    report = comp.merge_runs(results, run)
    assert report["ran"] == 4 and report["pass"] == 2 and report["fail"] == 1 and report["refused"] == 1
    assert len(report["discrepancies"]) == 1 and report["discrepancies"][0].startswith(f"{second.cid}: in-process "
                                                                                       "pass vs hp-train fail")
    recs = {r["id"]: r for r in results["combinations"]}
    # the in-process seconds stay (the CI cover is picked from them); the hp-train run's are under hp_train
    assert recs[first.cid]["seconds"] == 2.0 and recs[first.cid]["hp_train"]["seconds"] == 50.0
    assert recs[first.cid]["param_rel_err"] == 3e-8 and comp.row_runner(recs[first.cid], results) == "hp-train"
    assert recs[second.cid]["status"] == "fail" and recs[second.cid]["in_process_status"] == "pass"
    assert comp.row_runner(recs[third.cid], results) == "hp-train --check"
    assert recs[extra.cid]["runner"] == "hp-train" and len(results["combinations"]) == 4
    assert results["hp_train_merged"] == {"when": "g", "wall_s": 99.0, "load": "20 18 15"}


def test_render_marks_which_runner_verified_each_row():
    first, second, _, results = _in_process_results()
    comp.merge_runs(results, {"combinations": [{"id": first.cid, "status": "pass", "seconds": 50.0,
                                                "loss_rel_err": 0.0, "param_rel_err": 0.0}]})
    text = comp.render_doc(TABLE, results)
    first_row = next(ln for ln in text.splitlines() if ln.startswith(f"| {comp._layout(first)} |"))
    second_row = next(ln for ln in text.splitlines() if ln.startswith(f"| {comp._layout(second)} |"))
    assert "✓ hp" in first_row and "✓ hp" not in second_row and " ✓ " in second_row
    assert "Rows run: 1 through `hp-train`" in text and "1 in-process only" in text


def test_every_refused_row_has_its_one_line_reason_in_the_doc():
    """Each refused row of the committed results is listed in docs/parallelism.md with the refusal of the one
    validation (today's, so a stale reason fails too), naming the setting(s) that conflict."""
    with open(comp.RESULTS_PATH, encoding="utf-8") as fh:
        results = json.load(fh)
    with open(comp.DOC_PATH, encoding="utf-8") as fh:
        doc = fh.read()
    combos = {c.cid: c for c in COMBOS}
    refused = [r for r in results["combinations"] if r["status"] == "refused"]
    assert len(refused) >= 10
    for rec in refused:
        ok, reason = comp.judge(combos[rec["id"]])
        line = f"- `{rec['id']}`: {comp._short_reason(reason)}"
        assert not ok and line in doc.splitlines(), line
        assert "\n" not in reason and ("parallelism." in reason or "model." in reason or "training." in reason)


def test_render_shows_the_benchmark_ratios_with_their_load():
    results = {"generated": "t", "combinations": [], "benchmark": {
        "command": "python benchmarks/composition.py", "when": "2026-01-01", "load": "30 31 32", "setup": "2 ranks",
        "rows": [["fsdp", "1800 ms", "2800 ms", "0.64"], ["cp", "2000 ms", "-", "torch: cannot | on CPU"]]}}
    text = comp.render_doc(TABLE, results)
    assert "## Step time against torch's own APIs" in text and "load average 30 31 32" in text
    assert "| fsdp | 1800 ms | 2800 ms | 0.64 |" in text and "| cp | 2000 ms | - | torch: cannot / on CPU |" in text
    assert "## Step time" not in comp.render_doc(TABLE, {"generated": "t", "combinations": []})


def test_bf16_noise_verdict_passes_only_a_layout_no_further_from_fp32_than_one_bf16_process():
    """A bf16 layout outside the bf16 tolerance of one bf16 process passes when it is no further from fp32 than
    BF16_NOISE_FACTOR x one bf16 process is; a layout error (further from fp32) or a loss outside the tolerance
    still fails."""
    import torch
    exact = torch.tensor([1.0, -2.0, 0.5, 4.0])

    def run(delta, losses=(2.0, 1.5)):
        return {"losses": list(losses), "params": {"w": exact + torch.tensor(delta)}}
    ref32 = run([0.0, 0.0, 0.0, 0.0])
    ref = run([0.0, 0.0, 0.2, 0.0])                      # one bf16 process: 0.2 / 4 = 5e-2 from fp32
    noisy = run([0.0, 0.0, -0.2, 0.0])                   # the other side of fp32: 1e-1 from ref, 5e-2 from fp32
    broken = run([0.0, 0.6, 0.2, 0.0])                   # a layout error: 1.5e-1 from fp32
    tol = 0.02
    first = comp.compare(noisy, ref, tol)
    assert first["status"] == "fail"
    verdict = comp.bf16_noise_verdict(noisy, ref, ref32, first, tol)
    assert verdict["status"] == "pass" and abs(verdict["bf16_vs_fp32"] - 0.05) < 1e-6
    assert abs(verdict["one_process_bf16_vs_fp32"] - 0.05) < 1e-6 and verdict["note_verdict"].startswith("bf16")
    bad = comp.bf16_noise_verdict(broken, ref, ref32, comp.compare(broken, ref, tol), tol)
    assert bad["status"] == "fail" and abs(bad["bf16_vs_fp32"] - 0.15) < 1e-6
    off_loss = run([0.0, 0.0, -0.2, 0.0], losses=(2.0, 1.6))
    assert comp.bf16_noise_verdict(off_loss, ref, ref32, comp.compare(off_loss, ref, tol), tol)["status"] == "fail"
