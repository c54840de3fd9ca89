# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""fully_shard on MindSpore cells, checked inside a MindSpore launch (2 ranks) against one process.

Every rank trains on its own batch; the one-process reference runs the same cell on every rank's batch and
averages the losses (what data parallelism computes). Forward losses, the gathered gradients of every
parameter and the parameters after AdamW steps must match.
"""
import numpy as np

from tests.st.mindspore.common import TOL, adamw_parity


def _net(seed=5):
    import mindspore as ms
    from mindspore import mint, nn

    class Net(nn.Cell):
        """Dense(6->6) (root) -> relu -> Dense(6->5) (uneven rows) -> relu -> Dense(5->1) (one row: an
        empty shard on rank 1)."""

        def __init__(self):
            super().__init__()
            self.l0 = nn.Dense(6, 6)
            self.l1 = nn.Dense(6, 5)
            self.l2 = nn.Dense(5, 1)

        def construct(self, x):
            return self.l2(mint.nn.functional.relu(self.l1(mint.nn.functional.relu(self.l0(x)))))

    ms.set_seed(seed)
    return Net()


def _batches(n_ranks, seed, rows=4):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((rows, 6)).astype(np.float32), rng.standard_normal((rows, 1)).astype(np.float32))
            for _ in range(n_ranks)]


def _loss_fn(net):
    return lambda x, y: ((net(x) - y) ** 2).mean()


def _ref_step(ref, batches):
    """Mean over the ranks' batches of the loss, its gradients (one process)."""
    import mindspore as ms
    params = ref.trainable_params()
    losses, grads = [], None
    for x, y in batches:
        loss, g = ms.value_and_grad(_loss_fn(ref), None, params)(ms.Tensor(x), ms.Tensor(y))
        losses.append(float(loss.asnumpy()))
        g = [t.asnumpy() for t in g]
        grads = g if grads is None else [a + b for a, b in zip(grads, g)]
    return losses, {p.name: g / len(batches) for p, g in zip(params, grads)}


def _full(cell, name, value):
    """The whole tensor of ``value`` (a shard of parameter ``name`` of ``cell``) as NumPy."""
    from hyper_parallel.optim._mindspore.optimizers import parameter_specs
    from hyper_parallel.platform.mindspore.dtensor import DTensor
    spec = parameter_specs(cell).get(name)
    return (DTensor(value, spec).full_tensor() if spec is not None else value).asnumpy()


#: how fully_shard parity loops (``common.adamw_parity``) run the reference and read shards
PARITY = {"full": _full, "ref_step": _ref_step, "loss_fn": _loss_fn}


def _sharded(mesh, **kw):
    import hyper_parallel as hp
    net = _net()
    hp.fully_shard(net.l1, mesh=mesh, **kw)
    hp.fully_shard(net.l2, mesh=mesh, **kw)
    hp.fully_shard(net, mesh=mesh, **kw)
    return net


def fsdp_parity_check(mesh):
    """Nested units (uneven and empty shards), 3 AdamW steps: losses, gradients, parameters vs one process."""
    me = mesh.get_coordinate()[0]
    ref, net = _net(), _sharded(mesh)
    assert type(net).__name__ == "FSDPNet" and tuple(net.l1.weight.shape) == ((3, 6) if me == 0 else (2, 6))
    assert tuple(net.l2.weight.shape) == ((1, 5) if me == 0 else (0, 5)), net.l2.weight.shape
    adamw_parity(ref, net, lambda step: _batches(2, 100 + step), me, "FSDP", weight_decay=0.1, **PARITY)
    stats = net.fsdp_stats()
    assert stats["all_gathers"] == 3 * 3 and stats["reduce_scatters"] == 3 * 3, stats  # 3 units x 3 steps
    # l1 and l2 reshard after forward (the root does not): their weights leave the tape, backward gathers again
    assert stats["freed_after_forward"] == 2 * 3 and stats["backward_all_gathers"] == 2 * 3, stats


def fsdp_accumulation_check(mesh):
    """No-sync microbatch + synced microbatch: the summed returned gradients equal the reference sum; with
    ``set_gradient_scaling_factor(0.5)`` they are halved; the first backward reduced nothing."""
    import mindspore as ms
    me = mesh.get_coordinate()[0]
    ref, net = _net(), _sharded(mesh)
    net.set_gradient_scaling_factor(0.5)
    micro = [_batches(2, 7), _batches(2, 8)]
    want = None
    for batches in micro:
        _, g = _ref_step(ref, batches)
        want = g if want is None else {k: want[k] + g[k] for k in g}
    params = net.trainable_params()
    total = None
    for i, batches in enumerate(micro):
        net.set_requires_gradient_sync(i == len(micro) - 1)
        x, y = (ms.Tensor(a) for a in batches[me])
        _, grads = ms.value_and_grad(_loss_fn(net), None, params)(x, y)
        if i == 0:
            assert all(not np.any(g.asnumpy()) for g in grads), "a backward without sync returns zero shard gradients"
            assert net.fsdp_stats()["reduce_scatters"] == 0, net.fsdp_stats()
        total = list(grads) if total is None else [a + b for a, b in zip(total, grads)]
    assert net.fsdp_stats() == {"all_gathers": 6, "backward_all_gathers": 4, "reduce_scatters": 3, "kept_local": 3,
                                "freed_after_forward": 4}, net.fsdp_stats()
    for p, g in zip(params, total):
        np.testing.assert_allclose(_full(net, p.name, g), 0.5 * want[p.name], err_msg=f"accumulated grad {p.name}",
                                   **TOL)


def fsdp_mixed_precision_check(mesh):
    """param_dtype float16 (the all-gather and compute), reduce_dtype and output_dtype float32: the shards
    and their gradients stay float32 and match the float32 reference to float16 accuracy."""
    import mindspore as ms
    from hyper_parallel.fsdp import MixedPrecisionPolicy
    me = mesh.get_coordinate()[0]
    ref = _net()
    net = _sharded(mesh, mp_policy=MixedPrecisionPolicy(param_dtype=ms.float16, reduce_dtype=ms.float32,
                                                        output_dtype=ms.float32))
    batches = _batches(2, 11)
    losses, want = _ref_step(ref, batches)
    x, y = (ms.Tensor(a) for a in batches[me])
    out = net(x)
    assert out.dtype == ms.float32, out.dtype
    params = net.trainable_params()
    loss, grads = ms.value_and_grad(_loss_fn(net), None, params)(x, y)
    np.testing.assert_allclose(float(loss.asnumpy()), losses[me], rtol=1e-2, atol=1e-2, err_msg="fp16 loss")
    for p, g in zip(params, grads):
        assert p.dtype == ms.float32 and g.dtype == ms.float32, (p.name, p.dtype, g.dtype)
        np.testing.assert_allclose(_full(net, p.name, g), want[p.name], rtol=2e-2, atol=2e-2,
                                   err_msg=f"fp16 grad {p.name}")


def fsdp_prefetch_unshard_check(mesh):
    """Explicit forward prefetch (same gradients, one gather per unit), unshard()/reshard(), errors."""
    import mindspore as ms
    import hyper_parallel as hp
    from hyper_parallel.fsdp import CPUOffloadPolicy
    me = mesh.get_coordinate()[0]
    ref, net = _net(), _sharded(mesh)
    net.set_modules_to_forward_prefetch([net.l1, net.l2])
    batches = _batches(2, 13)
    _check_grads(net, _grads(net, batches[me]), _ref_step(ref, batches)[1], "prefetched grad")
    assert net.fsdp_stats()["all_gathers"] == 3, net.fsdp_stats()
    net.l1.unshard()
    assert tuple(net.l1.weight.shape) == (5, 6)
    np.testing.assert_allclose(net.l1.weight.asnumpy(), ref.l1.weight.value().asnumpy(), **TOL)
    net.l1.reshard()
    assert isinstance(net.l1.weight, ms.Parameter) and net.l1.weight.shape[0] == (3 if me == 0 else 2)
    for bad, kind, text in (({"offload_policy": CPUOffloadPolicy()}, ValueError, "not supported on MindSpore"),
                            ({"reshard_after_forward": 3}, ValueError, "must be a divisor of the shard group size 2")):
        try:
            hp.fully_shard(_net(), mesh=mesh, **bad)
        except kind as exc:
            assert text in str(exc), exc
        else:
            raise AssertionError(f"fully_shard({bad}) must raise")
    try:
        hp.fully_shard(net, mesh=mesh)
    except ValueError as exc:
        assert "already fully sharded" in str(exc), exc
    else:
        raise AssertionError("a second fully_shard must raise")


def fsdp_recompute_check(mesh):
    """A unit wrapped with activation.checkpoint_wrapper (MindSpore recompute): its forward, all-gather
    included, runs again in backward; gradients still match one process."""
    from hyper_parallel.activation import checkpoint_wrapper
    me = mesh.get_coordinate()[0]
    ref, net = _net(), _sharded(mesh)
    checkpoint_wrapper(net.l1)
    batches = _batches(2, 17)
    _check_grads(net, _grads(net, batches[me]), _ref_step(ref, batches)[1], "recomputed grad")
    stats = net.fsdp_stats()
    assert stats["all_gathers"] == 4, stats  # l1 gathered again by its recomputation
    # recompute frees l1's saved tensors itself: only l2 leaves its weight to FSDP's saved-tensor hooks
    assert stats["freed_after_forward"] == 1 and stats["backward_all_gathers"] == 1, stats


def _grads(net, batch):
    import mindspore as ms
    x, y = (ms.Tensor(a) for a in batch)
    return ms.value_and_grad(_loss_fn(net), None, net.trainable_params())(x, y)[1]


def _check_grads(net, grads, want, what):
    """Every returned shard gradient, gathered, equals the one-process gradient ``want[name]``."""
    for p, g in zip(net.trainable_params(), grads):
        np.testing.assert_allclose(_full(net, p.name, g), want[p.name], err_msg=f"{what} {p.name}", **TOL)


def fsdp_last_backward_check(mesh):
    """``set_is_last_backward(False)`` then True over two microbatches: the first backward reduces nothing and
    returns zero shard gradients, the units stay gathered (the second forward all-gathers nothing and frees
    nothing), the second reduces the sum once (= one process's summed gradients); a third forward gathers
    again. Then ``reshard_after_forward=False``: nothing freed, nothing gathered in backward, same gradients."""
    me = mesh.get_coordinate()[0]
    ref, net = _net(), _sharded(mesh)
    micro = [_batches(2, 21), _batches(2, 22)]
    want = None
    for batches in micro:
        _, g = _ref_step(ref, batches)
        want = g if want is None else {k: want[k] + g[k] for k in g}
    net.set_is_last_backward(False)
    first = _grads(net, micro[0][me])
    assert all(not np.any(g.asnumpy()) for g in first), "a backward that is not the last returns zero gradients"
    assert net.fsdp_stats() == {"all_gathers": 3, "backward_all_gathers": 0, "reduce_scatters": 0, "kept_local": 3,
                                "freed_after_forward": 0}, net.fsdp_stats()
    net.set_is_last_backward(True)
    second = _grads(net, micro[1][me])
    assert net.fsdp_stats() == {"all_gathers": 3, "backward_all_gathers": 0, "reduce_scatters": 3, "kept_local": 3,
                                "freed_after_forward": 0}, net.fsdp_stats()
    for p, a, b in zip(net.trainable_params(), first, second):
        np.testing.assert_allclose(_full(net, p.name, a + b), want[p.name], err_msg=f"last-backward grad {p.name}",
                                   **TOL)
    _grads(net, micro[0][me])
    assert net.fsdp_stats()["all_gathers"] == 6 and net.fsdp_stats()["backward_all_gathers"] == 2, net.fsdp_stats()
    kept = _sharded(mesh, reshard_after_forward=False)
    _check_grads(kept, _grads(kept, micro[0][me]), _ref_step(ref, micro[0])[1], "kept grad")
    assert kept.fsdp_stats() == {"all_gathers": 3, "backward_all_gathers": 0, "reduce_scatters": 3, "kept_local": 0,
                                 "freed_after_forward": 0}, kept.fsdp_stats()


def fsdp_backward_prefetch_check(mesh):
    """Without prefetch each resharded unit gathers again when its backward first reads a parameter
    (l2, then l1: each right before its own reduction); ``net.set_modules_to_backward_prefetch([l2, l1])``
    gathers both in the root's pre-backward, before any reduction; gradients equal one process's."""
    events = []
    for prefetch in (False, True):
        ref, net = _net(), _sharded(mesh)
        names = {id(net.l1): "l1", id(net.l2): "l2", id(net): "net"}
        for cell in (net, net.l1, net.l2):
            unit = cell.__dict__["_hp_fsdp_state"].unit
            _trace(unit, names[id(cell)], events)
        if prefetch:
            net.set_modules_to_backward_prefetch([net.l2, net.l1])
        events.clear()
        batches = _batches(2, 23)
        _check_grads(net, _grads(net, batches[mesh.get_coordinate()[0]]), _ref_step(ref, batches)[1],
                     f"prefetch={prefetch}")
        expected = (["gather l2", "gather l1", "reduce l2", "reduce l1", "reduce net"] if prefetch else
                    ["gather l2", "reduce l2", "gather l1", "reduce l1", "reduce net"])
        assert events == expected, (prefetch, events)
    for bad, kind in ((net.l1, TypeError), ([_net()], ValueError)):
        try:
            net.set_modules_to_backward_prefetch(bad)
        except kind:
            continue
        raise AssertionError(f"set_modules_to_backward_prefetch({bad!r}) must raise {kind.__name__}")


def unsorted_mesh_check(_mesh):
    """A mesh over unsorted ranks, DeviceMesh("cpu", [1, 0]) (coordinate 0 is rank 1): the collectives along it
    follow the mesh order, not the sorted rank order (all-gather and its adjoint, all-to-all, reduce-scatter),
    and fully_shard on it matches one process (rank 1 holds the first rows)."""
    import mindspore as ms
    from mindspore.communication import get_rank
    from hyper_parallel import Partial, Replicate, Shard
    from hyper_parallel.core.device_mesh import DeviceMesh
    from hyper_parallel.platform.mindspore.dtensor import DTensor
    mesh = DeviceMesh("cpu", [1, 0], platform="mindspore")
    coord = 1 - get_rank()
    assert mesh.get_coordinate() == (coord,), mesh.get_coordinate()
    full = np.arange(24, dtype=np.float32).reshape(4, 6)
    x = DTensor.from_local(ms.Tensor(full[2 * coord:2 * coord + 2]), mesh, [Shard(0)])
    np.testing.assert_array_equal(x.full_tensor().asnumpy(), full)
    np.testing.assert_array_equal(x.redistribute(mesh, [Shard(1)]).to_local().asnumpy(),
                                  full[:, 3 * coord:3 * coord + 3])
    part = DTensor.from_local(ms.Tensor(full * (coord + 1) / 3), mesh, [Partial()])
    np.testing.assert_allclose(part.redistribute(mesh, [Shard(0)]).to_local().asnumpy(),
                               full[2 * coord:2 * coord + 2], rtol=1e-6)
    weight = ms.Tensor(full + 1)

    def fn(local):
        g = DTensor.from_local(local, mesh, [Shard(0)]).redistribute(mesh, [Replicate()])
        return (g.to_local() * weight).sum()

    grad = ms.grad(fn)(ms.Tensor(full[2 * coord:2 * coord + 2]))
    np.testing.assert_array_equal(grad.asnumpy(), (full + 1)[2 * coord:2 * coord + 2])
    ref, net = _net(), _sharded(mesh)
    assert tuple(net.l1.weight.shape) == ((3, 6) if coord == 0 else (2, 6)), net.l1.weight.shape
    batches = _batches(2, 29)
    _check_grads(net, _grads(net, batches[coord]), _ref_step(ref, batches)[1], "unsorted mesh grad")


def _trace(unit, name, events):
    """Record the unit's backward all-gathers and its reductions in ``events`` (instance-level wrappers)."""
    gather = unit.backward_gather

    def backward_gather():
        events.append(f"gather {name}")
        gather()

    unit.backward_gather = backward_gather
    for bucket in unit.buckets:
        reduce = bucket.reduce

        def traced(grad, flat_dtype, reduce=reduce):
            events.append(f"reduce {name}")
            return reduce(grad, flat_dtype)

        bucket.reduce = traced


def _twin_loss(twin, x, y):  # a def at module level: mindspore.jit parses it
    return ((twin(x) - y) ** 2).mean()


def fsdp_compiled_step_check(mesh):
    """``CompiledFSDPStep`` (``training.compile`` under FSDP): the graph over an unsharded twin (other initial
    values: ``gather`` overwrites them) gives one process's loss and, after the fused reduce-scatter, its
    gradients (uneven and empty shards); without gradient sync the per-unit path keeps the first
    micro-batch's gradients and reduces the sum once; a twin of another model is refused naming the parameter."""
    import mindspore as ms
    from hyper_parallel.fsdp._mindspore.compiled import CompiledFSDPStep
    me = mesh.get_coordinate()[0]
    ref, net = _net(), _sharded(mesh)
    step = CompiledFSDPStep(net, _net(seed=99), _twin_loss)
    assert step.fused and net.fsdp_stats()["all_gathers"] == 0
    micro = [_batches(2, 31), _batches(2, 32)]
    losses, want = _ref_step(ref, micro[0])
    step.gather()
    loss, full = step.value_and_grad(*(ms.Tensor(a) for a in micro[0][me]))
    np.testing.assert_allclose(float(loss.asnumpy()), losses[me], **TOL)
    shards = step.reduce(full)
    _check_grads(net, [shards[p.name] for p in net.trainable_params()], want, "compiled grad")
    # the loss rode in the reduce-scatter's table: every rank holds the mean of the ranks' losses
    np.testing.assert_allclose(float(step.mean_loss().asnumpy()[0]), float(np.mean(losses)), **TOL)
    # and every rank holds the squared norm of the whole reduced gradient (for clipping, no collective)
    np.testing.assert_allclose(float(step.reduced_grad_sq_norm().asnumpy()),
                               sum(float((g.astype(np.float64) ** 2).sum()) for g in want.values()), **TOL)
    squares = step.squared_norms()  # computed in the split graph, for clipping: the non-empty shards'
    assert set(squares) == {k for k, v in shards.items() if v.size}, sorted(squares)
    for name, sq in squares.items():
        np.testing.assert_allclose(sq, float((shards[name].asnumpy().astype(np.float64) ** 2).sum()),
                                   err_msg=f"squared norm {name}", **TOL)
    assert net.fsdp_stats()["all_gathers"] == 3 and net.fsdp_stats()["reduce_scatters"] == 3, net.fsdp_stats()
    want = {k: v + _ref_step(ref, micro[1])[1][k] for k, v in want.items()}
    total = None
    for i, batches in enumerate(micro):
        net.set_requires_gradient_sync(i == 1)
        assert not step.fused  # no sync, then a kept gradient: the per-unit path (_Bucket.reduce)
        _, full = step.value_and_grad(*(ms.Tensor(a) for a in batches[me]))
        g = step.reduce(full)
        total = g if total is None else {k: total[k] + g[k] for k in g}
    _check_grads(net, [total[p.name] for p in net.trainable_params()], want, "compiled accumulated grad")
    assert step.squared_norms() is None and step.mean_loss() is None and step.reduced_grad_sq_norm() is None
    assert step.fused  # the kept gradients were reduced: fused again
    try:
        CompiledFSDPStep(net, _sharded(mesh), _twin_loss)
    except ValueError as exc:
        assert "expected in the twin" in str(exc), exc
    else:
        raise AssertionError("CompiledFSDPStep accepted a sharded twin")


FSDP_CHECKS = {"fsdp nested units, 3 AdamW steps": fsdp_parity_check,
               "fsdp accumulation without sync, gradient scaling": fsdp_accumulation_check,
               "fsdp mixed precision fp16/fp32": fsdp_mixed_precision_check,
               "fsdp forward prefetch, unshard/reshard, errors": fsdp_prefetch_unshard_check,
               "fsdp under recompute": fsdp_recompute_check,
               "fsdp set_is_last_backward, reshard_after_forward=False": fsdp_last_backward_check,
               "fsdp backward prefetch order": fsdp_backward_prefetch_check,
               "mesh over unsorted ranks [1, 0]: collectives and fully_shard": unsorted_mesh_check,
               "fsdp compiled step (training.compile): jit over an unsharded twin": fsdp_compiled_step_check}


def run_fsdp_only():
    """Entry for running these checks alone (development): one launch of 2 ranks."""
    from tests.st.mindspore.common import run_only
    return run_only(FSDP_CHECKS)


def run_compiled_only():
    """Entry for the compiled-step check alone (development)."""
    from tests.st.mindspore.common import run_only
    return run_only({k: v for k, v in FSDP_CHECKS.items() if "compiled" in k})
