# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""2-D meshes on 4 MindSpore ranks (one ``msrun`` launch): HSDP (2, 2) and TP x FSDP on a named (dp, tp)
mesh, each for 3 AdamW steps against one process on the data-parallel ranks' batches."""
import numpy as np

from tests.st.mindspore.common import adamw_parity, record
from tests.st.mindspore.fsdp_checks import PARITY, _batches, _net


def hsdp_check():
    """HSDP on mesh (replicate=2, shard=2): nested units, uneven/empty shards, 3 AdamW steps vs one process
    on the 4 ranks' batches (the gradient is reduce-scattered within a shard pair and all-reduced across)."""
    import hyper_parallel as hp
    from hyper_parallel import Replicate, Shard
    from hyper_parallel.optim._mindspore.optimizers import parameter_specs
    mesh = hp.init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"), platform="mindspore")
    from mindspore.communication import get_rank
    me = get_rank()
    ref, net = _net(), _net()
    for cell in (net.l1, net.l2, net):
        hp.fully_shard(cell, mesh=mesh)
    assert parameter_specs(net)["l1.weight"].placements == (Replicate(), Shard(0))
    adamw_parity(ref, net, lambda step: _batches(4, 200 + step), me, "HSDP", **PARITY)


def _mlp(seed=9):
    import mindspore as ms
    from mindspore import mint, nn

    class MLP(nn.Cell):
        """Dense(6->8) -> relu -> Dense(8->6) -> Dense(6->1) (the last one plain FSDP)."""

        def __init__(self):
            super().__init__()
            self.fc1 = nn.Dense(6, 8)
            self.fc2 = nn.Dense(8, 6)
            self.out = nn.Dense(6, 1)

        def construct(self, x):
            return self.out(self.fc2(mint.nn.functional.relu(self.fc1(x))))

    ms.set_seed(seed)
    return MLP()


def tp_fsdp_check():
    """TP (Colwise fc1, Rowwise fc2) on mesh['tp'] and fully_shard on mesh['dp'] of a named (dp=2, tp=2) mesh:
    composed layouts, 3 AdamW steps: loss, every gradient and parameter vs one process on the dp batches."""
    import hyper_parallel as hp
    from hyper_parallel import Shard
    from hyper_parallel.optim._mindspore.optimizers import parameter_specs
    from hyper_parallel.tp import ColwiseParallel, RowwiseParallel, parallelize_module
    mesh = hp.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"), platform="mindspore")
    dp = mesh.get_coordinate()[0]
    ref, net = _mlp(), _mlp()
    parallelize_module(net, mesh["tp"], {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
    hp.fully_shard(net, mesh=mesh["dp"])
    specs = parameter_specs(net)
    assert specs["fc1.weight"].placements == (Shard(0), Shard(0)), specs["fc1.weight"]  # (tp, dp) of dim 0
    assert specs["fc2.weight"].placements == (Shard(0), Shard(1)), specs["fc2.weight"]  # (dp: dim 0, tp: dim 1)
    assert tuple(net.fc1.weight.shape) == (2, 6) and tuple(net.fc2.weight.shape) == (3, 4), net.fc2.weight.shape
    adamw_parity(ref, net, lambda step: _batches(2, 300 + step), dp, "TP x FSDP", **PARITY)


def all_to_all_4ranks_check():
    """From 3 ranks on the emulated all-to-all is pairwise (native bytes): S(0) -> S(1) on 4 ranks (uneven,
    an empty chunk) forward and backward vs the full tensor, and the uneven all_to_all_single with empty
    splits and its adjoint."""
    import mindspore as ms
    import hyper_parallel as hp
    from hyper_parallel import Shard
    from hyper_parallel.core.spec import DTensorSpec
    from hyper_parallel.platform import get_platform
    from hyper_parallel.platform.mindspore.dtensor import DTensor
    from tests.st.mindspore.checks import _local_of
    mesh = hp.init_device_mesh("cpu", (4,), platform="mindspore")
    coord = mesh.get_coordinate()
    me = coord[0]
    full = ms.Tensor(np.arange(5 * 7, dtype=np.float32).reshape(5, 7))
    weight = ms.Tensor(np.random.default_rng(2).standard_normal((5, 7)).astype(np.float32))
    src, dst = DTensorSpec(mesh, (Shard(0),), (5, 7)), DTensorSpec(mesh, (Shard(1),), (5, 7))

    def loss(local):
        moved = DTensor(local, src).redistribute(mesh, [Shard(1)])
        return (moved.to_local() * _local_of(weight, dst, coord)).sum(), moved.to_local()

    (_, moved), grad = ms.value_and_grad(loss, 0, has_aux=True)(_local_of(full, src, coord))
    np.testing.assert_array_equal(moved.asnumpy(), _local_of(full, dst, coord).asnumpy())
    np.testing.assert_allclose(grad.asnumpy(), _local_of(weight, src, coord).asnumpy(), rtol=1e-6)
    plat = get_platform("mindspore")
    group = mesh.get_group(0)
    sends = [[(i * 4 + j) % 3 for j in range(4)] for i in range(4)]  # rank i sends sends[i][j] rows to j
    rows = sum(sends[me])
    x = ms.Tensor(np.full((rows, 2), float(me), np.float32) + np.arange(rows, dtype=np.float32)[:, None])
    recv = [sends[j][me] for j in range(4)]
    out, g = ms.value_and_grad(lambda t: (plat.all_to_all_single(t, group, recv, sends[me]) ** 2).sum() / 2, 0)(x)
    got = plat.all_to_all_single(x, group, recv, sends[me]).asnumpy()
    want = []
    for j in range(4):
        start = sum(sends[j][:me])
        want += [[float(j) + start + r] * 2 for r in range(sends[j][me])]
    np.testing.assert_array_equal(got, np.asarray(want, np.float32).reshape(-1, 2))
    np.testing.assert_allclose(g.asnumpy(), x.asnumpy(), rtol=1e-6)  # d/dx of sum(a2a(x)^2)/2 is x
    assert float(out.asnumpy()) >= 0.0


def fsdp_reshard_to_2_of_4_check():
    """fully_shard over 4 ranks (1-D; the 1-row layer leaves empty shards on ranks 1-3) with
    ``reshard_after_forward=2``: after forward each resharding unit keeps its 1/2 of the gathered buffer
    (2 x its flat shard) and backward gathers within the 2-rank group; gradients vs one process on the 4 batches."""
    import mindspore as ms
    import hyper_parallel as hp
    from tests.st.mindspore.fsdp_checks import _check_grads, _ref_step
    mesh = hp.init_device_mesh("cpu", (4,), platform="mindspore")
    me = mesh.get_coordinate()[0]
    ref, net = _net(), _net()
    for cell in (net.l1, net.l2, net):
        hp.fully_shard(cell, mesh=mesh, reshard_after_forward=2)
    assert tuple(net.l2.weight.shape) == ((1, 5) if me == 0 else (0, 5)), net.l2.weight.shape
    unit = net.l1.__dict__["_hp_fsdp_state"].unit
    kept = {}

    def loss_fn(x, y):
        out = ((net(x) - y) ** 2).mean()
        kept["l1"] = [(tuple(b.pf_shard.shape), b.layout.total) for b in unit.buckets]
        return out

    batches = _batches(4, 41)
    x, y = (ms.Tensor(a) for a in batches[me])
    _, grads = ms.value_and_grad(loss_fn, None, net.trainable_params())(x, y)
    _check_grads(net, grads, _ref_step(ref, batches)[1], "reshard_after_forward=2 grad")
    assert kept["l1"] == [((4 * total // 2,), total) for _, total in kept["l1"]], kept
    assert all(b.pf_shard is None for b in unit.buckets), "backward drops the post-forward shard"
    stats = net.fsdp_stats()
    assert stats["freed_after_forward"] == 2 and stats["backward_all_gathers"] == 2, stats


MESH2D_CHECKS = {"all-to-all on 4 ranks (pairwise emulation)": all_to_all_4ranks_check,
                 "hsdp (2, 2), 3 AdamW steps": hsdp_check, "tp x fsdp on (dp=2, tp=2), 3 AdamW steps": tp_fsdp_check,
                 "fsdp on 4 ranks, reshard_after_forward=2": fsdp_reshard_to_2_of_4_check}


def run_mesh2d_suite():
    """Every 2-D check (4 ranks); a failing check stops the suite (the ranks' collectives may be out of step)."""
    import time
    import hyper_parallel as hp
    hp.init_process_group(platform="mindspore")
    results, seconds = {}, {}
    for name, fn in MESH2D_CHECKS.items():
        start = time.perf_counter()
        record(results, name, fn)
        seconds[name] = time.perf_counter() - start
        if results[name] != "ok":
            break
    return {"results": results, "seconds": seconds}


def launch_smoke():
    """Initialise, all-reduce the ranks, return (rank, world size, sum) and the launcher's variables seen."""
    import os
    import mindspore as ms
    import hyper_parallel as hp
    from hyper_parallel.platform import get_platform
    hp.init_process_group(platform="mindspore")
    plat = get_platform("mindspore")
    me = plat.get_rank()
    total = plat.all_reduce(ms.Tensor([float(me + 1)]), "sum", plat.new_group(range(plat.get_world_size())))
    return {"rank": me, "world": plat.get_world_size(), "sum": float(total.asnumpy()[0]),
            "rank_id_env": os.environ.get("RANK_ID"), "ms_role": os.environ.get("MS_ROLE")}
