# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ST: checkpoints where a 2-D mesh is the point — (2, 2) <-> (4,) on 4 ranks, HSDP -> FSDP, bit-exact."""
from hyper_parallel.testing import multi_rank
from tests.st.torch.test_checkpoint import fsdp_llama, full_optim_states, full_params, full_value, llama_batch, llama_step

SHAPES = [(8, 6), (7, 5), (3, 9)]  # even, uneven, a dim shorter than the 4 ranks (empty shards)


@multi_rank(world_size=4, timeout=240)
def test_2x2_to_4_and_back_and_hsdp_to_fsdp(tmp_path):
    import torch
    import torch.distributed as dist
    import hyper_parallel as hp
    from hyper_parallel import Replicate, Shard
    from hyper_parallel import checkpoint as ckpt
    rank = dist.get_rank()
    m22 = hp.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    m4 = hp.init_device_mesh("cpu", (4,))
    layouts22 = [[Shard(0), Shard(1)], [Replicate(), Shard(0)], [Shard(0), Shard(0)]]
    layouts4 = [[Shard(1)], [Shard(0)], [Replicate()]]
    for i, (a, b) in enumerate(zip(layouts22, layouts4)):
        sd = {f"w{j}": hp.distribute_tensor(full_value(s, j), m22, a) for j, s in enumerate(SHAPES)}
        ckpt.save(sd, checkpoint_id=tmp_path / f"22_{i}")
        tgt = {f"w{j}": hp.distribute_tensor(torch.zeros(s), m4, b) for j, s in enumerate(SHAPES)}
        ckpt.load(tgt, checkpoint_id=tmp_path / f"22_{i}")
        for j, s in enumerate(SHAPES):
            assert torch.equal(tgt[f"w{j}"].full_tensor(), full_value(s, j)), (a, b, s)
        ckpt.save(tgt, checkpoint_id=tmp_path / f"4_{i}")
        back = {f"w{j}": hp.distribute_tensor(torch.zeros(s), m22, layouts22[(i + 1) % 3]) for j, s in enumerate(SHAPES)}
        ckpt.load(back, checkpoint_id=tmp_path / f"4_{i}")
        for j, s in enumerate(SHAPES):
            assert torch.equal(back[f"w{j}"].full_tensor(), full_value(s, j)), (b, s)

    # HSDP (replicate 2 x shard 2) model + AdamW -> FSDP over 4 ranks
    hsdp = fsdp_llama(0, m22)
    opt = torch.optim.AdamW(hsdp.parameters(), lr=1e-2)
    llama_step(hsdp, opt, llama_batch(0, rank, 4))
    want_p, want_s = full_params(hsdp), full_optim_states(hsdp, opt)
    msd, osd = ckpt.get_state_dict(hsdp, opt)
    ckpt.save({"model": msd, "optim": osd}, checkpoint_id=tmp_path / "hsdp")
    fsdp = fsdp_llama(1, m4)
    opt4 = torch.optim.AdamW(fsdp.parameters(), lr=1e-2)
    msd, osd = ckpt.get_state_dict(fsdp, opt4)
    ckpt.load({"model": msd, "optim": osd}, checkpoint_id=tmp_path / "hsdp")
    ckpt.set_state_dict(fsdp, opt4, model_state_dict=msd, optim_state_dict=osd)
    got_p, got_s = full_params(fsdp), full_optim_states(fsdp, opt4)
    assert sorted(got_p) == sorted(want_p) and sorted(got_s) == sorted(want_s)
    for k, v in want_p.items():
        assert torch.equal(got_p[k], v), k
    for k, v in want_s.items():
        assert torch.equal(got_s[k], v), k
