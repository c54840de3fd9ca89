# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ST parity: views and shape ops on 2 ranks (and a few on a 2x2 mesh), forward and backward."""
import pytest

from hyper_parallel.testing import multi_rank


def _cases_2d(shape):
    """(registry name, fn) for ops on a 2-D input of ``shape`` = (a, b)."""
    import torch
    a, b = shape
    return [
        ("Tensor.view", lambda x: x.view(a * b)),
        ("Tensor.view", lambda x: x.view(-1, b)),
        ("Tensor.view", lambda x: x.view((a, 1, b))),
        ("Tensor.reshape", lambda x: x.reshape(b, a)),
        ("Tensor.reshape", lambda x: x.reshape(1, a * b)),
        ("torch.reshape", lambda x: torch.reshape(x, (a * b, 1))),
        ("Tensor.view_as", lambda x: x.view_as(torch.empty(a * b))),
        ("Tensor.reshape_as", lambda x: x.t().reshape_as(torch.empty(a, b))),
        ("torch.flatten", torch.flatten),
        ("Tensor.flatten", lambda x: x.unsqueeze(0).flatten(1)),
        ("torch.unflatten", lambda x: torch.unflatten(x.reshape(a * b), 0, (a, b))),
        ("Tensor.unflatten", lambda x: x.unflatten(1, (1, b, 1))),
        ("torch.squeeze", lambda x: torch.squeeze(x.unsqueeze(1))),
        ("Tensor.squeeze", lambda x: x.unsqueeze(-1).squeeze(-1)),
        ("Tensor.squeeze", lambda x: x.reshape(a, 1, b, 1).squeeze((1, 3))),
        ("torch.unsqueeze", lambda x: torch.unsqueeze(x, 1)),
        ("Tensor.unsqueeze", lambda x: x.unsqueeze(-1)),
        ("Tensor.expand", lambda x: x.unsqueeze(0).expand(3, a, b)),
        ("Tensor.expand", lambda x: x[:, :1].expand(-1, 4)),
        ("Tensor.expand_as", lambda x: x.unsqueeze(1).expand_as(torch.empty(a, 2, b))),
        ("torch.broadcast_to", lambda x: torch.broadcast_to(x, (2, a, b))),
        ("torch.permute", lambda x: torch.permute(x, (1, 0))),
        ("Tensor.permute", lambda x: x.unsqueeze(0).permute(2, 0, 1)),
        ("torch.transpose", lambda x: torch.transpose(x, 0, 1)),
        ("Tensor.transpose", lambda x: x.transpose(-1, -2)),
        ("torch.swapaxes", lambda x: torch.swapaxes(x, 0, 1)),
        ("torch.swapdims", lambda x: torch.swapdims(x, 1, 0)),
        ("torch.t", torch.t),
        ("Tensor.t", lambda x: x.t()),
        ("Tensor.T", lambda x: x.T),
        ("Tensor.mT", lambda x: x.mT),
        ("torch.movedim", lambda x: torch.movedim(x, 0, 1)),
        ("Tensor.movedim", lambda x: x.unsqueeze(0).movedim((0, 1), (2, 0))),
        ("torch.moveaxis", lambda x: torch.moveaxis(x, 1, 0)),
        ("torch.narrow", lambda x: torch.narrow(x, 0, 1, a - 1)),
        ("Tensor.narrow", lambda x: x.narrow(1, -2, 2)),
        ("torch.narrow", lambda x: torch.narrow(x, 1, torch.tensor(b - 2), 2)),  # a 0-d tensor start
        ("torch.select", lambda x: torch.select(x, 0, a - 1)),
        ("Tensor.select", lambda x: x.select(1, -1)),
        ("torch.split", lambda x: torch.split(x, 2, dim=0)),
        ("Tensor.split", lambda x: x.split([1, b - 1], 1)),
        ("Tensor.split_with_sizes", lambda x: x.split_with_sizes([a - 1, 1])),
        ("torch.chunk", lambda x: torch.chunk(x, 2, 1)),
        ("Tensor.chunk", lambda x: x.chunk(3)),
        ("torch.unbind", lambda x: torch.unbind(x, 1)),
        ("Tensor.unbind", lambda x: x.unbind()),
    ]


def _getitem_cases(shape):
    import torch
    a, b = shape
    long_idx = torch.tensor([b - 1, 0, 1 % b])
    row_idx = torch.tensor([a - 1, 0])
    mask_rows = torch.arange(a) % 2 == 0
    mask_all = torch.arange(a * b).reshape(a, b) % 3 == 0
    return [
        lambda x: x[a // 2],
        lambda x: x[-1, 1:],
        lambda x: x[:, 0],
        lambda x: x[None, ..., None],
        lambda x: x[1:a:2],
        lambda x: x[..., :2],
        lambda x: x[:, long_idx],
        lambda x: x[row_idx],
        lambda x: x[mask_rows],
        lambda x: x[:, mask_all[0]],
        lambda x: x[mask_all],
        lambda x: x[[0, a - 1]],
        lambda x: x[:, [True] * (b - 1) + [False]],
        lambda x: x[row_idx[:1], long_idx[1:2]],
        lambda x: x[row_idx.reshape(2, 1)],
    ]


@pytest.mark.parametrize("shape", [(4, 6), (5, 3), (1, 4)])
@multi_rank(world_size=2, timeout=600)
def test_view_and_shape_ops(shape):
    import torch
    from hyper_parallel.testing.op_parity import check_op
    torch.manual_seed(0)
    x = torch.randn(shape)
    free = ("torch.permute", "Tensor.permute", "torch.transpose", "Tensor.transpose", "torch.swapaxes",
            "torch.swapdims", "torch.t", "Tensor.t", "Tensor.T", "Tensor.mT", "torch.movedim", "Tensor.movedim",
            "torch.moveaxis", "torch.unsqueeze", "Tensor.unsqueeze")
    for name, fn in _cases_2d(shape):
        report = check_op(name, fn, [x]).raise_if_failed()
        assert not report.rejected, (name, report.rejected)
        if name in free:  # permutations and unsqueeze never communicate, whatever the placement
            assert report.native == report.combos == 4, (name, report)
    for k, fn in enumerate(_getitem_cases(shape)):
        report = check_op(f"Tensor.__getitem__ case {k}", fn, [x]).raise_if_failed()
        assert not report.rejected, (k, report.rejected)


@multi_rank(world_size=2, timeout=300)
def test_views_3d_and_index_tensors_as_dtensors():
    import torch
    from hyper_parallel.testing.op_parity import check_op
    torch.manual_seed(1)
    x = torch.randn(4, 3, 6)
    cases = [("Tensor.view", lambda t: t.view(4, 18)), ("Tensor.view", lambda t: t.view(2, 2, 3, 2, 3)),
             ("Tensor.reshape", lambda t: t.reshape(12, 6)), ("torch.flatten", lambda t: torch.flatten(t, 0, 1)),
             ("Tensor.permute", lambda t: t.permute(2, 0, 1)), ("Tensor.mT", lambda t: t.mT),
             ("Tensor.__getitem__", lambda t: t[..., 1:5:2]), ("Tensor.__getitem__", lambda t: t[:, 0, None]),
             ("Tensor.expand", lambda t: t[:, :1, :].expand(4, 5, 6)), ("torch.unbind", lambda t: torch.unbind(t, 2))]
    for name, fn in cases:
        check_op(name, fn, [x]).raise_if_failed()
    idx = torch.tensor([2, 0])
    mask = torch.tensor([True, False, True, True])
    check_op("Tensor.__getitem__ (index DTensor)", lambda t, i: t[:, i], [x[:, :, 0], idx]).raise_if_failed()
    check_op("Tensor.__getitem__ (mask DTensor)", lambda t, m: t[m], [x, mask]).raise_if_failed()


@multi_rank(world_size=2, timeout=120)
def test_view_placements_native_where_free_and_replicated_where_not():
    import torch
    import hyper_parallel as hp
    from hyper_parallel import Replicate, Shard
    from hyper_parallel.platform.torch.dispatch import StrictRedistributionError, strict_dispatch
    mesh = hp.init_device_mesh("cpu", (2,))
    x = hp.distribute_tensor(torch.arange(24.).reshape(4, 6), mesh, [Shard(0)])
    with strict_dispatch():
        assert x.t().placements == (Shard(1),)
        assert x.T.placements == (Shard(1),)
        assert x.transpose(0, 1).shape == (6, 4)
        assert x.view(24).placements == (Shard(0),)
        assert x.view(2, 2, 6).placements == (Shard(0),)
        assert x[:, 1:].placements == (Shard(0),)
        assert x.unsqueeze(0).placements == (Shard(1),)
        assert [c.placements for c in x.split(3, dim=1)] == [(Shard(0),), (Shard(0),)]
        assert x.view(6, 4).placements == (Shard(0),)  # rows 0-1 of 4 are rows 0-2 of 6: still a shard
        with pytest.raises(StrictRedistributionError, match="Tensor.view would redistribute input 0"):
            hp.distribute_tensor(torch.ones(4, 6), mesh, [Shard(1)]).view(24)  # inner dim of a merged group
        with pytest.raises(StrictRedistributionError, match="Tensor.narrow"):
            x.narrow(0, 1, 2)
    y = hp.distribute_tensor(torch.arange(15.).reshape(5, 3), mesh, [Shard(0)])
    flat = y.view(15)  # uneven: 3 + 2 rows is not the 8 + 7 split of 15 elements -> replicated, still right
    assert flat.placements == (Replicate(),)
    torch.testing.assert_close(flat.full_tensor(), torch.arange(15.))


@multi_rank(world_size=4, timeout=300)
def test_views_on_2d_mesh():
    import torch
    from hyper_parallel import Partial, Replicate, Shard
    from hyper_parallel.testing.op_parity import check_op
    torch.manual_seed(2)
    x = torch.randn(4, 6)
    pls = [[(Shard(0), Shard(1)), (Shard(0), Shard(0)), (Shard(1), Partial()), (Replicate(), Shard(0))]]
    for name, fn in [("Tensor.view", lambda t: t.view(2, 2, 6)), ("Tensor.reshape", lambda t: t.reshape(24)),
                     ("Tensor.t", lambda t: t.t()), ("Tensor.__getitem__", lambda t: t[1:, None]),
                     ("torch.chunk", lambda t: torch.chunk(t, 3, 1)), ("Tensor.expand", lambda t: t.expand(3, 4, 6))]:
        report = check_op(name, fn, [x], mesh_shape=(2, 2), placements=pls).raise_if_failed()
        assert report.combos == 4 and not report.rejected, report
    v_pls = [(Replicate(), Replicate()), (Shard(0), Partial())]
    report = check_op("Tensor.__setitem__", _set((slice(None), slice(1, 6, 2))), [x, torch.randn(4, 3)],
                      mesh_shape=(2, 2), placements=[pls[0] + [(Shard(1), Shard(1))], v_pls]).raise_if_failed()
    assert report.combos == 10 and not report.rejected, report


def _set(index):
    """``t.clone()[index] = v`` as a function of (t, v)."""
    def fn(t, v):
        y = t.clone()
        y[index] = v
        return y
    return fn


@pytest.mark.parametrize("shape", [(4, 6), (5, 3)])
@multi_rank(world_size=2, timeout=600)
def test_setitem(shape):
    import torch
    from hyper_parallel.testing.op_parity import check_op
    torch.manual_seed(3)
    a, b = shape
    x = torch.randn(shape)
    cases = [((slice(None), slice(1, 3)), torch.randn(a, 2)), (1, torch.randn(b)), ((Ellipsis, -1), 0.5),
             ((slice(None), slice(None, None, 2)), torch.randn(a, (b + 1) // 2)), ((slice(1, None), 0), 2.0),
             ((slice(None), slice(0, 2)), torch.randn(2)), (-1, torch.randn(1)), (slice(None), torch.randn(a, b))]
    for index, value in cases:
        if isinstance(value, float):
            report = check_op("Tensor.__setitem__", lambda t, i=index, v=value: _set(i)(t, v), [x])
        else:
            report = check_op("Tensor.__setitem__", _set(index), [x, value])
        assert not report.raise_if_failed().rejected, (index, report.rejected)
    mask = torch.arange(a) % 2 == 0
    for index in (mask, [0, a - 1]):  # index tensors/lists on a sharded dim cannot be written in place
        report = check_op("Tensor.__setitem__", lambda t, i=index: _set(i)(t, 0.0), [x]).raise_if_failed()
        assert len(report.rejected) == 1 and "addresses with a tensor or list" in report.rejected[0], report
    col_mask = torch.arange(b) % 2 == 1
    report = check_op("Tensor.__setitem__", lambda t: _set((slice(None), col_mask))(t, 1.0), [x]).raise_if_failed()
    assert [r.split(":")[0] for r in report.rejected] == ["Tensor.__setitem__ with in0=['S(1)']"], report
