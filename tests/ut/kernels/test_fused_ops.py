# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT (one process, torch): the C++ fused ops (built for real, from csrc/) against their Python references,
forward and backward, fp32 to 1e-6 and bf16 to bf16 tolerance, over non-contiguous and size-1 shapes;
``torch.library.opcheck`` (schema, fake kernel, autograd registration, AOT dispatch) on every op."""
import pytest
import torch

from hyper_parallel.kernels import apply_rotary_emb, build_info, moe_permute, moe_unpermute, rms_norm, sinkhorn, \
    swiglu
from hyper_parallel.kernels._torch import reference as ref

OPS = torch.ops.hyper_parallel


def test_the_cpp_ops_are_built_and_used():
    info = build_info()
    assert info["available"] and info["mode"] in ("aot", "built", "cached"), info
    x = torch.randn(2, 3, 4, requires_grad=True)
    # each public op reaches its C++ kernel: the autograd node is the custom op's, not the reference's
    idx = torch.tensor([[0], [1]])
    outs = {"rms_norm": rms_norm(x, torch.ones(4)), "swiglu": swiglu(x, x),
            "rotary": apply_rotary_emb(x, torch.ones(4), torch.zeros(4)), "sinkhorn": sinkhorn(x, 2),
            "moe_permute": moe_permute(x[0, :2], idx, 2)[0],
            "moe_unpermute": moe_unpermute(x[0, :2], idx, None)}
    for name, out in outs.items():
        assert f"hyper_parallel_{name}_default" in out.grad_fn.name(), (name, out.grad_fn.name())


def _leaf(t):
    return t.detach().clone().requires_grad_(t.is_floating_point())


def _check(fn, reference, inputs, atol, rtol):
    """fn and reference agree on the outputs and on every floating input's gradient."""
    a, b = [_leaf(t) for t in inputs], [_leaf(t) for t in inputs]
    out_a, out_b = fn(*a), reference(*b)
    out_a = out_a if isinstance(out_a, tuple) else (out_a,)
    out_b = out_b if isinstance(out_b, tuple) else (out_b,)
    for x, y in zip(out_a, out_b):
        assert x.dtype == y.dtype and x.shape == y.shape
        torch.testing.assert_close(x, y, atol=atol, rtol=rtol)
    w = torch.randn(out_a[0].shape, generator=torch.Generator().manual_seed(5)).to(out_a[0].dtype)
    (out_a[0].float() * w.float()).sum().backward()
    (out_b[0].float() * w.float()).sum().backward()
    grads = 0
    for x, y in zip(a, b):
        if x.requires_grad:
            assert x.grad is not None and y.grad is not None
            torch.testing.assert_close(x.grad, y.grad, atol=atol, rtol=rtol)
            grads += 1
    assert grads > 0


def _noncontig(shape):
    """A tensor of ``shape`` whose memory is not contiguous (a transpose of a bigger tensor's slice)."""
    big = torch.randn(*reversed(shape[-2:]), *shape[:-2], 2) if len(shape) >= 2 else torch.randn(shape[0], 2)
    if len(shape) < 2:
        return big[:, 0]
    t = big[..., 0].permute(*range(2, len(shape)), 1, 0)
    assert tuple(t.shape) == tuple(shape) and not t.is_contiguous()
    return t


FP32 = dict(atol=1e-6, rtol=1e-6)
FP32_GRAD = dict(atol=1e-5, rtol=1e-5)  # reductions over rows (weight grads) sum in another order
BF16 = dict(atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("shape", [(4, 7, 33), (1, 1, 8), (5, 1), (3, 64)])
@pytest.mark.parametrize("contiguous", [True, False])
def test_rms_norm(shape, contiguous):
    torch.manual_seed(0)
    x = torch.randn(shape) if contiguous else _noncontig(shape)
    w = torch.rand(shape[-1]) + 0.5
    _check(lambda a, b: rms_norm(a, b, 1e-6), lambda a, b: ref.rms_norm_ref(a, b, 1e-6), [x, w], **FP32_GRAD)
    _check(lambda a: rms_norm(a), ref.rms_norm_ref, [x], **FP32)
    # against torch's own rms_norm (an oracle independent of our reference)
    torch.testing.assert_close(rms_norm(x, w, 1e-6), torch.nn.functional.rms_norm(x, (shape[-1],), w, 1e-6),
                               **FP32)


@pytest.mark.parametrize("contiguous", [True, False])
def test_rotary(contiguous):
    torch.manual_seed(1)
    x = torch.randn(2, 6, 4, 8) if contiguous else _noncontig((2, 6, 4, 8))
    for cos_shape in [(6, 1, 8), (1, 6, 1, 8), (2, 6, 4, 8), (8,)]:
        cos, sin = torch.randn(cos_shape), torch.randn(cos_shape)
        _check(apply_rotary_emb, ref.rotary_ref, [x, cos, sin], **FP32_GRAD)  # cos/sin grads too (reduced)
        _check(lambda a, c=cos, s=sin: apply_rotary_emb(a, c, s), lambda a, c=cos, s=sin: ref.rotary_ref(a, c, s),
               [x], **FP32)
    # cos/sin of the real frequencies: a rotation keeps the norm of each pair
    theta = torch.randn(6, 1, 4)
    cos, sin = torch.cat([theta.cos()] * 2, -1), torch.cat([theta.sin()] * 2, -1)
    y = apply_rotary_emb(x, cos, sin)
    torch.testing.assert_close(y[..., :4] ** 2 + y[..., 4:] ** 2, x[..., :4] ** 2 + x[..., 4:] ** 2, atol=1e-5,
                               rtol=1e-5)


@pytest.mark.parametrize("shape", [(5, 37), (1, 1), (2, 3, 64)])
def test_swiglu(shape):
    torch.manual_seed(2)
    _check(swiglu, ref.swiglu_ref, [torch.randn(shape) * 3, torch.randn(shape)], **FP32)
    _check(swiglu, ref.swiglu_ref, [_noncontig((4, 9)), _noncontig((4, 9))], **FP32)


@pytest.mark.parametrize("t,k,e", [(9, 2, 4), (1, 1, 1), (16, 3, 5)])
def test_moe_permute_unpermute(t, k, e):
    torch.manual_seed(3)
    tokens, idx = torch.randn(t, 12), torch.randint(0, e, (t, k))
    _check(lambda a: moe_permute(a, idx, e), lambda a: ref.moe_permute_ref(a, idx, e), [tokens], **FP32)
    permuted, row_map, counts = moe_permute(tokens, idx, e)
    assert counts.tolist() == torch.bincount(idx.flatten(), minlength=e).tolist()
    probs = torch.rand(t, k)
    _check(moe_unpermute, ref.moe_unpermute_ref, [permuted, row_map, probs], **FP32)
    _check(lambda a: moe_unpermute(a, row_map), lambda a: ref.moe_unpermute_ref(a, row_map), [permuted], **FP32)
    # the round trip: unpermute(permute(x)) with probs summing to 1 per token gives x back
    back = moe_unpermute(moe_permute(tokens, idx, e)[0], row_map, probs / probs.sum(1, keepdim=True))
    torch.testing.assert_close(back, tokens, **FP32_GRAD)
    _check(lambda a: moe_permute(a, idx, e), lambda a: ref.moe_permute_ref(a, idx, e), [_noncontig((t, 12))], **FP32)


def test_moe_permute_bad_input():
    with pytest.raises((RuntimeError, ValueError), match="expert_idx"):
        moe_permute(torch.randn(3, 4), torch.tensor([[0], [5], [1]]), 3)
    with pytest.raises(ValueError, match="integer"):
        moe_permute(torch.randn(3, 4), torch.zeros(3, 1), 3)


@pytest.mark.parametrize("shape", [(3, 5, 4, 4), (4, 4), (2, 3, 6), (1, 1, 1)])
def test_sinkhorn(shape):
    torch.manual_seed(4)
    x = torch.randn(shape) * 3
    x.view(-1)[0] = 40.0  # clamped: no gradient there
    _check(lambda a: sinkhorn(a, 10, -30.0, 30.0), lambda a: ref.sinkhorn_ref(a, 10, -30.0, 30.0), [x], **FP32)
    if shape[-1] == shape[-2]:
        out = sinkhorn(torch.randn(shape), 50)  # doubly stochastic: rows and columns sum to 1
        torch.testing.assert_close(out.sum(-1), torch.ones(shape[:-1]), atol=1e-4, rtol=0)
        torch.testing.assert_close(out.sum(-2), torch.ones(shape[:-2] + shape[-1:]), atol=1e-4, rtol=0)


def test_bf16_within_tolerance():
    torch.manual_seed(5)
    b = torch.bfloat16
    x, w = torch.randn(4, 32, dtype=b), torch.rand(32, dtype=b) + 0.5
    _check(rms_norm, ref.rms_norm_ref, [x, w], **BF16)
    _check(swiglu, ref.swiglu_ref, [torch.randn(6, 16, dtype=b), torch.randn(6, 16, dtype=b)], **BF16)
    q = torch.randn(2, 5, 3, 8, dtype=b)
    _check(apply_rotary_emb, ref.rotary_ref, [q, torch.randn(5, 1, 8, dtype=b), torch.randn(5, 1, 8, dtype=b)],
           **BF16)
    _check(lambda a: sinkhorn(a, 5), lambda a: ref.sinkhorn_ref(a, 5), [torch.randn(3, 4, 4, dtype=b)], **BF16)
    p, rm, _ = moe_permute(torch.randn(6, 8, dtype=b), torch.randint(0, 3, (6, 2)), 3)
    _check(moe_unpermute, ref.moe_unpermute_ref, [p, rm, torch.rand(6, 2, dtype=b)], **BF16)


def test_opcheck_every_op():
    torch.manual_seed(6)
    rg = dict(requires_grad=True)
    cases = [
        (OPS.rms_norm, (torch.randn(3, 8, **rg), torch.rand(8, **rg), 1e-6)),
        (OPS.rms_norm, (torch.randn(2, 1, 8, **rg), None, 1e-5)),
        (OPS.rotary, (torch.randn(2, 3, 8, **rg), torch.randn(3, 8), torch.randn(3, 8, **rg), False)),
        (OPS.swiglu, (torch.randn(3, 8, **rg), torch.randn(3, 8, **rg))),
        (OPS.moe_permute, (torch.randn(5, 8, **rg), torch.randint(0, 3, (5, 2)), 3)),
        (OPS.moe_unpermute, (torch.randn(10, 8, **rg), torch.randperm(10).view(5, 2), torch.rand(5, 2, **rg))),
        (OPS.sinkhorn, (torch.randn(2, 4, 4, **rg), 5, -30.0, 30.0, 1e-6)),
    ]
    for op, args in cases:
        torch.library.opcheck(op, args)
