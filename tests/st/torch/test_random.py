# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ST: placement-invariant random ops on DTensors (incl. dropout variants, rrelu, multinomial).

Every random op is run on meshes of 1, 2 and 4 ranks (1-D and 2-D) with Replicate, Shard, uneven
Shard and Partial inputs; each ``full_tensor()`` must be bit-identical to the single-process run of the
same generator (``reference_values`` at the same stream state). Plus: the tensor hash equals the pure
reference, the distributions pass loose statistical bounds, dropout's backward reuses the mask.
"""
import itertools
import math

import pytest

from hyper_parallel.testing import multi_rank

SHAPE = (5, 7)  # odd sizes: uneven shards on 2 and 4 ranks
N_OPS = 17  # entries of _ops()


# ---------------------------------------------------------------------- single process: kernels
def test_tensor_bits_equal_the_pure_reference():
    import torch
    from hyper_parallel.core.random import hash32
    from hyper_parallel.platform.torch.random import random_bits
    counters = [0, 1, 2, 12345, (1 << 32) - 1, 1 << 32, (1 << 32) + 5, (1 << 62) + 17, (1 << 63) - 1]
    for seed in (0, 1, 2 ** 40 + 3, 2 ** 64 - 1):
        for lane in (0, 1, 2):
            got = random_bits(seed, lane, torch.tensor(counters, dtype=torch.int64)).tolist()
            assert got == [hash32(seed, lane, c) for c in counters], (seed, lane)


def test_global_counters_are_the_global_flat_indices():
    import torch
    from hyper_parallel.platform.torch.random import global_counters
    full = torch.arange(4 * 5 * 6).view(4, 5, 6) + 100
    got = global_counters((4, 5, 6), (2, 3, 6), (1, 2, 0), 100)
    assert torch.equal(got, full[1:3, 2:5, :])
    assert global_counters((), (), (), 9).item() == 9


def test_polynomial_log_and_cos_are_accurate():
    import torch
    from hyper_parallel.platform.torch import random as tr
    u = torch.rand(100000, dtype=torch.float64)
    x = 1.0 - u
    log_f64, cos_2pi_f64 = tr._log_f64, tr._cos_2pi_f64  # pylint: disable=protected-access
    tan_half_pi_f64, exp_f64 = tr._tan_half_pi_f64, tr._exp_f64  # pylint: disable=protected-access
    torch.testing.assert_close(log_f64(x), torch.log(x), atol=1e-14, rtol=1e-14)
    torch.testing.assert_close(cos_2pi_f64(u), torch.cos(2 * torch.pi * u), atol=1e-14, rtol=0)
    w = 2 * u[u > 1e-6] - 1  # tan away from its pole at -1
    torch.testing.assert_close(tan_half_pi_f64(w), torch.tan(w * torch.pi / 2), atol=0, rtol=1e-10)
    z = torch.randn(100000, dtype=torch.float64) * 30
    torch.testing.assert_close(exp_f64(z), torch.exp(z), atol=0, rtol=1e-14)


N_STAT = 200_000  # sample size of the statistical checks (bounds are several standard errors wide)


def _draw(kind, k, dtype=None, params=(), seed=3):
    """N_STAT draws of ``kind`` from stream ``(seed, k * N_STAT)`` (disjoint counters per ``k``)."""
    import torch
    from hyper_parallel.platform.torch.random import reference_values
    return reference_values(kind, (N_STAT,), (seed, k * N_STAT), dtype or torch.float64, params)


def test_uniform_is_uniform_and_uncorrelated():
    import torch
    u = _draw("uniform", 0)
    assert 0.0 <= u.min() and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 0.005 and abs(u.var() - 1 / 12) < 0.003
    assert ((torch.histc(u, bins=10, min=0, max=1) / N_STAT) - 0.1).abs().max() < 0.005
    assert abs(torch.corrcoef(torch.stack([u[:-1], u[1:]]))[0, 1]) < 0.01  # neighbours
    other_seed = _draw("uniform", 0, seed=4)
    assert abs(torch.corrcoef(torch.stack([u, other_seed]))[0, 1]) < 0.01  # seeds
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        low = _draw("uniform", 0, dtype)
        assert low.dtype == dtype and 0.0 <= low.min() and low.max() < 1.0
        assert abs(low.double().mean() - 0.5) < 0.01
        assert _draw("normal", 1, dtype).dtype == dtype


def test_normal_moments():
    z = _draw("normal", 1)
    assert abs(z.mean()) < 0.01 and abs(z.var() - 1.0) < 0.02
    assert abs((z.abs() < 1).double().mean() - 0.6827) < 0.005  # one-sigma mass
    centred = z - z.mean()
    assert abs((centred ** 3).mean()) < 0.03 and abs((centred ** 4).mean() - 3.0) < 0.1
    ln = _draw("log_normal", 7, params=(0.5, 0.25))
    assert ln.min() > 0 and abs(ln.log().mean() - 0.5) < 0.005 and abs(ln.log().std() - 0.25) < 0.005


def test_discrete_distributions():
    import torch
    b = _draw("bernoulli", 2, torch.float32, (0.3,))
    assert set(b.unique().tolist()) <= {0.0, 1.0} and abs(b.mean() - 0.3) < 0.005
    k = _draw("randint", 4, torch.int64, (-3, 4))
    assert k.dtype == torch.int64 and k.min() == -3 and k.max() == 3
    assert ((torch.bincount(k + 3).double() / N_STAT) - 1 / 7).abs().max() < 0.005
    g = _draw("geometric", 5, params=(0.25,))
    assert g.min() >= 1 and torch.equal(g, g.round())
    assert abs(g.mean() - 4.0) < 0.05 and abs(g.var() - 12.0) < 0.5


def test_heavy_and_skewed_tails():
    import torch
    e = _draw("exponential", 3, params=(2.0,))
    assert e.min() >= 0 and abs(e.mean() - 0.5) < 0.005 and abs(e.var() - 0.25) < 0.01
    c = _draw("cauchy", 6, params=(1.0, 2.0))
    quartiles = torch.quantile(c[:100000], torch.tensor([0.25, 0.5, 0.75], dtype=torch.float64))
    torch.testing.assert_close(quartiles, torch.tensor([-1.0, 1.0, 3.0], dtype=torch.float64), atol=0.05, rtol=0)


# ---------------------------------------------------------------------- multi-rank: invariance
def _mesh_placements(mesh_shape):
    from hyper_parallel import Partial, Replicate, Shard
    if len(mesh_shape) == 1:
        return [(Replicate(),), (Shard(0),), (Shard(1),), (Partial(),)]
    return [(Replicate(), Replicate()), (Shard(0), Shard(1)), (Shard(1), Shard(0)), (Shard(0), Shard(0)),
            (Replicate(), Shard(1)), (Partial(), Shard(0)), (Shard(1), Partial("avg"))]


def _input(mesh, placements, value=0.25):
    """A DTensor of constant ``value`` with SHAPE and ``placements`` (Partial: full value on one rank)."""
    import torch
    import hyper_parallel as hp
    from hyper_parallel import Partial, Replicate
    if any(isinstance(p, Partial) for p in placements):
        rep = hp.distribute_tensor(torch.full(SHAPE, value), mesh, [Replicate() if isinstance(p, Partial) else p
                                                                      for p in placements])
        return rep.redistribute(placements=placements)  # R -> P keeps the value on one coordinate
    return hp.distribute_tensor(torch.full(SHAPE, value), mesh, placements)


def _ops():
    """(name, op on a DTensor x, expected full tensor at stream state (seed, offset), numel used, placements
    rule): ``like`` -> Partial becomes Replicate, ``same`` -> placements kept."""
    import torch
    import torch.nn.functional as F
    from hyper_parallel.platform.torch.random import reference_values as ref
    n = SHAPE[0] * SHAPE[1]
    keep = lambda st, p: 1.0 - ref("bernoulli", SHAPE, st, torch.float32, (p,))  # noqa: E731
    return [
        ("rand_like", torch.rand_like, lambda st: ref("uniform", SHAPE, st), "like"),
        ("randn_like", torch.randn_like, lambda st: ref("normal", SHAPE, st), "like"),
        ("randn_like f64", lambda x: torch.randn_like(x, dtype=torch.float64),
         lambda st: ref("normal", SHAPE, st, torch.float64), "like"),
        ("bernoulli(p)", lambda x: torch.bernoulli(x, 0.3), lambda st: ref("bernoulli", SHAPE, st, params=(0.3,)),
         "like"),
        ("Tensor.bernoulli(probs)", lambda x: x.bernoulli(),
         lambda st: ref("bernoulli", SHAPE, st, params=(0.25,)), "like"),
        ("uniform_", lambda x: x.clone().uniform_(-2.0, 3.0), lambda st: ref("uniform", SHAPE, st, params=(-2.0, 3.0)),
         "same"),
        ("normal_", lambda x: x.clone().normal_(1.0, 0.5), lambda st: ref("normal", SHAPE, st, params=(1.0, 0.5)),
         "same"),
        ("bernoulli_", lambda x: x.clone().bernoulli_(0.7), lambda st: ref("bernoulli", SHAPE, st, params=(0.7,)),
         "same"),
        ("randint_like", lambda x: torch.randint_like(x, 3, 10), lambda st: ref("randint", SHAPE, st, params=(3, 10)),
         "like"),
        ("exponential_", lambda x: x.clone().exponential_(2.0),
         lambda st: ref("exponential", SHAPE, st, params=(2.0,)), "same"),
        ("torch.normal(tensor, float)", lambda x: torch.normal(x, 2.0),
         lambda st: ref("normal", SHAPE, st) * 2.0 + 0.25, "like"),
        ("log_normal_", lambda x: x.clone().log_normal_(0.5, 0.25),
         lambda st: ref("log_normal", SHAPE, st, params=(0.5, 0.25)), "same"),
        ("geometric_", lambda x: x.clone().geometric_(0.3), lambda st: ref("geometric", SHAPE, st, params=(0.3,)),
         "same"),
        ("cauchy_", lambda x: x.clone().cauchy_(1.0, 0.5), lambda st: ref("cauchy", SHAPE, st, params=(1.0, 0.5)),
         "same"),
        ("nn.init.normal_", lambda x: torch.nn.init.normal_(x.clone(), 0.0, 2.0),
         lambda st: ref("normal", SHAPE, st, params=(0.0, 2.0)), "same"),
        ("F.dropout", lambda x: F.dropout(x, 0.4), lambda st: 0.25 * keep(st, 0.4) / 0.6, "same"),
        ("torch.dropout", lambda x: torch.dropout(x, 0.4, True), lambda st: 0.25 * keep(st, 0.4) / 0.6, "same"),
    ], n


def _check_invariance(mesh_shape):
    import torch
    import hyper_parallel as hp
    from hyper_parallel import Partial, Replicate
    from hyper_parallel.core.random import get_rng_state
    mesh = hp.init_device_mesh("cpu", mesh_shape)
    ops, n = _ops()
    checked = 0
    for placements in _mesh_placements(mesh_shape):
        hp.manual_seed(2026)
        for name, op, expect, kind in ops:
            x = _input(mesh, placements)
            state = get_rng_state()
            out = op(x)
            assert get_rng_state() == (state[0], state[1] + n), (name, placements)
            want_pl = tuple(Replicate() if kind == "like" and isinstance(p, Partial) else p for p in placements)
            assert out.placements == want_pl, (name, placements, out.placements)
            got = out.full_tensor()
            assert torch.equal(got, expect(state)), (name, placements, got, expect(state))
            checked += 1
    return checked


@multi_rank(world_size=1, timeout=120)
def test_same_values_on_one_process():
    assert _check_invariance((1,)) == 4 * N_OPS


@multi_rank(world_size=2, timeout=120)
def test_same_values_on_two_ranks_every_placement():
    assert _check_invariance((2,)) == 4 * N_OPS


@multi_rank(world_size=4, timeout=180)
def test_same_values_on_four_ranks_1d_and_2d_meshes():
    assert _check_invariance((4,)) == 4 * N_OPS
    assert _check_invariance((2, 2)) == 7 * N_OPS


@multi_rank(world_size=2, timeout=120)
def test_factories_successive_calls_and_seeding():
    import torch
    import hyper_parallel as hp
    from hyper_parallel import Replicate, Shard
    from hyper_parallel.core.random import get_rng_state
    from hyper_parallel.platform.torch.random import reference_values as ref
    mesh = hp.init_device_mesh("cpu", (2,))
    hp.manual_seed(7)
    assert get_rng_state() == (7, 0)
    a = hp.rand((9, 4), device_mesh=mesh, placements=[Shard(0)])
    b = hp.rand((9, 4), device_mesh=mesh, placements=[Shard(1)])
    c = hp.randn(33, device_mesh=mesh, placements=[Shard(0)], dtype=torch.float64, requires_grad=True)
    assert a.placements == (Shard(0),) and tuple(a.shape) == (9, 4) and tuple(a.to_local().shape) == ((5, 4), (4, 4))[
        mesh.get_coordinate()[0]]
    assert c.requires_grad and c.is_leaf and c.dtype == torch.float64
    torch.testing.assert_close(a.full_tensor(), ref("uniform", (9, 4), (7, 0)), rtol=0, atol=0)
    torch.testing.assert_close(b.full_tensor(), ref("uniform", (9, 4), (7, 36)), rtol=0, atol=0)
    torch.testing.assert_close(c.full_tensor().detach(), ref("normal", (33,), (7, 72), torch.float64), rtol=0, atol=0)
    assert not torch.equal(a.full_tensor(), b.full_tensor())  # successive calls differ
    hp.manual_seed(7)  # re-seeding replays the stream
    assert torch.equal(hp.rand((9, 4), device_mesh=mesh, placements=[Replicate()]).full_tensor(), a.full_tensor())
    hp.manual_seed(8)
    assert not torch.equal(hp.rand((9, 4), device_mesh=mesh, placements=[Replicate()]).full_tensor(), a.full_tensor())
    x = hp.distribute_tensor(torch.zeros(6, 6), mesh, [Shard(0)])
    first, second = torch.rand_like(x).full_tensor(), torch.rand_like(x).full_tensor()
    assert not torch.equal(first, second)
    with pytest.raises(ValueError, match="not Partial"):
        hp.rand((4,), device_mesh=mesh, placements=[hp.Partial()])


@multi_rank(world_size=2, timeout=120)
def test_dropout_forward_backward_reuses_the_mask():
    import torch
    import torch.nn.functional as F
    import hyper_parallel as hp
    from hyper_parallel import Partial, Replicate, Shard
    from hyper_parallel.core.random import get_rng_state
    from hyper_parallel.platform.torch.random import reference_values as ref
    mesh = hp.init_device_mesh("cpu", (2,))
    torch.manual_seed(0)
    full = torch.randn(SHAPE, dtype=torch.float64)
    weight = torch.randn(SHAPE, dtype=torch.float64)
    p = 0.3
    for placements in ([Replicate()], [Shard(0)], [Shard(1)], [Partial()]):
        hp.manual_seed(11)
        leaf = hp.distribute_tensor(full.clone().requires_grad_(True), mesh, [Replicate()])
        x = leaf.redistribute(placements=placements)
        state = get_rng_state()
        y = F.dropout(x, p, training=True)
        assert y.placements == tuple(placements)
        noise = (1.0 - ref("bernoulli", SHAPE, state, torch.float64, (p,))) / (1.0 - p)
        torch.testing.assert_close(y.full_tensor(), full * noise, rtol=0, atol=1e-15)
        (y.full_tensor() * weight).sum().backward()
        torch.testing.assert_close(leaf.grad.to_local(), weight * noise, rtol=0, atol=1e-15)  # same mask in backward
        # nn.Dropout module, eval mode and p = 0 are identities that draw nothing
        module = torch.nn.Dropout(p)
        module.eval()
        before = get_rng_state()
        assert torch.equal(module(x).full_tensor(), full)
        assert torch.equal(F.dropout(x, 0.0).full_tensor(), full)
        assert get_rng_state() == before
        module.train()
        torch.testing.assert_close(module(x.detach()).full_tensor(),
                                   full * (1.0 - ref("bernoulli", SHAPE, before, torch.float64, (p,))) / (1 - p))
        assert torch.equal(F.dropout(x.detach(), 1.0).full_tensor(), torch.zeros(SHAPE, dtype=torch.float64))
    # in-place dropout on a DTensor updates its local shard
    hp.manual_seed(12)
    z = hp.distribute_tensor(full.clone(), mesh, [Shard(0)])
    state = get_rng_state()
    F.dropout(z, p, training=True, inplace=True)
    noise = (1.0 - ref("bernoulli", SHAPE, state, torch.float64, (p,))) / (1.0 - p)
    torch.testing.assert_close(z.full_tensor(), full * noise, rtol=0, atol=1e-15)


@multi_rank(world_size=2, timeout=120)
def test_clear_refusals():
    import torch
    import torch.nn.functional as F
    import hyper_parallel as hp
    from hyper_parallel import Shard
    from hyper_parallel.core.ops.rule import RuleError
    mesh = hp.init_device_mesh("cpu", (2,))
    x = hp.distribute_tensor(torch.zeros(4, 4), mesh, [Shard(0)])
    with pytest.raises(RuleError, match="generator= is not supported on DTensors"):
        x.uniform_(0, 1, generator=torch.Generator())
    with pytest.raises(RuleError, match="dropout probability has to be between 0 and 1"):
        F.dropout(x, 1.5)
    with pytest.raises(RuleError, match=r"p=2\.0: expected a probability"):
        torch.bernoulli(x, 2.0)
    with pytest.raises(TypeError, match="random values need a floating dtype"):
        torch.rand_like(x, dtype=torch.int64)
    probs = hp.distribute_tensor(torch.full((4, 4), 0.5), mesh, [Shard(1)])
    hp.manual_seed(3)
    y = x.clone().bernoulli_(probs)  # a tensor p is laid out like self
    assert y.placements == (Shard(0),) and set(y.full_tensor().unique().tolist()) <= {0.0, 1.0}
    with pytest.raises(RuleError, match=r"must have self's shape \[4, 4\] or a single element"):
        x.clone().bernoulli_(hp.distribute_tensor(torch.full((4,), 0.5), mesh, [Shard(0)]))
    with pytest.raises(RuleError, match=r"randint bounds low=5, high=2"):
        torch.randint_like(x, 5, 2)
    with pytest.raises(RuleError, match=r"Tensor.exponential_: \{'lambd': -1.0\}: expected lambd > 0"):
        x.clone().exponential_(-1.0)


def _check_feature_dropout(mesh_shape):
    import torch
    import torch.nn.functional as F
    import hyper_parallel as hp
    from hyper_parallel import Partial, Replicate, Shard
    from hyper_parallel.core.random import get_rng_state
    from hyper_parallel.platform.torch.random import reference_values as ref
    mesh = hp.init_device_mesh("cpu", mesh_shape)
    torch.manual_seed(1)
    cases = [(F.dropout1d, (3, 5, 4), 2), (F.dropout1d, (5, 4), 1), (F.dropout2d, (3, 5, 2, 3), 2),
             (F.dropout2d, (3, 5, 4), 2), (F.dropout3d, (5, 2, 3, 4), 1), (F.dropout3d, (3, 2, 2, 3, 2), 2),
             (lambda x, p: torch.feature_dropout(x, p, True), (3, 5, 4), 2)]
    p, checked = 0.4, 0
    for fn, shape, k in cases:
        full = torch.randn(shape, dtype=torch.float64)
        singles = [Replicate(), Shard(0), Shard(1), Shard(len(shape) - 1), Partial()]
        for placements in itertools.product(singles, repeat=len(mesh_shape)):
            hp.manual_seed(5)
            leaf = hp.distribute_tensor(full.clone().requires_grad_(True), mesh, [Replicate()] * len(mesh_shape))
            x = leaf.redistribute(placements=placements)
            state = get_rng_state()
            y = fn(x, p)
            assert get_rng_state()[1] == state[1] + math.prod(shape[:k])  # one draw per (batch, channel)
            assert y.placements == tuple(placements)
            keep = 1.0 - ref("bernoulli", shape[:k], state, torch.float64, (p,))
            noise = keep.view(shape[:k] + (1,) * (len(shape) - k)) / (1.0 - p)
            torch.testing.assert_close(y.full_tensor(), full * noise, rtol=0, atol=1e-15)
            y.full_tensor().sum().backward()
            torch.testing.assert_close(leaf.grad.to_local(), noise.expand(shape), rtol=0, atol=1e-15)
            checked += 1
    return checked


@multi_rank(world_size=2, timeout=180)
def test_feature_dropout_one_draw_per_channel_on_every_placement():
    assert _check_feature_dropout((2,)) == 7 * 5


@multi_rank(world_size=4, timeout=300)
def test_feature_dropout_on_a_2d_mesh():
    assert _check_feature_dropout((2, 2)) == 7 * 25


@multi_rank(world_size=2, timeout=120)
def test_normal_with_tensor_mean_and_std_broadcasts_like_an_elementwise_op():
    import torch
    import hyper_parallel as hp
    from hyper_parallel import Partial, Replicate, Shard
    from hyper_parallel.core.random import get_rng_state
    from hyper_parallel.platform.torch.random import reference_values as ref
    mesh = hp.init_device_mesh("cpu", (2,))
    torch.manual_seed(3)
    mean, std = torch.randn(5, 7), torch.rand(7) + 0.5
    for pm, ps in ((Shard(0), Replicate()), (Shard(1), Shard(0)), (Replicate(), Replicate()), (Partial(), Shard(0))):
        m = hp.distribute_tensor(mean, mesh, [Replicate()]).redistribute(placements=[pm])
        s = hp.distribute_tensor(std, mesh, [ps])
        hp.manual_seed(9)
        state = get_rng_state()
        out = torch.normal(m, s)
        assert tuple(out.shape) == (5, 7) and get_rng_state()[1] == state[1] + 35
        assert not any(isinstance(p, Partial) for p in out.placements)
        torch.testing.assert_close(out.full_tensor(), ref("normal", (5, 7), state) * std + mean, rtol=0, atol=0)
    s = hp.distribute_tensor(std, mesh, [Shard(0)])
    hp.manual_seed(9)
    torch.testing.assert_close(torch.normal(1.0, s).full_tensor(), ref("normal", (7,), (9, 0)) * std + 1.0,
                               rtol=0, atol=0)


@multi_rank(world_size=2, timeout=120)
def test_alpha_dropout_is_affine_and_reduces_partial_inputs():
    import torch
    import torch.nn.functional as F
    import hyper_parallel as hp
    from hyper_parallel import Partial, Replicate, Shard
    from hyper_parallel.core.random import get_rng_state
    from hyper_parallel.platform.torch.random import reference_values as ref
    mesh = hp.init_device_mesh("cpu", (2,))
    torch.manual_seed(4)
    alpha, p = 1.7580993408473766, 0.2
    a = 1.0 / math.sqrt((alpha * alpha * p + 1.0) * (1.0 - p))
    cases = [(lambda x: F.alpha_dropout(x, p, training=True), (4, 6), 2),
             (lambda x: torch.alpha_dropout(x, p, True), (4, 6), 2),
             (lambda x: F.feature_alpha_dropout(x, p, training=True), (3, 5, 4), 2)]
    for fn, shape, k in cases:
        full = torch.randn(shape, dtype=torch.float64)
        for placements in ([Replicate()], [Shard(0)], [Shard(1)], [Partial()]):
            hp.manual_seed(6)
            leaf = hp.distribute_tensor(full.clone().requires_grad_(True), mesh, [Replicate()])
            x = leaf.redistribute(placements=placements)
            assert torch.equal(F.alpha_dropout(x, p).full_tensor(), full)  # training=False by default: identity
            state = get_rng_state()
            y = fn(x)
            assert y.placements == ((Replicate(),) if placements == [Partial()] else tuple(placements))
            keep = 1.0 - ref("bernoulli", shape[:k], state, torch.float64, (p,))
            keep = keep.view(shape[:k] + (1,) * (len(shape) - k))
            want = full * keep * a + (keep - 1.0) * alpha * a + alpha * a * p
            torch.testing.assert_close(y.full_tensor(), want, rtol=0, atol=1e-14)
            y.full_tensor().sum().backward()
            torch.testing.assert_close(leaf.grad.to_local(), (keep * a).expand(shape), rtol=0, atol=1e-15)


@multi_rank(world_size=2, timeout=120)
def test_rrelu_slopes_are_placement_invariant():
    import torch
    import torch.nn.functional as F
    import hyper_parallel as hp
    from hyper_parallel import Partial, Replicate, Shard
    from hyper_parallel.core.random import get_rng_state
    from hyper_parallel.core.ops.rule import RuleError
    from hyper_parallel.platform.torch.random import reference_values as ref
    mesh = hp.init_device_mesh("cpu", (2,))
    torch.manual_seed(8)
    full = torch.randn(5, 7, dtype=torch.float64)
    for placements in ([Replicate()], [Shard(0)], [Shard(1)], [Partial()]):
        hp.manual_seed(2)
        leaf = hp.distribute_tensor(full.clone().requires_grad_(True), mesh, [Replicate()])
        x = leaf.redistribute(placements=placements)
        state = get_rng_state()
        y = F.rrelu(x, 0.1, 0.3, training=True)
        assert y.placements == ((Replicate(),) if placements == [Partial()] else tuple(placements))
        slope = ref("uniform", (5, 7), state, torch.float64, (0.1, 0.3))
        torch.testing.assert_close(y.full_tensor(), torch.where(full > 0, full, full * slope), rtol=0, atol=0)
        y.full_tensor().sum().backward()
        torch.testing.assert_close(leaf.grad.to_local(), torch.where(full > 0, 1.0, slope), rtol=0, atol=0)
        before = get_rng_state()
        torch.testing.assert_close(F.rrelu(x.detach(), 0.1, 0.3).full_tensor(), F.rrelu(full, 0.1, 0.3))  # eval
        assert get_rng_state() == before
        z = x.detach().clone()
        if placements == [Partial()]:
            with pytest.raises(RuleError, match="in-place rrelu of a Partial tensor is not linear"):
                torch.rrelu_(z, 0.1, 0.3, True)
            continue
        torch.rrelu_(z, 0.1, 0.3, True)
        torch.testing.assert_close(z.full_tensor(), torch.where(full > 0, full, full * ref(
            "uniform", (5, 7), before, torch.float64, (0.1, 0.3))), rtol=0, atol=0)


def _multinomial_reference(probs, n, replacement, state):
    """Single-process run of the same sampler (inverse CDF / exponential race over the stream)."""
    import torch
    from hyper_parallel.platform.torch.random import exponential_from_uniform, reference_values
    probs = probs.to(torch.float64)
    if replacement:
        u = reference_values("uniform", tuple(probs.shape[:-1]) + (n,), state, torch.float64)
        cdf = probs.cumsum(-1)
        return torch.searchsorted(cdf, u * cdf[..., -1:], right=True).clamp_max(probs.shape[-1] - 1)
    keys = exponential_from_uniform(reference_values("uniform", tuple(probs.shape), state, torch.float64)) / probs
    keys = torch.where(probs > 0, keys, torch.full_like(keys, float("inf")))
    return torch.topk(keys, n, dim=-1, largest=False).indices


@multi_rank(world_size=2, timeout=120)
def test_multinomial_rows_shard_and_values_are_placement_invariant():
    import torch
    import hyper_parallel as hp
    from hyper_parallel import Partial, Replicate, Shard
    from hyper_parallel.core.random import get_rng_state
    mesh = hp.init_device_mesh("cpu", (2,))
    torch.manual_seed(5)
    probs = torch.rand(5, 6)
    probs[:, 2] = 0.0  # never drawn
    for placements, out_pl in (([Replicate()], Replicate()), ([Shard(0)], Shard(0)), ([Shard(1)], Replicate()),
                               ([Partial()], Replicate())):
        x = hp.distribute_tensor(probs, mesh, [Replicate()]).redistribute(placements=placements)
        for n, replacement in ((3, False), (5, False), (7, True)):
            hp.manual_seed(1)
            state = get_rng_state()
            out = torch.multinomial(x, n, replacement=replacement)
            assert out.placements == (out_pl,) and tuple(out.shape) == (5, n) and out.dtype == torch.int64
            got = out.full_tensor()
            assert torch.equal(got, _multinomial_reference(probs, n, replacement, state)), (placements, n)
            assert not (got == 2).any()
            if not replacement:  # distinct categories per row
                assert all(len(set(row.tolist())) == n for row in got)
    hp.manual_seed(1)
    one = hp.distribute_tensor(probs[0], mesh, [Shard(0)])  # 1-D: categories gathered, output replicated
    assert torch.equal(one.multinomial(4, True).full_tensor(), _multinomial_reference(probs[0], 4, True, (1, 0)))


def test_multinomial_sampler_frequencies():
    import torch
    from hyper_parallel.platform.torch.random import exponential_from_uniform, reference_values
    probs = torch.tensor([0.1, 0.2, 0.0, 0.7], dtype=torch.float64)
    draws = _multinomial_reference(probs.expand(50000, 4), 1, True, (4, 0)).flatten()
    torch.testing.assert_close(torch.bincount(draws, minlength=4).double() / 50000, probs, atol=0.01, rtol=0)
    first = _multinomial_reference(probs.expand(50000, 4), 1, False, (4, 0)).flatten()  # race winner ~ p
    torch.testing.assert_close(torch.bincount(first, minlength=4).double() / 50000, probs, atol=0.01, rtol=0)
    e = exponential_from_uniform(reference_values("uniform", (100000,), (5, 0), torch.float64))
    assert e.min() >= 0 and abs(e.mean() - 1.0) < 0.02
