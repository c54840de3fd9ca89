# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ST parity: gather/scatter/index/masked ops, one_hot and embedding (incl. a vocabulary-sharded weight)."""
import pytest

from hyper_parallel.testing import multi_rank


def _perm_rows(shape, gen):
    import torch
    return torch.stack([torch.randperm(shape[1], generator=gen) for _ in range(shape[0])])


@pytest.mark.parametrize("shape", [(4, 6), (5, 3), (1, 4)])
@multi_rank(world_size=2, timeout=600)
def test_gather_scatter_family(shape):
    import warnings
    import torch
    warnings.filterwarnings("ignore", message="The reduce argument of torch.scatter")  # deprecated, still tested
    from hyper_parallel.testing.op_parity import check_op
    gen = torch.Generator().manual_seed(0)
    a, b = shape
    x, src = torch.randn(shape, generator=gen), torch.randn(shape, generator=gen)
    idx1 = torch.randint(0, b, (a, 2), generator=gen)
    idx0 = torch.randint(0, a, (3, b), generator=gen)
    full1 = torch.randint(0, b, shape, generator=gen)
    perm1 = _perm_rows(shape, gen)
    cases = [
        ("torch.gather", lambda t, i: torch.gather(t, 1, i), [x, idx1]),
        ("Tensor.gather", lambda t, i: t.gather(0, i), [x, idx0]),
        ("torch.gather", lambda t, i: torch.gather(t, 1, i), [x, full1]),
        ("torch.take_along_dim", lambda t, i: torch.take_along_dim(t, i, 1), [x, idx1]),
        ("Tensor.take_along_dim", lambda t, i: t.take_along_dim(i[:1], dim=1), [x, idx1]),
        ("torch.take_along_dim", lambda t, i: torch.take_along_dim(t, i.flatten()), [x, idx1]),
        ("torch.scatter", lambda t, i, s: torch.scatter(t, 1, i, s), [x, perm1, src]),
        ("Tensor.scatter", lambda t, i: t.scatter(1, i, 0.5), [x, perm1]),
        ("Tensor.scatter (reduce, no derivative)", lambda t, i, s: t.scatter(1, i[:, :2], s, reduce="add"),
         [x, perm1, src]),
        ("torch.scatter_add", lambda t, i, s: torch.scatter_add(t, 1, i, s), [x, full1, src]),
        ("Tensor.scatter_add", lambda t, i, s: t.scatter_add(0, i, s[:3]), [x, idx0, torch.randn(3, b)]),
        ("torch.index_select", lambda t, i: torch.index_select(t, 0, i), [x, torch.tensor([a - 1, 0, a // 2, 0])]),
        ("Tensor.index_select", lambda t, i: t.index_select(1, i), [x, torch.tensor([b - 1, 0, b - 1])]),
        ("torch.index_add", lambda t, i, s: torch.index_add(t, 0, i, s), [x, torch.tensor([0, a - 1, 0]),
                                                                          torch.randn(3, b, generator=gen)]),
        ("Tensor.index_add", lambda t, i, s: t.index_add(1, i, s, alpha=2.0), [x, torch.tensor([b - 1, 0, 0, 0]),
                                                                               torch.randn(a, 4, generator=gen)]),
    ]
    for name, fn, inputs in cases:
        report = check_op(name, fn, inputs, grad="reduce" not in name).raise_if_failed()
        assert not report.rejected, (name, report.rejected)


@pytest.mark.parametrize("shape", [(4, 6), (5, 3)])
@multi_rank(world_size=2, timeout=600)
def test_masked_and_one_hot(shape):
    import torch
    import torch.nn.functional as F
    from hyper_parallel.testing.op_parity import check_op
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(shape, generator=gen)
    mask = torch.rand(shape, generator=gen) > 0.5
    source = torch.randn(shape[0] * shape[1], generator=gen)
    ids = torch.randint(0, 7, shape, generator=gen)
    cases = [
        ("torch.masked_scatter", lambda t, m, s: torch.masked_scatter(t, m, s), [x, mask, source], True),
        ("Tensor.masked_scatter", lambda t, m, s: t.masked_scatter(m[0], s), [x, mask, source], True),
        ("torch.masked_select", torch.masked_select, [x, mask], True),
        ("Tensor.masked_select", lambda t, m: t.masked_select(m[:, :1]), [x, mask], True),
        ("torch.nn.functional.one_hot", lambda i: F.one_hot(i, 7), [ids], False),
        ("torch.nn.functional.one_hot", F.one_hot, [ids], False),
    ]
    for name, fn, inputs, grad in cases:
        report = check_op(name, fn, inputs, grad=grad).raise_if_failed()
        assert not report.rejected, (name, report.rejected)


@pytest.mark.parametrize("vocab", [10, 7, 1])
@multi_rank(world_size=2, timeout=600)
def test_embedding(vocab):
    import torch
    import torch.nn.functional as F
    from hyper_parallel.testing.op_parity import check_op
    gen = torch.Generator().manual_seed(2)
    weight = torch.randn(vocab, 6, generator=gen)
    ids = torch.randint(0, vocab, (3, 5), generator=gen)
    for name, fn, inputs in [
            ("torch.nn.functional.embedding", F.embedding, [ids, weight]),
            ("torch.nn.functional.embedding", lambda i, w: F.embedding(i, w, padding_idx=vocab // 2), [ids, weight]),
            ("torch.nn.functional.embedding", lambda i, w: F.embedding(i, w, padding_idx=-1), [ids, weight]),
            ("torch.nn.functional.embedding", lambda i, w: F.embedding(i, w, scale_grad_by_freq=True), [ids, weight]),
            ("torch.embedding", torch.embedding, [weight, ids]),
            ("torch.embedding", lambda w, i: torch.embedding(w, i, vocab - 1), [weight, ids])]:
        report = check_op(name, fn, inputs).raise_if_failed()
        assert not report.rejected, (name, report.rejected)
    report = check_op("vocab-parallel", F.embedding, [ids, weight], placements=[
        [(__import__("hyper_parallel").Replicate(),)], [(__import__("hyper_parallel").Shard(0),)]])
    assert report.raise_if_failed().native == 1  # Shard(0) weight + replicated ids: no communication


@multi_rank(world_size=2, timeout=120)
def test_embedding_placements_and_errors():
    import torch
    import torch.nn.functional as F
    import hyper_parallel as hp
    from hyper_parallel import Partial, Replicate, Shard
    from hyper_parallel.core.ops.rule import RuleError
    from hyper_parallel.platform.torch.dispatch import strict_dispatch
    mesh = hp.init_device_mesh("cpu", (2,))
    w_full = torch.randn(8, 4)
    ids = torch.tensor([[0, 5, 7], [3, 3, 4]])
    with strict_dispatch():
        out = F.embedding(ids, hp.distribute_tensor(w_full, mesh, [Shard(0)]))
        assert out.placements == (Partial(),)
        torch.testing.assert_close(out.full_tensor(), F.embedding(ids, w_full))
        assert F.embedding(ids, hp.distribute_tensor(w_full, mesh, [Shard(1)])).placements == (Shard(2),)
        d_ids = hp.distribute_tensor(ids, mesh, [Shard(1)])
        assert F.embedding(d_ids, hp.distribute_tensor(w_full, mesh, [Replicate()])).placements == (Shard(1),)
        assert torch.gather(hp.distribute_tensor(w_full, mesh, [Shard(0)]), 1,
                            hp.distribute_tensor(torch.zeros(8, 2, dtype=torch.long), mesh, [Shard(0)])
                            ).placements == (Shard(0),)
    with pytest.raises(RuleError, match="sparse=True is not supported"):
        F.embedding(ids, hp.distribute_tensor(w_full, mesh, [Shard(0)]), sparse=True)


@multi_rank(world_size=4, timeout=300)
def test_indexing_on_2d_mesh():
    import torch
    import torch.nn.functional as F
    from hyper_parallel import Partial, Replicate, Shard
    from hyper_parallel.testing.op_parity import check_op
    gen = torch.Generator().manual_seed(3)
    weight = torch.randn(9, 6, generator=gen)
    ids = torch.randint(0, 9, (4, 5), generator=gen)
    w_pls = [(Shard(0), Shard(1)), (Shard(0), Shard(0)), (Shard(1), Partial()), (Replicate(), Shard(0))]
    i_pls = [(Replicate(), Replicate()), (Shard(0), Shard(1)), (Replicate(), Shard(0))]
    report = check_op("torch.nn.functional.embedding", F.embedding, [ids, weight], mesh_shape=(2, 2),
                      placements=[i_pls, w_pls]).raise_if_failed()
    assert report.combos == 12 and not report.rejected
    x = torch.randn(4, 6, generator=gen)
    idx = torch.randint(0, 6, (4, 6), generator=gen)
    pls = [(Shard(0), Shard(1)), (Shard(0), Replicate()), (Replicate(), Shard(0))]
    check_op("torch.scatter_add", lambda t, i, s: torch.scatter_add(t, 1, i, s), [x, idx, x * 2], mesh_shape=(2, 2),
             placements=[pls, pls, pls]).raise_if_failed()
    check_op("torch.gather", lambda t, i: torch.gather(t, 1, i), [x, idx], mesh_shape=(2, 2),
             placements=[pls, pls]).raise_if_failed()


@multi_rank(world_size=2, timeout=120)
def test_zero_dim_inputs_of_index_ops():
    """0-d inputs (OpInfo samples) have nothing to shard: every input is taken whole."""
    import torch
    from hyper_parallel.testing.op_parity import check_op
    x, idx, src = torch.tensor(3.0), torch.tensor([0]), torch.tensor(2.0)
    check_op("torch.index_select 0-d", lambda a, i: torch.index_select(a, 0, i), [x, idx]).raise_if_failed()
    check_op("torch.index_add 0-d", lambda a, i, s: torch.index_add(a, 0, i, s, alpha=2), [x, idx, src]) \
        .raise_if_failed()
