# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ST parity: cat/stack, pad, repeat family, tril/triu, flip/roll, diagonals on 2 ranks (and a 2x2 mesh)."""
import pytest

from hyper_parallel.testing import multi_rank


def _unary_cases(shape):
    import torch
    import torch.nn.functional as F
    a, b = shape
    return [
        ("torch.nn.functional.pad", lambda x: F.pad(x, (1, 2))),
        ("torch.nn.functional.pad", lambda x: F.pad(x, (0, 0, 2, 1), value=0.5)),
        ("torch.nn.functional.pad", lambda x: F.pad(x.unsqueeze(0), (1, 1), mode="reflect")),
        ("torch.nn.functional.pad", lambda x: F.pad(x, (-1, 0))),
        ("Tensor.repeat", lambda x: x.repeat(1, 2)),
        ("Tensor.repeat", lambda x: x.repeat(2, 1, 1)),
        ("Tensor.repeat", lambda x: x.repeat((3, 2))),
        ("torch.tile", lambda x: torch.tile(x, (2,))),
        ("Tensor.tile", lambda x: x.tile((2, 1, 1))),
        ("torch.repeat_interleave", lambda x: torch.repeat_interleave(x, 2, dim=0)),
        ("Tensor.repeat_interleave", lambda x: x.repeat_interleave(3, 1)),
        ("Tensor.repeat_interleave", lambda x: x.repeat_interleave(2)),
        ("torch.repeat_interleave", lambda x: torch.repeat_interleave(x, torch.arange(a) % 3, dim=0)),
        ("Tensor.repeat_interleave", lambda x: x.repeat_interleave(torch.arange(b) % 2 + 1, dim=1)),
        ("torch.tril", torch.tril),
        ("torch.tril", lambda x: torch.tril(x, -1)),
        ("Tensor.tril", lambda x: x.tril(diagonal=2)),
        ("torch.triu", lambda x: torch.triu(x, 1)),
        ("Tensor.triu", lambda x: x.triu()),
        ("Tensor.triu", lambda x: x.unsqueeze(0).expand(2, a, b).triu(-2)),
        ("torch.flip", lambda x: torch.flip(x, (0,))),
        ("Tensor.flip", lambda x: x.flip(-1)),
        ("Tensor.flip", lambda x: x.flip(0, 1)),
        ("torch.fliplr", torch.fliplr),
        ("torch.flipud", torch.flipud),
        ("torch.roll", lambda x: torch.roll(x, 1, 0)),
        ("torch.roll", lambda x: torch.roll(x, 2)),
        ("Tensor.roll", lambda x: x.roll((1, -1), (0, 1))),
        ("torch.diagonal", torch.diagonal),
        ("Tensor.diagonal", lambda x: x.diagonal(1)),
        ("torch.diagonal", lambda x: torch.diagonal(x.unsqueeze(0), -1, 1, 2)),
        ("torch.diag_embed", torch.diag_embed),
        ("torch.diag_embed", lambda x: torch.diag_embed(x, 1, 0, 2)),
    ]


@pytest.mark.parametrize("shape", [(4, 6), (5, 3), (1, 4)])
@multi_rank(world_size=2, timeout=600)
def test_unary_concat_family(shape):
    import torch
    from hyper_parallel.testing.op_parity import check_op
    torch.manual_seed(0)
    x = torch.randn(shape)
    for name, fn in _unary_cases(shape):
        report = check_op(name, fn, [x]).raise_if_failed()
        assert not report.rejected, (name, report.rejected)
        if name in ("torch.tril", "torch.triu") or name == "Tensor.tril":  # a shifted diagonal, no communication
            assert report.native == report.combos == 4, (name, report)


@pytest.mark.parametrize("shapes", [((4, 6), (2, 6)), ((5, 3), (5, 3)), ((1, 3), (4, 3))])
@multi_rank(world_size=2, timeout=600)
def test_cat_and_stack(shapes):
    import torch
    from hyper_parallel.testing.op_parity import check_op
    torch.manual_seed(1)
    x, y = torch.randn(shapes[0]), torch.randn(shapes[1])
    for name, fn in [("torch.cat", lambda a, b: torch.cat([a, b])),
                     ("torch.concat", lambda a, b: torch.concat((a, b), dim=0)),
                     ("torch.concatenate", lambda a, b: torch.concatenate([a, b, a], 0)),
                     ("torch.cat", lambda a, b: torch.cat([a.t(), b.t()], dim=-1))]:
        report = check_op(name, fn, [x, y]).raise_if_failed()
        assert not report.rejected, (name, report.rejected)
    if shapes[0] == shapes[1]:
        for name, fn in [("torch.stack", lambda a, b: torch.stack([a, b])),
                         ("torch.stack", lambda a, b: torch.stack((a, b), dim=2)),
                         ("torch.cat", lambda a, b: torch.cat([a, b], 1))]:
            check_op(name, fn, [x, y]).raise_if_failed()
    check_op("torch.cat (DTensor + plain)", lambda a: torch.cat([a, y]), [x]).raise_if_failed()


@multi_rank(world_size=2, timeout=120)
def test_native_combos_and_shifted_triangles():
    import torch
    import hyper_parallel as hp
    from hyper_parallel import Partial, Replicate, Shard
    from hyper_parallel.platform.torch.dispatch import StrictRedistributionError, strict_dispatch
    mesh = hp.init_device_mesh("cpu", (2,))
    full = torch.arange(35.).reshape(5, 7)
    for pl in ([Shard(0)], [Shard(1)]):
        x = hp.distribute_tensor(full, mesh, pl)
        with strict_dispatch():  # tril/triu on a sharded matrix never communicates
            for k in (-2, 0, 3):
                assert x.tril(k).placements == tuple(pl)
                torch.testing.assert_close(x.tril(k).full_tensor(), full.tril(k))
                torch.testing.assert_close(torch.triu(x, k).full_tensor(), full.triu(k))
    x = hp.distribute_tensor(full, mesh, [Shard(0)])
    with strict_dispatch():
        assert torch.cat([x, x], dim=1).placements == (Shard(0),)
        assert torch.stack([x, x]).placements == (Shard(1),)
        assert x.repeat(1, 3).placements == (Shard(0),)
        assert torch.flip(x, (1,)).placements == (Shard(0),)
        with pytest.raises(StrictRedistributionError, match="torch.roll"):
            torch.roll(x, 1, 0)
    p = hp.DTensor.from_local(torch.ones(2, 2), mesh, [Partial()])
    r = hp.distribute_tensor(torch.ones(2, 2), mesh, [Replicate()])
    with strict_dispatch():
        assert torch.cat([p, r]).placements == (Partial(),)  # r made partial locally
        import torch.nn.functional as F
        assert F.pad(p, (1, 1)).placements == (Partial(),)
    torch.testing.assert_close(F.pad(p, (1, 1), value=1.0).full_tensor(), F.pad(torch.full((2, 2), 2.0), (1, 1),
                                                                                   value=1.0))


@multi_rank(world_size=4, timeout=300)
def test_concat_family_on_2d_mesh():
    import torch
    from hyper_parallel import Partial, Replicate, Shard
    from hyper_parallel.testing.op_parity import check_op
    torch.manual_seed(2)
    x, y = torch.randn(5, 6), torch.randn(5, 6)
    pls = [(Shard(0), Shard(1)), (Shard(1), Shard(1)), (Shard(0), Partial()), (Replicate(), Shard(0))]
    for name, fn in [("torch.tril", lambda t: torch.tril(t, 1)), ("Tensor.triu", lambda t: t.triu(-1)),
                     ("Tensor.repeat", lambda t: t.repeat(2, 1)),
                     ("torch.nn.functional.pad", lambda t: __import__("torch").nn.functional.pad(t, (1, 0)))]:
        report = check_op(name, fn, [x], mesh_shape=(2, 2), placements=[pls]).raise_if_failed()
        assert report.combos == 4 and not report.rejected, report
    check_op("torch.cat", lambda a, b: torch.cat([a, b], 1), [x, y], mesh_shape=(2, 2),
             placements=[pls, pls[:2]]).raise_if_failed()
