# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""What the MindSpore check files share (they run inside MindSpore ranks, see ``checks.py``): recording a
check's outcome, the 2-rank mesh, running a group of checks, the AdamW parity loop against one process and
the small MLP of the TP / optimizer / checkpoint checks."""
import time
import traceback

import numpy as np

#: float32 tolerance of the parity checks
TOL = dict(rtol=2e-5, atol=2e-5)


def record(results, name, fn):
    """Run ``fn()``; ``results[name]`` is ``"ok"`` or ``"FAIL "`` + the traceback (asserted on by pytest)."""
    try:
        fn()
        results[name] = "ok"
    except Exception:  # pylint: disable=broad-except  # every failure is returned and asserted on by pytest
        results[name] = "FAIL " + traceback.format_exc()


def setup_mesh():
    """The 1-D MindSpore mesh over both ranks (initialises the process group), seed 0."""
    import mindspore as ms
    import hyper_parallel as hp
    mesh = hp.init_device_mesh("cpu", (2,), platform="mindspore")
    ms.set_seed(0)
    return mesh


def run_group(results, checks, *args, stop_on_failure=False):
    """Record every ``checks[name](*args)`` in ``results``; returns the seconds the group took. With
    ``stop_on_failure`` the first failing check ends the group (the ranks' collectives may be out of step)."""
    start = time.perf_counter()
    for name, fn in checks.items():
        record(results, name, lambda fn=fn: fn(*args))
        if stop_on_failure and results[name] != "ok":
            break
    return time.perf_counter() - start


def run_only(checks):
    """A development entry: ``checks`` alone in one launch of 2 ranks, stopping at the first failure."""
    results = {}
    run_group(results, checks, setup_mesh(), stop_on_failure=True)
    return {"results": results}


def adamw_parity(ref, net, batches_of_step, me, what, *, steps=3, full, ref_step, loss_fn, **adamw):
    """``steps`` AdamW steps of the distributed ``net`` on this rank's batch (index ``me``) against ``ref`` on one
    process over every rank's batch: each step's loss, every gathered gradient, and the parameters at the end.
    ``batches_of_step(step)`` gives every rank's ``(x, y)``; ``ref_step(ref, batches)`` the reference losses and
    averaged gradients by parameter name; ``full(net, name, value)`` the whole tensor of a shard."""
    import mindspore as ms
    from hyper_parallel.optim._mindspore.optimizers import AdamW
    opts = {"ref": AdamW(ref.trainable_params(), lr=0.05, **adamw), "net": AdamW(net.trainable_params(), lr=0.05,
                                                                                 **adamw)}
    for step in range(steps):
        batches = batches_of_step(step)
        losses, want = ref_step(ref, batches)
        params = net.trainable_params()
        loss, grads = ms.value_and_grad(loss_fn(net), None, params)(*(ms.Tensor(a) for a in batches[me]))
        np.testing.assert_allclose(float(loss.asnumpy()), losses[me], err_msg=f"step {step} loss", **TOL)
        for p, g in zip(params, grads):
            assert tuple(g.shape) == tuple(p.shape), (p.name, g.shape, p.shape)
            np.testing.assert_allclose(full(net, p.name, g), want[p.name], err_msg=f"step {step} grad {p.name}",
                                       **TOL)
        opts["net"].step(grads)
        opts["ref"].step([ms.Tensor(want[p.name]) for p in ref.trainable_params()])
    for p, q in zip(ref.trainable_params(), net.trainable_params()):
        np.testing.assert_allclose(full(net, q.name, q.value()), p.value().asnumpy(),
                                   err_msg=f"{p.name} after {steps} {what} AdamW steps", **TOL)


def mlp(seed=None):
    """``Dense(8->16) -> ReLU -> Dense(16->8)`` named ``fc1``/``act``/``fc2`` (the torch module of the
    checkpoint test has the same names); ``seed`` seeds MindSpore first."""
    import mindspore as ms
    from mindspore import nn

    class MLP(nn.Cell):
        """Dense(8->16) -> ReLU -> Dense(16->8)."""

        def __init__(self):
            super().__init__()
            self.fc1 = nn.Dense(8, 16)
            self.act = nn.ReLU()
            self.fc2 = nn.Dense(16, 8)

        def construct(self, x):
            return self.fc2(self.act(self.fc1(x)))

    if seed is not None:
        ms.set_seed(seed)
    return MLP()


class LaunchOnce:
    """The ranks' results of ONE launch of ``target`` (``"module:function"``) on ``world_size`` MindSpore ranks,
    shared by the tests of a module: launched at the first :meth:`check` (after ``before()``, e.g. warming a
    data cache), each check then reads its name's outcome on every rank; a failed launch fails every check
    with the launch's error."""

    def __init__(self, target, world_size=2, timeout=600, before=None):
        self.target, self.world_size, self.timeout, self.before = target, world_size, timeout, before
        self._ranks = None
        self._error = None

    def ranks(self):
        """Every rank's result dict (launching on the first call)."""
        from hyper_parallel.testing.mindspore_launch import MindSporeLaunchError, launch
        if self._ranks is None and self._error is None:
            if self.before is not None:
                self.before()
            try:
                self._ranks = launch(self.target, world_size=self.world_size, timeout=self.timeout)
            except MindSporeLaunchError as exc:
                self._error = str(exc)
        if self._error is not None:
            raise AssertionError(f"the MindSpore launch failed:\n{self._error}")
        return self._ranks

    def check(self, name):
        """Assert that the check ``name`` passed on every rank (its traceback otherwise)."""
        for rank, res in enumerate(self.ranks()):
            assert res["results"].get(name) == "ok", f"rank {rank}: {name}: {res['results'].get(name, 'not run')}"
