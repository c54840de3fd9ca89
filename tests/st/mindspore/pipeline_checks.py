# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Pipeline checks run inside MindSpore ranks (one launch): GPipe and 1F1B on ``nn.Cell`` stages over
the emulated point-to-point, each against the same model on one process over 2 steps with an odd
microbatch count and gradient accumulation (1F1B also with ``recompute_ahead``: every microbatch's backward
recomputed before its gradient's receive); plus the shared validator's and errors' behaviour."""
import numpy as np

from tests.st.mindspore.common import TOL, run_group


def _cells(seed=0):
    import mindspore as ms
    from mindspore import nn, ops
    ms.set_seed(seed)

    class Block(nn.Cell):
        """tanh(dense(x)); the dense weight used twice on stage 0."""

        def __init__(self, twice):
            super().__init__()
            self.dense = nn.Dense(6, 6)
            self.twice = twice

        def construct(self, x):
            h = ops.tanh(self.dense(x))
            return self.dense(h) if self.twice else h

    return [Block(True), Block(False)]


def _mse(out, target):
    return ((out - target) ** 2).mean()


def _check_ahead(stage, microbatches, rank):
    """With ``recompute_ahead`` the first stage built every microbatch's backward before its gradient arrived (the
    last stage receives no gradient)."""
    assert stage.recomputed_ahead == (microbatches if rank == 0 else 0), stage.recomputed_ahead


def _parity(name, m, recompute_ahead=False):
    import mindspore as ms
    from mindspore import ops
    import hyper_parallel as hp
    import hyper_parallel.pipeline as pp
    rank = hp.get_platform("mindspore").get_rank()
    cells = _cells()
    ref = _cells()
    for a, b in zip(ref, cells):
        for p, q in zip(a.trainable_params(), b.trainable_params()):
            p.set_data(q.data.copy())
    stage = pp.PipelineStage(cells[rank], rank, 2, recompute_ahead=recompute_ahead)
    sched = pp.get_schedule_class(name)(stage, m, loss_fn=_mse)
    weights = [p for c in ref for p in c.trainable_params()]
    ref_sum = None
    rng = np.random.default_rng(7)
    for _ in range(2):  # two accumulated steps
        x = ms.Tensor(rng.standard_normal((2 * m, 6)).astype(np.float32))
        y = ms.Tensor(rng.standard_normal((2 * m, 6)).astype(np.float32))
        losses = []
        out = sched.step(x if rank == 0 else None, target=y if rank == 1 else None, losses=losses)

        def whole(a, t):
            return _mse(ref[1](ref[0](a)), t)

        loss, grads = ms.value_and_grad(whole, grad_position=None, weights=weights)(x, y)
        ref_sum = grads if ref_sum is None else tuple(g + h for g, h in zip(ref_sum, grads))
        if rank == 1:
            np.testing.assert_allclose(sum(v.asnumpy() for v in losses) / m, loss.asnumpy(), **TOL)
            np.testing.assert_allclose(out.asnumpy(), ref[1](ref[0](x)).asnumpy(), **TOL)
    mine = ref_sum[:2] if rank == 0 else ref_sum[2:]
    for got, want in zip(stage.grads(), mine):
        np.testing.assert_allclose(got.asnumpy(), want.asnumpy(), **TOL)
    _check_ahead(stage, 2 * m if recompute_ahead else 0, rank)
    del ops


def _errors():
    import mindspore as ms
    import hyper_parallel as hp
    import hyper_parallel.pipeline as pp
    rank = hp.get_platform("mindspore").get_rank()
    cells = _cells()
    stage = pp.PipelineStage(cells[rank], rank, 2)
    sched = pp.Schedule1F1B(stage, 3, loss_fn=_mse)
    x = ms.Tensor(np.ones((4, 6), np.float32))
    try:
        sched.step(x if rank == 0 else None, target=x if rank == 1 else None)
    except ValueError as exc:
        assert "rank 0 rejected stage 0's input batch: batch size 4 is not divisible by n_microbatches=3" in str(exc)
    else:
        raise AssertionError("no error for a batch that does not split")
    try:
        pp.get_schedule_class("InterleavedZeroBubble")([stage], 2, loss_fn=_mse, stages_per_rank=1).step(
            x if rank == 0 else None, target=x if rank == 1 else None)
    except ValueError as exc:
        assert "the I/W split of the zero-bubble schedules needs torch" in str(exc)
    else:
        raise AssertionError("no error for a split-backward schedule on MindSpore")


PIPELINE_CHECKS = {"pipeline GPipe m=3": lambda: _parity("GPipe", 3), "pipeline 1F1B m=3": lambda: _parity("1F1B", 3),
                   "pipeline 1F1B recompute ahead m=3": lambda: _parity("1F1B", 3, recompute_ahead=True),
                   "pipeline errors": _errors}


def run_pipeline_suite():
    """GPipe and 1F1B parity (m = 3), rejected inputs; one launch."""
    import hyper_parallel as hp
    hp.init_device_mesh("cpu", (2,), platform="mindspore")
    results = {}
    run_group(results, PIPELINE_CHECKS)
    return {"results": results}
