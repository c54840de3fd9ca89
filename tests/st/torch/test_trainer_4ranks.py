# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ParallelDims' named meshes on 4 ranks, and the trainer's 4-rank configs (configs/*_4ranks.toml: job.nproc = 4)
for 3 CI-sized steps on 4 gloo ranks, each next to one process training the same global batches. pp_fsdp_4ranks
runs with training.grad_accum = 2 and the forward-only eval schedule: FSDP stages defer their reduce-scatter to the
last accumulation pass."""
import glob
import os

import pytest

from hyper_parallel.testing import multi_rank
from hyper_parallel.trainer.config import load_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
FOUR_RANK = sorted(os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "configs", "*.toml"))
                   if load_config(p).job.nproc == 4 and load_config(p).job.backend == "torch")
SMALL = {"data.max_corpus_mb": 0.3, "training.seq_len": 32, "training.global_batch": 8, "optimizer.total_steps": 100,
         "metrics.progress": False, "metrics.plot": False, "demo.resume_steps": 0, "demo.compare_steps": 0,
         "checkpoint.enable": False, "training.steps": 3, "metrics.eval_every": 2, "model.flavor": "debug"}
EXTRA = {"pp_fsdp_4ranks.toml": {"training.grad_accum": 2, "parallelism.pp_microbatches": 2}}


def test_the_4_rank_configs_are_found():
    assert FOUR_RANK == ["fsdp_tp_4ranks.toml", "pp_fsdp_4ranks.toml", "pp_tp_4ranks.toml"], FOUR_RANK


@pytest.fixture
def cache_dir(trainer_cache_dir):
    return trainer_cache_dir


@pytest.mark.parametrize("name", FOUR_RANK)
@multi_rank(world_size=4, timeout=300)
def test_4rank_config_matches_one_process(tmp_path, cache_dir, name):
    import torch.distributed as dist
    from hyper_parallel.trainer.api import LLMTrainer, derived_config
    overrides = {**SMALL, **EXTRA.get(name, {}), "job.out_dir": str(tmp_path / "run"), "data.cache_dir": cache_dir}
    cfg = load_config(os.path.join(ROOT, "configs", name), list(overrides.items()))
    history = LLMTrainer(cfg).train()
    assert [m["step"] for m in history] == [1, 2, 3] and "eval_loss" in history[1]
    if dist.get_rank() == 0:
        single_cfg = derived_config(cfg, parallelism={"dp_shard": -1, "tp": 1, "cp": 1, "ep": 1, "pp": 1},
                                    training={"grad_accum": 1}, metrics={"jsonl": False},
                                    job={"out_dir": str(tmp_path / "single")})
        single = LLMTrainer(single_cfg, distributed=False).train()
        rtol = 2e-5 if cfg.training.mixed_precision == "fp32" else 2e-3  # bf16 sums in other orders
        for a, b in zip(history, single):
            assert abs(a["loss"] - b["loss"]) <= rtol * abs(b["loss"]), (name, a["step"], a["loss"], b["loss"])
        assert abs(history[1]["eval_loss"] - single[1]["eval_loss"]) <= rtol * abs(single[1]["eval_loss"])
    dist.barrier()


@multi_rank(world_size=4, timeout=120)
def test_parallel_dims_builds_the_named_meshes_once():
    """ParallelDims on 4 ranks: the world mesh and the named sub-meshes (sliced, merged, HSDP's 2-D FSDP mesh)
    hold the ranks TorchTitan's layout says; build_mesh returns the same world mesh again."""
    import torch.distributed as dist
    from hyper_parallel.models import ParallelDims
    from hyper_parallel.models.parallel_dims import merge_mesh_dims

    def ranks(mesh):
        return list(mesh.topology.ranks)

    rank = dist.get_rank()
    hsdp = ParallelDims(dp_replicate=2, dp_shard=-1, cp=1, tp=1, pp=1, ep=1, world_size=4)
    world = hsdp.build_mesh("cpu")
    assert hsdp.build_mesh("cpu") is world and world.mesh_dim_names == ("dp_replicate", "dp_shard")
    fsdp = hsdp.mesh("fsdp")
    assert fsdp.mesh_dim_names == ("dp_replicate", "dp_shard") and fsdp.shape == (2, 2)
    assert ranks(hsdp.mesh("dp")) == [0, 1, 2, 3] and hsdp.mesh("loss") is hsdp.mesh("dp_cp")
    assert ranks(hsdp.mesh("dp_shard")) == [rank // 2 * 2, rank // 2 * 2 + 1]
    assert ranks(hsdp.mesh("dp_replicate")) == [rank % 2, rank % 2 + 2]
    assert hsdp.mesh("tp") is None and hsdp.mesh("cp") is None and hsdp.mesh("pp") is None
    fsdp_cp = ParallelDims(dp_shard=2, cp=2, world_size=4)
    fsdp_cp.build_mesh("cpu")
    assert ranks(fsdp_cp.mesh("dp_shard_cp")) == [0, 1, 2, 3] and fsdp_cp.mesh("fsdp").ndim == 1
    assert ranks(fsdp_cp.mesh("cp")) == [rank // 2 * 2, rank // 2 * 2 + 1]
    assert ranks(fsdp_cp.mesh("dp")) == [rank % 2, rank % 2 + 2] and ranks(fsdp_cp.mesh("loss")) == [0, 1, 2, 3]
    pp_tp = ParallelDims(dp_shard=1, pp=2, tp=2, world_size=4)
    world = pp_tp.build_mesh("cpu")
    assert world.mesh_dim_names == ("pp", "dp_shard", "tp") and pp_tp.mesh("fsdp") is None
    assert ranks(pp_tp.mesh("pp")) == [rank % 2, rank % 2 + 2] and ranks(pp_tp.mesh("tp")) == [rank // 2 * 2,
                                                                                                rank // 2 * 2 + 1]
    assert pp_tp.mesh("dp") is None and pp_tp.mesh("loss") is None
    with pytest.raises(ValueError, match="merge_mesh_dims: \\('pp', 'tp'\\) are not adjacent dims"):
        merge_mesh_dims(world, ("pp", "tp"), "pp_tp")


#: layouts the trainer composed wrongly or refused (issue 33): PP x CP (the pipeline path now shards the batch and
#: gives every stage the CP positions; Interleaved1F1B: a rank holds a first and a later stage), TP x CP and
#: DDP x TP (TP x FSDP on a 2-D slice of the 3-D world mesh)
COMPOSED = {
    "pp2_cp2_interleaved": ("pp.toml", {"parallelism.pp": 2, "parallelism.cp": 2, "model.flavor": "small",
                                        "parallelism.pp_schedule": "Interleaved1F1B", "parallelism.pp_microbatches": 2,
                                        "metrics.eval_every": 2}),
    "tp2_cp2_allgather": ("tp.toml", {"parallelism.cp": 2, "parallelism.cp_method": "allgather"}),
    "dp_replicate2_tp2": ("tp.toml", {"parallelism.dp_replicate": 2}),
}


@pytest.mark.parametrize("layout", sorted(COMPOSED))
@multi_rank(world_size=4, timeout=300)
def test_composed_layout_matches_one_process(tmp_path, cache_dir, layout):
    """Each layout trains 3 steps on 4 ranks; every step's loss and gradient norm (and the evaluation loss) equal
    one process training the same global batches (fp32, 2e-5 relative)."""
    import torch.distributed as dist
    from hyper_parallel.trainer.api import LLMTrainer, derived_config
    name, extra = COMPOSED[layout]
    overrides = {**SMALL, "model.flavor": "debug", "job.nproc": 4, "metrics.eval_every": 0, **extra,
                 "job.out_dir": str(tmp_path / "run"), "data.cache_dir": cache_dir}
    cfg = load_config(os.path.join(ROOT, "configs", name), list(overrides.items()))
    history = LLMTrainer(cfg).train()
    if dist.get_rank() == 0:
        single_cfg = derived_config(cfg, parallelism={"dp_replicate": 1, "dp_shard": -1, "tp": 1, "cp": 1, "pp": 1},
                                    metrics={"jsonl": False}, job={"out_dir": str(tmp_path / "single")})
        single = LLMTrainer(single_cfg, distributed=False).train()
        assert len(history) == len(single) == 3
        for a, b in zip(history, single):
            for key in ("loss", "grad_norm") + (("eval_loss",) if "eval_loss" in b else ()):
                assert abs(a[key] - b[key]) <= 2e-5 * abs(b[key]), (layout, a["step"], key, a[key], b[key])
    dist.barrier()
