# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT: search legality and constraints, stage balancing against brute force, the CLI and its TOML."""
import itertools
import random
import tomllib

import pytest
from click.testing import CliRunner

from hyper_parallel.auto_parallel import (CLUSTER_PRESETS, PUBLISHED_SHAPES, ModelShape, NoPlanFitsError,
                                          ParallelPlan, balance_stages, search)
from hyper_parallel.auto_parallel.balance import LayerCost, stage_times
from hyper_parallel.auto_parallel.cli import main
from hyper_parallel.auto_parallel.memory import estimate_memory
from hyper_parallel.auto_parallel.plan import TrainConfig

SMALL = ModelShape(1024, 256, 688, 4, 8, 4, 32, name="small")
MOE = ModelShape(256, 64, 128, 3, 4, 2, 16, num_experts=4, top_k=2, expert_hidden=32, num_shared_experts=1,
                 first_k_dense=1, name="debug_moe")


def test_search_returns_only_legal_plans_that_fit_ranked_by_time():
    cluster = CLUSTER_PRESETS["cpu-gloo-2core"].with_devices(4, "24MiB")
    result = search(SMALL, cluster, global_batch=8, seq_len=64)
    assert len(result) > 3 and result.evaluated == len(result) + len(result.rejected)
    times = [r.time.step_s for r in result]
    assert times == sorted(times) and [r.rank for r in result] == list(range(1, len(result) + 1))
    for r in result:
        p = r.plan
        assert p.world_size == 4 and 8 % (p.dp * p.microbatches) == 0
        assert SMALL.num_heads % p.tp == 0 and SMALL.num_kv_heads % p.tp == 0 and 64 % (p.cp * p.tp) == 0
        assert r.memory.peak_bytes <= cluster.device_memory
        assert r.memory == estimate_memory(SMALL, p, TrainConfig(8, 64))
    kinds = dict(result.rejection_summary())
    assert kinds.get("out of memory", 0) > 0 and kinds.get("illegal split", 0) > 0
    assert all("needs" in why for _, why in result.rejected if why.startswith("out of memory"))


def test_constraints_fix_and_forbid_dims():
    cluster = CLUSTER_PRESETS["h100"].with_devices(8)
    fixed = search(SMALL, cluster, 16, 64, {"tp": 2, "pp": 1})
    assert fixed and all(r.plan.tp == 2 and r.plan.pp == 1 for r in fixed)
    moe = search(MOE, cluster, 16, 64, {"ep": [2, 4], "activation": "none"})
    assert moe and all(r.plan.ep in (2, 4) and r.plan.activation == "none" for r in moe)
    assert all(MOE.num_experts % r.plan.ep == 0 for r in moe)
    with pytest.raises(ValueError, match="unknown keys \\['tensor'\\]"):
        search(SMALL, cluster, 16, 64, {"tensor": 2})


def test_nothing_fits_names_the_smallest_need():
    cluster = CLUSTER_PRESETS["h100"].with_devices(8, "1MiB")
    with pytest.raises(NoPlanFitsError, match=r"no plan fits; smallest needs \d+\.\d+ GiB per device"):
        search(PUBLISHED_SHAPES["llama3-8b"], cluster, 8, 2048)


def test_search_at_scale_covers_many_plans():
    result = search(PUBLISHED_SHAPES["qwen3-30b-a3b"], CLUSTER_PRESETS["h100"].with_devices(8), 64, 4096)
    assert result.evaluated > 500 and result[0].memory.peak_bytes <= 80 * 10 ** 9


def _brute(times, mems, k, limit):
    best, arg = float("inf"), None
    n = len(times)
    for cuts in itertools.combinations(range(1, n), k - 1):
        bounds = (0, *cuts, n)
        sizes = [bounds[i + 1] - bounds[i] for i in range(k)]
        spans = [(bounds[i], bounds[i + 1]) for i in range(k)]
        if any(sum(mems[a:b]) > lim for (a, b), lim in zip(spans, limit)):
            continue
        worst = max(sum(times[a:b]) for a, b in spans)
        if worst < best:
            best, arg = worst, sizes
    return best, arg


def test_balance_stages_is_optimal_against_brute_force():
    rng = random.Random(7)
    for _ in range(150):
        n, k = rng.randint(2, 9), rng.randint(1, 4)
        if k > n:
            continue
        times = [rng.randint(1, 20) / 4 for _ in range(n)]
        mems = [rng.randint(1, 10) for _ in range(n)]
        limit = [rng.randint(8, 30) for _ in range(k)]
        best, _ = _brute(times, mems, k, limit)
        costs = [LayerCost(t, m) for t, m in zip(times, mems)]
        if best == float("inf"):
            with pytest.raises(ValueError, match="no split"):
                balance_stages(costs, k, limit)
            continue
        sizes = balance_stages(costs, k, limit)
        assert len(sizes) == k and sum(sizes) == n and min(sizes) >= 1
        assert max(stage_times(costs, sizes)) == pytest.approx(best)


def test_balance_handles_heavy_first_and_last_layers():
    # embedding (light) and LM head (heavy as 2 layers) as their own entries
    costs = [0.5] + [1.0] * 6 + [2.0]
    sizes = balance_stages(costs, 3)
    # 8.5 units on 3 stages: [0.5 1 1] [1 1 1] [1 2] is the only split with a max of 3
    assert sizes == [3, 3, 2] and max(stage_times(costs, sizes)) == pytest.approx(3.0)
    with pytest.raises(ValueError, match="3 layers cannot fill 4"):
        balance_stages([1, 1, 1], 4)
    with pytest.raises(ValueError, match=r"layer_costs\[1\]"):
        balance_stages([1, "x"], 1)


def test_cli_prints_table_and_writes_a_trainer_config(tmp_path):
    out = tmp_path / "plan.toml"
    res = CliRunner().invoke(main, ["--model", "llama3", "--flavor", "small", "--devices", "4", "--memory", "1GiB",
                                    "--cluster", "cpu-gloo-2core", "--global-batch", "8", "--seq-len", "64",
                                    "--top", "3", "--write-config", str(out)])
    assert res.exit_code == 0, res.output
    assert "llama3:small on 4" in res.output and "peak GiB" in res.output and "rejected" in res.output
    text = out.read_text()
    cfg = tomllib.loads(text)
    from hyper_parallel.trainer.config import parse_config
    job = parse_config(cfg, str(out))  # the trainer reads it (unknown keys or wrong types would raise)
    best = search(SMALL, CLUSTER_PRESETS["cpu-gloo-2core"].with_devices(4, "1GiB"), 8, 64)[0].plan
    par = cfg["parallelism"]
    assert cfg["model"] == {"name": "llama3", "flavor": "small"}
    assert (par["dp_shard"], par["tp"], par["pp"], par["cp"]) == (best.dp_shard, best.tp, best.pp, best.cp)
    assert (job.parallelism.dp_shard, job.parallelism.tp, job.parallelism.pp) == (best.dp_shard, best.tp, best.pp)
    assert job.training.global_batch == 8 and job.training.seq_len == 64 and job.job.nproc == 4
    assert cfg["activation"]["mode"] == best.activation
    assert "estimated peak memory per device" in text


def test_cli_bad_inputs():
    runner = CliRunner()
    res = runner.invoke(main, ["--model", "nope", "--devices", "2"])
    assert res.exit_code == 2 and "unknown model 'nope'" in res.output
    res = runner.invoke(main, ["--model", "llama3", "--flavor", "huge"])
    assert res.exit_code == 2 and "no flavor 'huge'" in res.output
    res = runner.invoke(main, ["--model", "llama3-8b", "--devices", "8", "--memory", "1MiB"])
    assert res.exit_code == 1 and "no plan fits; smallest needs" in res.output
    res = runner.invoke(main, ["--model", "llama3-8b", "--memory", "plenty"])
    assert res.exit_code == 2 and "memory size 'plenty'" in res.output
    res = runner.invoke(main, ["--model", "llama3-8b", "-c", "tp"])
    assert res.exit_code == 2 and "expected KEY=VALUE" in res.output


def test_plan_label_and_explicit_stage_split():
    plan = ParallelPlan(dp_shard=2, pp=2, microbatches=4, layers_per_stage=[3, 1], activation="full")
    assert plan.label() == "fsdp2 pp2(1F1B,m4) ac=full"
    est = estimate_memory(SMALL, plan, TrainConfig(8, 64))
    assert est.per_rank[0] > est.per_rank[1]  # three layers and 2 in-flight microbatches on stage 0
    with pytest.raises(ValueError, match="sums to 3"):
        estimate_memory(SMALL, ParallelPlan(pp=2, microbatches=2, layers_per_stage=[2, 1]), TrainConfig(8, 64))


def test_balanced_layers_per_stage_gives_the_heavy_head_stage_fewer_layers():
    """vocab 8192 makes the head cost several layers: the last stage takes fewer decoder layers, the
    embedding (cheap) barely moves the first; the split is balance_stages over part_costs."""
    from hyper_parallel.auto_parallel.balance import balanced_layers_per_stage
    from hyper_parallel.auto_parallel.time_model import part_costs
    shape = ModelShape(8192, 256, 688, 8, 8, 4, 32)
    plan, train = ParallelPlan(pp=2, microbatches=2), TrainConfig(8, 64)
    cluster = CLUSTER_PRESETS["cpu-gloo-2core"].with_devices(2)
    costs = part_costs(shape, plan, train, cluster)
    assert len(costs) == 10 and costs[-1] > 2 * costs[1] > 0 and costs[0] < costs[1]
    split = balanced_layers_per_stage(shape, plan, train, cluster)
    assert sum(split) == 8 and split[0] > split[1]
    assert [split[0] + 1, split[1] + 1] == balance_stages(costs, 2)
    with pytest.raises(ValueError, match="no pipeline"):
        balanced_layers_per_stage(shape, ParallelPlan(), train, cluster)


def test_cli_writes_the_balanced_stage_split_the_trainer_reads(tmp_path):
    out = tmp_path / "pp.toml"
    res = CliRunner().invoke(main, ["--model", "llama3", "--flavor", "small", "--devices", "2", "--memory", "1GiB",
                                    "--cluster", "cpu-gloo-2core", "--global-batch", "8", "--seq-len", "64",
                                    "-c", "pp=2", "-c", "schedule=1F1B", "--write-config", str(out)])
    assert res.exit_code == 0, res.output
    cfg = tomllib.loads(out.read_text())
    from hyper_parallel.auto_parallel.balance import balanced_layers_per_stage
    from hyper_parallel.trainer.config import parse_config
    job = parse_config(cfg, str(out))
    best = search(SMALL, CLUSTER_PRESETS["cpu-gloo-2core"].with_devices(2, "1GiB"), 8, 64,
                  {"pp": 2, "schedule": "1F1B"})[0].plan
    expected = balanced_layers_per_stage(SMALL, best, TrainConfig(8, 64), CLUSTER_PRESETS["cpu-gloo-2core"])
    assert cfg["parallelism"]["pp_layers_per_stage"] == expected and sum(expected) == 4
    assert list(job.parallelism.pp_layers_per_stage) == expected and job.parallelism.pp == 2
