# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ST parity: matmul family, attention, rotary embedding on 2 ranks, every placement combination."""
from hyper_parallel.testing import multi_rank


@multi_rank(world_size=2, timeout=600)
def test_matmul_family():
    import torch
    import torch.nn.functional as F
    from hyper_parallel.testing.op_parity import check_op
    torch.manual_seed(0)
    for m, k, n in [(4, 6, 8), (5, 3, 7)]:
        a, b = torch.randn(m, k), torch.randn(k, n)
        for name, fn in [("torch.mm", torch.mm), ("Tensor.mm", torch.Tensor.mm), ("torch.matmul", torch.matmul),
                         ("Tensor.__matmul__", torch.Tensor.__matmul__), ("Tensor.matmul", torch.Tensor.matmul)]:
            rep = check_op(name, fn, [a, b]).raise_if_failed()
            assert rep.native >= 6, (name, rep.native)  # R/S combos that need no communication
        w, bias = torch.randn(n, k), torch.randn(n)
        rep = check_op("F.linear", F.linear, [a, w, bias]).raise_if_failed()
        assert rep.native > 0
        check_op("F.linear no bias", F.linear, [a, w]).raise_if_failed()
        inp = torch.randn(m, n)
        check_op("torch.addmm", lambda i, x, y: torch.addmm(i, x, y, beta=0.5, alpha=2.0), [inp, a, b]) \
            .raise_if_failed()
        check_op("Tensor.addmm", torch.Tensor.addmm, [inp, a, b]).raise_if_failed()
    a3, b3 = torch.randn(3, 4, 5), torch.randn(3, 5, 2)
    for name, fn in [("torch.bmm", torch.bmm), ("Tensor.bmm", torch.Tensor.bmm), ("torch.matmul 3d", torch.matmul)]:
        check_op(name, fn, [a3, b3], partial=False).raise_if_failed()
    check_op("torch.baddbmm", lambda i, x, y: torch.baddbmm(i, x, y, alpha=0.5), [torch.randn(3, 4, 2), a3, b3],
             partial=False).raise_if_failed()
    check_op("Tensor.baddbmm", torch.Tensor.baddbmm, [torch.randn(3, 4, 2), a3, b3], partial=False).raise_if_failed()
    # broadcasting batch and 1-D cases
    check_op("matmul bcast", torch.matmul, [torch.randn(2, 3, 4, 5), torch.randn(5, 6)], partial=False) \
        .raise_if_failed()
    check_op("matmul bcast batch", torch.matmul, [torch.randn(2, 1, 4, 5), torch.randn(3, 5, 2)], partial=False) \
        .raise_if_failed()
    check_op("matmul vec", torch.matmul, [torch.randn(4, 5), torch.randn(5)]).raise_if_failed()
    check_op("matmul dot", torch.matmul, [torch.randn(6), torch.randn(6)]).raise_if_failed()
    check_op("einsum bij,bjk->bik", lambda x, y: torch.einsum("bij,bjk->bik", x, y), [a3, b3], partial=False) \
        .raise_if_failed()
    check_op("einsum ij,kj->ik", lambda x, y: torch.einsum("ij,kj->ik", x, y), [torch.randn(4, 6),
                                                                                 torch.randn(5, 6)]).raise_if_failed()
    check_op("einsum implicit", lambda x, y: torch.einsum("ij,jk", x, y), [torch.randn(4, 6), torch.randn(6, 3)]) \
        .raise_if_failed()


@multi_rank(world_size=2, timeout=600)
def test_attention_and_rotary():
    import torch
    import torch.nn.functional as F
    import hyper_parallel as hp
    from hyper_parallel.kernels import apply_rotary_emb
    from hyper_parallel.testing.op_parity import check_op
    torch.manual_seed(1)
    q, k, v = torch.randn(2, 4, 6, 8), torch.randn(2, 4, 6, 8), torch.randn(2, 4, 6, 8)
    mesh = hp.init_device_mesh("cpu", (2,))
    from hyper_parallel import Replicate, Shard
    pls = [[(Replicate(),), (Shard(0),), (Shard(1),), (Shard(2),), (Shard(3),)]] * 3
    rep = check_op("sdpa", F.scaled_dot_product_attention, [q, k, v], placements=pls, mesh=mesh,
                   atol=1e-5).raise_if_failed()
    assert rep.native >= 3  # batch, heads (all three alike), and query length
    check_op("sdpa causal", lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=True), [q, k, v],
             placements=pls, mesh=mesh).raise_if_failed()
    kg, vg = torch.randn(2, 2, 6, 8), torch.randn(2, 2, 6, 8)
    check_op("sdpa gqa", lambda a, b, c: F.scaled_dot_product_attention(a, b, c, enable_gqa=True), [q, kg, vg],
             placements=pls, mesh=mesh).raise_if_failed()
    mask = torch.rand(6, 6) > 0.3
    check_op("sdpa mask", lambda a, b, c, m: F.scaled_dot_product_attention(a, b, c, attn_mask=m),
             [q, k, v, mask], placements=pls + [[(Replicate(),), (Shard(0),)]], mesh=mesh).raise_if_failed()
    x = torch.randn(2, 6, 4, 8)
    cos, sin = torch.randn(6, 1, 8), torch.randn(6, 1, 8)
    rep = check_op("apply_rotary_emb", apply_rotary_emb, [x, cos, sin], partial=False).raise_if_failed()
    assert rep.native > 0


@multi_rank(world_size=2, timeout=600)
def test_optimizer_ops_foreach_and_single_tensor():
    import torch
    import hyper_parallel as hp
    from hyper_parallel import Replicate, Shard
    mesh = hp.init_device_mesh("cpu", (2,))
    torch.manual_seed(3)
    shapes = [(5, 3), (4,), (2, 6)]
    full = [torch.randn(s) for s in shapes]
    grads = [torch.randn(s) for s in shapes]
    for opt_cls, kwargs in [(torch.optim.AdamW, {"lr": 0.1, "weight_decay": 0.1}),
                            (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9})]:
        for foreach in (False, True):
            ref = [torch.nn.Parameter(t.clone()) for t in full]
            ours = [torch.nn.Parameter(hp.distribute_tensor(t, mesh, [Shard(0) if i != 1 else Replicate()]))
                    for i, t in enumerate(full)]
            o_ref = opt_cls(ref, foreach=foreach, **kwargs)
            o_ours = opt_cls(ours, foreach=foreach, **kwargs)
            for _ in range(3):
                for p, g in zip(ref, grads):
                    p.grad = g.clone()
                for p, g in zip(ours, grads):
                    p.grad = hp.distribute_tensor(g, mesh, p.placements)
                o_ref.step()
                o_ours.step()
            for p, r in zip(ours, ref):
                torch.testing.assert_close(p.full_tensor(), r.detach(), msg=lambda m: f"{opt_cls.__name__} "
                                           f"foreach={foreach}: {m}")


@multi_rank(world_size=2, timeout=120)
def test_rejections_are_clear_and_mixed_inputs_work():
    import pytest
    import torch
    import hyper_parallel as hp
    from hyper_parallel import Replicate, Shard
    from hyper_parallel.core.ops.rule import RuleError
    mesh = hp.init_device_mesh("cpu", (2,))
    other = hp.init_device_mesh("cpu", (2,), mesh_dim_names=("tp",))
    a = hp.distribute_tensor(torch.randn(4, 4), mesh, [Shard(0)])
    b = hp.distribute_tensor(torch.randn(4, 4), other, [Shard(0)])
    with pytest.raises(RuleError, match="DTensor inputs live on different meshes"):
        torch.add(a, b)
    with pytest.raises(RuleError, match="out= is not supported on DTensors"):
        torch.add(a, a, out=hp.distribute_tensor(torch.empty(4, 4), mesh, [Shard(0)]))
    # a plain tensor operand is taken as replicated; a 0-d tensor broadcasts
    plain = torch.randn(4, 4)
    full = a.full_tensor()
    torch.testing.assert_close((a + plain).full_tensor(), full + plain)
    torch.testing.assert_close((a * torch.tensor(3.0)).full_tensor(), full * 3)
    # a tensor keyword argument is laid out like a positional one
    w = torch.randn(4, 4)
    dw = hp.distribute_tensor(w, mesh, [Replicate()])
    torch.testing.assert_close(torch.nn.functional.linear(a, weight=dw).full_tensor(), full @ w.t())
    # tuple outputs keep their type
    vals = torch.max(a, dim=1)
    assert type(vals).__name__ == "max" and vals.values.placements == (Shard(0),)


@multi_rank(world_size=2, timeout=300)
def test_attention_broadcast_batch_and_dropout():
    import torch
    import torch.nn.functional as F
    import hyper_parallel as hp
    from hyper_parallel import Replicate, Shard
    from hyper_parallel.testing.op_parity import check_op
    mesh = hp.init_device_mesh("cpu", (2,))
    torch.manual_seed(2)
    q, k, v = torch.randn(4, 2, 3, 8), torch.randn(1, 2, 6, 8), torch.randn(1, 2, 6, 8)
    pls = [[(Replicate(),), (Shard(0),), (Shard(1),)]] * 3
    check_op("sdpa broadcast batch", F.scaled_dot_product_attention, [q, k, v], placements=pls, mesh=mesh) \
        .raise_if_failed()
    q3, k3 = torch.randn(4, 3, 8), torch.randn(4, 6, 8)
    torch.manual_seed(5)
    want = F.scaled_dot_product_attention(q3, k3, k3, dropout_p=0.5)
    dq, dk = hp.distribute_tensor(q3, mesh, [Shard(0)]), hp.distribute_tensor(k3, mesh, [Shard(0)])
    torch.manual_seed(5)
    got = F.scaled_dot_product_attention(dq, dk, dk, dropout_p=0.5)
    assert got.placements == (Replicate(),)  # in-kernel dropout: only a replicated call matches one process
    torch.testing.assert_close(got.full_tensor(), want)
