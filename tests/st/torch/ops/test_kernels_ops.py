# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ST parity on 2 ranks: the fused ops (C++ kernels) on DTensors, every placement combination, forward and
backward against the same op on one process; the natively sharded combos are counted."""
from hyper_parallel.testing import multi_rank


@multi_rank(world_size=2, timeout=600)
def test_fused_ops_dtensor_rules():
    import torch
    import hyper_parallel as hp
    from hyper_parallel import Replicate, Shard
    from hyper_parallel.kernels import build_info, moe_permute, moe_unpermute, rms_norm, sinkhorn, swiglu
    from hyper_parallel.testing.op_parity import check_op
    assert build_info()["available"], build_info()
    torch.manual_seed(11)
    mesh = hp.init_device_mesh("cpu", (2,))
    x, w = torch.randn(4, 6, 8), torch.rand(8) + 0.5
    rep = check_op("rms_norm", lambda a, b: rms_norm(a, b, 1e-6), [x, w], mesh=mesh).raise_if_failed()
    assert rep.native >= 2 and rep.passed == rep.combos, rep  # batch and sequence shards stay sharded
    check_op("rms_norm no weight", rms_norm, [x], mesh=mesh).raise_if_failed()
    rep = check_op("swiglu", swiglu, [torch.randn(4, 6), torch.randn(4, 6)], mesh=mesh).raise_if_failed()
    assert rep.native >= 3, rep
    rep = check_op("sinkhorn", lambda a: sinkhorn(a, 8), [torch.randn(4, 2, 4, 4)], mesh=mesh).raise_if_failed()
    assert rep.native >= 2, rep  # the two batch dims
    tokens, idx = torch.randn(6, 8), torch.randint(0, 3, (6, 2))
    rep_pl = [(Replicate(),)]
    rep = check_op("moe_permute", lambda a, i: moe_permute(a, i, 3), [tokens, idx], mesh=mesh,
                   placements=[[(Replicate(),), (Shard(0),), (Shard(1),)], rep_pl]).raise_if_failed()
    assert rep.native >= 2, rep  # Replicate, and the hidden-dim shard
    permuted, row_map, _ = moe_permute(tokens, idx, 3)
    rep = check_op("moe_unpermute", moe_unpermute, [permuted, row_map, torch.rand(6, 2)], mesh=mesh,
                   placements=[[(Replicate(),), (Shard(0),), (Shard(1),)], rep_pl, [(Replicate(),), (Shard(0),)]]
                   ).raise_if_failed()
    assert rep.native >= 2, rep
