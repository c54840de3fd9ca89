# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT (one MindSpore process): the MindSpore ``AdamW`` 's fused update (``ops.AdamWeightDecay`` with the bias
correction folded in, the default) against ``torch.optim.AdamW`` on the same parameters and gradients (two
parameter groups, a learning rate changed between steps as a schedule does), against its own op-by-op formula
(``fused=False``), and a moment set from outside (a checkpoint load) is not written into; a bad ``fused`` is a
clear error. (Named to run after ``test_kernels_reference.py``, which sets the device before any kernel.)"""
import numpy as np
import pytest

SHAPES = [(16, 8), (8,), (8, 16), (16,)]
LRS = [1e-2, 5e-3, 2e-2, 1e-2]


def _data():
    rng = np.random.default_rng(7)
    start = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    grads = [[rng.standard_normal(s).astype(np.float32) for s in SHAPES] for _ in LRS]
    return start, grads


def _mindspore(fused, start, grads, steps=len(LRS), opt=None, params=None, compiled=False):
    import mindspore as ms
    from hyper_parallel.optim._mindspore.optimizers import AdamW
    if params is None:
        params = [ms.Parameter(ms.Tensor(x.copy()), name=f"p{i}") for i, x in enumerate(start)]
        opt = AdamW([{"params": params[:2], "weight_decay": 0.1}, {"params": params[2:], "weight_decay": 0.0}],
                    lr=LRS[0], betas=(0.8, 0.99), eps=1e-6, fused=fused)
        if compiled:
            opt.compile()
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = LRS[step]
        opt.step([ms.Tensor(g) for g in grads[step]])
    return [p.asnumpy().copy() for p in params], opt, params


def test_fused_adamw_equals_torch_and_the_op_by_op_formula():
    import mindspore as ms
    import torch
    ms.set_device("CPU")
    start, grads = _data()
    tparams = [torch.nn.Parameter(torch.from_numpy(x.copy())) for x in start]
    topt = torch.optim.AdamW([{"params": tparams[:2], "weight_decay": 0.1},
                              {"params": tparams[2:], "weight_decay": 0.0}], lr=LRS[0], betas=(0.8, 0.99), eps=1e-6)
    for step, lr in enumerate(LRS):
        for g in topt.param_groups:
            g["lr"] = lr
        for p, g in zip(tparams, grads[step]):
            p.grad = torch.from_numpy(g)
        topt.step()
    fused, opt, _ = _mindspore(None, start, grads)
    eager, _, _ = _mindspore(False, start, grads)
    assert opt.fused
    for i, (f, e, t) in enumerate(zip(fused, eager, tparams)):
        assert np.abs(f - start[i]).max() > 1e-3  # the update moved the parameter
        np.testing.assert_allclose(f, t.detach().numpy(), rtol=1e-5, atol=1e-6, err_msg=f"p{i}: fused vs torch")
        np.testing.assert_allclose(f, e, rtol=1e-5, atol=1e-6, err_msg=f"p{i}: fused vs op by op")
        np.testing.assert_allclose(opt.state[f"p{i}"]["exp_avg"].asnumpy(),
                                   topt.state[t]["exp_avg"].numpy(), rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(opt.state[f"p{i}"]["exp_avg_sq"].asnumpy(),
                                   topt.state[t]["exp_avg_sq"].numpy(), rtol=1e-5, atol=1e-9)


def test_fused_adamw_copies_moments_set_from_outside():
    import mindspore as ms
    ms.set_device("CPU")
    start, grads = _data()
    whole, _, _ = _mindspore(True, start, grads)
    _, opt, params = _mindspore(True, start, grads, steps=2)
    loaded = {n: {k: (v.asnumpy().copy() if k != "step" else v) for k, v in st.items()} for n, st in opt.state.items()}
    kept = {n: {k: v.copy() for k, v in st.items() if k != "step"} for n, st in loaded.items()}
    for n, st in loaded.items():  # what set_optimizer_state_dict does: new tensors (here over NumPy arrays)
        opt.state[n] = {"step": st["step"], "exp_avg": ms.Tensor(st["exp_avg"]),
                        "exp_avg_sq": ms.Tensor(st["exp_avg_sq"])}
    outside = {n: dict(st) for n, st in opt.state.items()}
    for step in (2, 3):
        for g in opt.param_groups:
            g["lr"] = LRS[step]
        opt.step([ms.Tensor(g) for g in grads[step]])
    for i, p in enumerate(params):
        np.testing.assert_array_equal(p.asnumpy(), whole[i])  # same kernels on the same values: bit-exact
        for k in ("exp_avg", "exp_avg_sq"):
            np.testing.assert_array_equal(outside[f"p{i}"][k].asnumpy(), kept[f"p{i}"][k])  # not written into
            assert opt.state[f"p{i}"][k] is not outside[f"p{i}"][k]


def test_compiled_adamw_is_the_fused_kernels_in_one_graph_bit_exactly():
    """``AdamW.compile()`` (what ``training.compile`` turns on): every parameter's fused kernel in one
    ``mindspore.jit`` graph gives the eager fused kernels' parameters and moments bit-exactly, also after
    moments set from outside (a checkpoint load: copied, not written into); ``fused=False`` is refused."""
    import mindspore as ms
    from hyper_parallel.optim._mindspore.optimizers import AdamW
    ms.set_device("CPU")
    start, grads = _data()
    eager, ref, _ = _mindspore(True, start, grads)
    got, opt, params = _mindspore(True, start, grads, compiled=True)
    assert opt.compiled and isinstance(opt.state["p0"]["exp_avg"], ms.Parameter)
    for i, (e, g) in enumerate(zip(eager, got)):
        assert np.abs(g - start[i]).max() > 1e-3  # the update moved the parameter
        np.testing.assert_array_equal(g, e, err_msg=f"p{i}: compiled vs eager fused")
        for k in ("exp_avg", "exp_avg_sq"):
            np.testing.assert_array_equal(opt.state[f"p{i}"][k].asnumpy(), ref.state[f"p{i}"][k].asnumpy())
    _, opt, params = _mindspore(True, start, grads, steps=2, compiled=True)
    outside = {n: {"step": st["step"], "exp_avg": ms.Tensor(st["exp_avg"].asnumpy()),
                   "exp_avg_sq": ms.Tensor(st["exp_avg_sq"].asnumpy())} for n, st in opt.state.items()}
    kept = {n: {k: st[k].asnumpy().copy() for k in ("exp_avg", "exp_avg_sq")} for n, st in outside.items()}
    opt.state.update({n: dict(st) for n, st in outside.items()})
    for step in (2, 3):
        for g in opt.param_groups:
            g["lr"] = LRS[step]
        opt.step([ms.Tensor(g) for g in grads[step]])
    for i, p in enumerate(params):
        np.testing.assert_array_equal(p.asnumpy(), eager[i])
        for k in ("exp_avg", "exp_avg_sq"):
            np.testing.assert_array_equal(outside[f"p{i}"][k].asnumpy(), kept[f"p{i}"][k])  # not written into
    with pytest.raises(ValueError, match=r"AdamW.compile\(\): needs the fused kernel"):
        AdamW([ms.Parameter(ms.Tensor(np.zeros(2, np.float32)), name="w")], fused=False).compile()


def test_adamw_fused_must_be_a_bool():
    import mindspore as ms
    from hyper_parallel.optim._mindspore.optimizers import AdamW
    with pytest.raises(ValueError, match=r"AdamW\(fused\): expected True, False or None, got 'yes'"):
        AdamW([ms.Parameter(ms.Tensor(np.zeros(2, np.float32)), name="w")], fused="yes")
