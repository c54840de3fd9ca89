# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT (one process): the fused ops' references on MindSpore tensors equal the torch ops (C++ kernels),
forward, and the gradients of rms_norm / swiglu / sinkhorn through MindSpore's autograd."""
import numpy as np
import torch


def test_mindspore_references_equal_the_torch_ops():
    import mindspore as ms
    from hyper_parallel.kernels import apply_rotary_emb, moe_permute, moe_unpermute, rms_norm, sinkhorn, swiglu
    from hyper_parallel.kernels._mindspore import reference as msr
    ms.set_device("CPU")
    rng = np.random.default_rng(0)

    def both(*shape):
        a = rng.standard_normal(shape).astype(np.float32)
        return ms.Tensor(a), torch.from_numpy(a.copy())

    def same(m, t, tol=1e-5):
        np.testing.assert_allclose(m.asnumpy(), t.detach().numpy(), atol=tol, rtol=tol)

    (xm, xt), (wm, wt) = both(4, 6, 8), both(8)
    same(msr.rms_norm(xm, wm, 1e-6), rms_norm(xt, wt, 1e-6))
    (gm, gt), (um, ut) = both(5, 7), both(5, 7)
    same(msr.swiglu(gm, um), swiglu(gt, ut))
    (qm, qt), (cm, ct), (sm, st) = both(2, 6, 4, 8), both(6, 1, 8), both(6, 1, 8)
    same(msr.apply_rotary_emb(qm, cm, sm), apply_rotary_emb(qt, ct, st))
    (lm, lt) = both(3, 4, 4)
    same(msr.sinkhorn(lm * 3, 10), sinkhorn(lt * 3, 10))
    (tm, tt) = both(9, 6)
    idx = rng.integers(0, 4, (9, 2))
    pm, rm, cnt_m = msr.moe_permute(tm, ms.Tensor(idx), 4)
    pt, rt, cnt_t = moe_permute(tt, torch.from_numpy(idx), 4)
    same(pm, pt)
    assert rm.asnumpy().tolist() == rt.tolist() and cnt_m.asnumpy().tolist() == cnt_t.tolist()
    (prm, prt) = both(9, 2)
    same(msr.moe_unpermute(pm, rm, prm), moe_unpermute(pt, rt, prt))
    # gradients through MindSpore's autograd equal the torch (C++) backward kernels
    for ms_fn, t_fn, (am, at) in [(lambda a: msr.rms_norm(a, wm), lambda a: rms_norm(a, wt), both(3, 8)),
                                  (lambda a: msr.swiglu(a, um[:3]), lambda a: swiglu(a, ut[:3]), both(3, 7)),
                                  (lambda a: msr.sinkhorn(a, 5), lambda a: sinkhorn(a, 5), both(2, 4, 4))]:
        g_ms = ms.grad(lambda a, f=ms_fn: (f(a) * f(a)).sum())(am)
        at.requires_grad_()
        (t_fn(at) * t_fn(at)).sum().backward()
        same(g_ms, at.grad, 1e-4)
