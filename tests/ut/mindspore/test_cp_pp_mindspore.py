# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT (one process, no cluster): the MindSpore CP ring's point-to-point order cannot deadlock and pairs every send
with its receive (a simulation of blocking pair broadcasts, 2-7 ranks, both directions); the block attention +
log-sum-exp merge over any split of the keys equals the Llama's attention; the Llama's pipeline split keeps the
model's parameter names and its stages chained equal the whole model. The multi-rank runs are in
``tests/st/mindspore/test_mindspore_breadth.py``."""
import numpy as np
import pytest

TOL = dict(rtol=1e-5, atol=1e-5)


def _simulate(orders):
    """Run blocking pair transfers: the ops at the heads of two ranks' lists meet when one sends to the other and
    the other receives from the one. Returns who received from whom, in order; raises on a deadlock."""
    heads = [0] * len(orders)
    got = {r: [] for r in range(len(orders))}
    while any(h < len(o) for h, o in zip(heads, orders)):
        moved = False
        for a, order in enumerate(orders):
            if heads[a] >= len(order) or order[heads[a]][0] != "send":
                continue
            b = order[heads[a]][1]
            if heads[b] < len(orders[b]) and orders[b][heads[b]] == ("recv", a):
                got[b].append(a)
                heads[a] += 1
                heads[b] += 1
                moved = True
        if not moved:
            raise AssertionError(f"deadlock at {heads}: {orders}")
    return got


@pytest.mark.parametrize("n", range(2, 8))
def test_ring_orders_pair_up_without_deadlock(n):
    from hyper_parallel.cp._mindspore.attention import _reverse_order, _ring_order
    forward = _simulate([list(_ring_order(r, n)) for r in range(n)])
    assert forward == {r: [(r - 1) % n] for r in range(n)}
    backward = _simulate([list(_reverse_order(r, n)) for r in range(n)])
    assert backward == {r: [(r + 1) % n] for r in range(n)}


def test_blocks_merged_by_log_sum_exp_equal_attention():
    import mindspore as ms
    from hyper_parallel.cp._mindspore.attention import _block, _merge
    from hyper_parallel.models.llama3._mindspore.model import attention
    ms.set_device("CPU")
    rng = np.random.default_rng(0)
    b, s, h, kv, d = 2, 12, 4, 2, 8
    q, k, v = (ms.Tensor(rng.standard_normal((b, s, n, d)).astype(np.float32)) for n in (h, kv, kv))
    want = attention(q, k, v).asnumpy()
    order = rng.permutation(s)  # keys in any order, split into 3 blocks; the mask from the positions
    out = lse = None
    for part in np.array_split(order, 3):
        idx = ms.Tensor(part.astype(np.int32))
        bias = ms.Tensor(np.where(part[None, :] <= np.arange(s)[:, None], 0.0, -1e30).astype(np.float32))
        o, l = _block(q, ms.ops.gather(k, idx, 1), ms.ops.gather(v, idx, 1), bias)
        out, lse = (o, l) if out is None else _merge(out, lse, o, l)
    got = out.transpose(0, 2, 1, 3).reshape(b, s, h * d).asnumpy()
    np.testing.assert_allclose(got, want, **TOL)


def test_pipeline_split_keeps_names_and_chains_to_the_whole_model():
    import mindspore as ms
    from hyper_parallel.models import get_model_spec
    from hyper_parallel.models.llama3._mindspore.pipeline import split_llama
    ms.set_device("CPU")
    spec = get_model_spec("llama3", backend="mindspore")
    model = spec.model_cls(spec.flavors["debug"], seed=2)
    ids = ms.Tensor(np.random.default_rng(1).integers(0, 256, (2, 8)).astype(np.int32))
    want = model(ids).asnumpy()
    names = sorted(p.name for p in model.get_parameters())
    stages = split_llama(model, 4, [0, 1, 2, 3])
    assert [s.layer_ids for s in stages] == [(), (0,), (1,), ()]
    assert sorted(p.name for s in stages for p in s.get_parameters()) == names
    h = ids
    for stage in stages:
        h = stage(h)
    np.testing.assert_allclose(h.asnumpy(), want, **TOL)
    two = split_llama(model, 2, [0, 1], layers_per_stage=[2, 0])
    assert [s.layer_ids for s in two] == [(0, 1), ()] and two[0].first and two[1].last
