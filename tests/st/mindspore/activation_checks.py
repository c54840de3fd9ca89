# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Checks run inside a MindSpore launch: ``hyper_parallel.activation`` on ``nn.Cell`` (PyNative).

Full recompute (``mindspore.recompute`` through ``checkpoint``, ``checkpoint_wrapper`` and the config
block) and swap to disk (``saved_tensors_hooks``) give gradients equal to no checkpointing; the swap
files are gone after backward and prefetches follow the backward order; what MindSpore cannot do
raises ``ActivationBackendError`` with the reason.
"""
import os
import tempfile

import numpy as np


def _net(functional=False):
    import mindspore as ms
    from mindspore import nn, ops

    class Block(nn.Cell):
        """Dense + tanh + Dense (saves a few 16 KiB activations)."""

        def __init__(self):
            super().__init__()
            self.a = nn.Dense(64, 128)
            self.b = nn.Dense(128, 64)

        def construct(self, x):
            return x + self.b(ops.tanh(self.a(x)))

    class Net(nn.Cell):
        """Three blocks in a CellList, then a sum."""

        def __init__(self):
            super().__init__()
            self.layers = nn.CellList([Block() for _ in range(3)])

        def construct(self, x):
            import hyper_parallel.activation as act
            for layer in self.layers:
                x = act.checkpoint(layer, x) if functional else layer(x)
            return (x * x).mean()

    ms.set_seed(0)
    return Net()


def _grads(net, x):
    import mindspore as ms
    loss, grads = ms.value_and_grad(lambda v: net(v), None, net.trainable_params())(x)
    return float(loss.asnumpy()), [g.asnumpy() for g in grads]


def _same(got, want, what):
    assert got[0] == want[0], f"{what}: loss {got[0]} vs {want[0]}"
    for i, (a, b) in enumerate(zip(got[1], want[1])):
        assert np.array_equal(a, b), f"{what}: gradient {i} differs by {np.abs(a - b).max()}"


def activation_check(mesh):  # pylint: disable=unused-argument
    """Full recompute and disk swap bit-identical to no checkpointing; clear errors for the rest."""
    import mindspore as ms
    import hyper_parallel.activation as act
    from hyper_parallel.activation._mindspore import ActivationBackendError
    x = ms.Tensor(np.random.default_rng(1).standard_normal((64, 64)).astype(np.float32))
    ref = _net()
    want = _grads(ref, x)
    net = _net()
    plan = act.apply_activation_policy(net, {"mode": "full"})
    assert plan.layers == {"layers.0": "full", "layers.1": "full", "layers.2": "full"}
    _same(_grads(net, x), want, "full (Cell.recompute)")
    _same(_grads(_net(functional=True), x), want, "checkpoint(cell, x)")
    with tempfile.TemporaryDirectory() as tmp:
        net = _net()
        plan = act.apply_activation_policy(net, {"mode": "swap", "swap": {"dir": tmp, "min_bytes": 1024,
                                                                          "fusion_bytes": 32768}})
        _same(_grads(net, x), want, "swap to disk")
        m = plan.manager
        assert m.stats.bytes_out > 3 * 32768 and m.stats.bytes_in == m.stats.bytes_out, m.stats
        assert os.listdir(tmp) == [], os.listdir(tmp)
        order = [(f"layers.{i}", 0) for i in (2, 1, 0)]
        assert m.backward_log == order and m.prefetch_log == order[1:], (m.backward_log, m.prefetch_log)
        m.close()
    for bad, what in (({"mode": "selective-op", "swap_ops": ["aten.mm"]}, "torch-only"), ({"mode": "auto", "auto": {"budget_mib": 1}},
                                                                   "torch-only")):
        try:
            act.apply_activation_policy(_net(), bad)
        except ActivationBackendError as exc:
            assert what in str(exc), exc
        else:
            raise AssertionError(f"{bad} did not raise")
    for call in (lambda: act.swap_tensor_wrapper(x), lambda: act.checkpoint(ref.layers[0], x, policy="op"),
                 lambda: act.swap(ref, x, manager=act.SwapManager("host"))):
        try:
            call()
        except ActivationBackendError:
            continue
        raise AssertionError("expected ActivationBackendError")
