# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT (one process, torch): the (out, lse) kernels and their block backward against SDPA, and the DSA
ops against a dense masked-attention oracle."""
import pytest
import torch
import torch.nn.functional as F

from hyper_parallel.cp._torch.dsa import (dense_sparse_attention_reference, dsa_index_scores, dsa_indexer_loss,
                                          dsa_sparse_attention, dsa_topk)
from hyper_parallel.cp._torch.kernel import additive_mask, attention_backward, attention_forward
from hyper_parallel.cp.merge import merge_partials


def _qkv(heads=4, kv_heads=2, seq=12, dim=8, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    mk = lambda h: torch.randn(2, h, seq, dim, generator=g, dtype=dtype)  # noqa: E731
    return mk(heads), mk(kv_heads), mk(kv_heads)


@pytest.mark.parametrize("impl", ["cpu_flash", "math"])
@pytest.mark.parametrize("causal", [False, True])
def test_two_block_split_equals_sdpa_forward_and_backward(impl, causal):
    q, k, v = _qkv()
    leaf = [t.clone().requires_grad_(True) for t in (q, k, v)]
    ref = F.scaled_dot_product_attention(*leaf, is_causal=causal, enable_gqa=True)
    grad_out = torch.randn_like(ref)
    ref_grads = torch.autograd.grad(ref, leaf, grad_out)
    # keys [0, 5) fully visible to queries [5, 12); the diagonal block [5, 12) causal
    qs = q[:, :, 5:]
    blocks = [((0, 5), False), ((5, 12), causal)]
    parts = [attention_forward(qs, k[:, :, a:b], v[:, :, a:b], causal=c, impl=impl) for (a, b), c in blocks]
    out, lse = merge_partials(parts[0][0], parts[0][1], parts[1][0], parts[1][1], torch)
    torch.testing.assert_close(out, ref[:, :, 5:], rtol=1e-10, atol=1e-10)
    dq = torch.zeros_like(qs)
    dk, dv = torch.zeros_like(k), torch.zeros_like(v)
    for (a, b), c in blocks:
        g = attention_backward(grad_out[:, :, 5:], qs, k[:, :, a:b], v[:, :, a:b], out, lse, causal=c, impl=impl)
        dq += g[0]
        dk[:, :, a:b] += g[1]
        dv[:, :, a:b] += g[2]
    # queries [0, 5) are not in this check: compare the grads their rows would not touch
    leaf2 = [t.clone().requires_grad_(True) for t in (qs, k, v)]
    full = F.scaled_dot_product_attention(leaf2[0], leaf2[1], leaf2[2], enable_gqa=True,
                                          attn_mask=_bottom_right_causal(7, 12) if causal else None)
    want = torch.autograd.grad(full, leaf2, grad_out[:, :, 5:])
    for got, exp, name in zip((dq, dk, dv), want, "qkv"):
        torch.testing.assert_close(got, exp, rtol=1e-10, atol=1e-10, msg=lambda m, n=name: f"d{n} ({impl}): {m}")
    assert ref_grads[0].abs().sum() > 0


def _bottom_right_causal(lq, lk):
    return torch.ones(lq, lk, dtype=torch.bool).tril(lk - lq)


@pytest.mark.parametrize("impl", ["cpu_flash", "math"])
def test_fully_masked_rows_merge_as_empty(impl):
    q, k, v = _qkv(heads=2, kv_heads=2, seq=6)
    mask = torch.ones(6, 6, dtype=torch.bool)
    mask[0, :3] = False  # row 0 sees nothing in the first block
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    m = additive_mask(mask, q.dtype)
    a = attention_forward(q, k[:, :, :3], v[:, :, :3], causal=False, mask=m[:, :3], impl=impl)
    assert torch.isneginf(a[1][:, :, 0]).all() and (a[0][:, :, 0] == 0).all()
    b = attention_forward(q, k[:, :, 3:], v[:, :, 3:], causal=False, mask=m[:, 3:], impl=impl)
    out, _ = merge_partials(a[0], a[1], b[0], b[1], torch)
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-10)


def test_kernel_rejects_unknown_impl():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="expected one of"):
        attention_forward(q, k, v, causal=False, impl="triton")


# ------------------------------------------------------------------------------------------ DSA oracle
def _dsa_inputs(seed=0, seq=10, topk=4):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    q_idx, k_idx, w = r(2, seq, 3, 5), r(2, seq, 5), r(2, seq, 3).abs()
    scores = dsa_index_scores(q_idx, k_idx, w)
    indices, valid = dsa_topk(scores, topk)
    return r(2, 4, seq, 8), r(2, 2, seq, 8), r(2, 2, seq, 8), scores, indices, valid


def test_index_scores_by_definition_and_topk_selection():
    g = torch.Generator().manual_seed(3)
    q_idx, k_idx, w = torch.randn(1, 5, 2, 3, generator=g), torch.randn(1, 5, 3, generator=g), torch.rand(1, 5, 2,
                                                                                                             generator=g)
    scores = dsa_index_scores(q_idx, k_idx, w)
    for t in range(5):
        for s in range(5):
            want = sum(w[0, t, j] * max(0.0, float(q_idx[0, t, j] @ k_idx[0, s])) for j in range(2))
            if s > t:
                assert scores[0, t, s] == float("-inf")
            else:
                assert abs(scores[0, t, s].item() - want) < 1e-5
    idx, valid = dsa_topk(scores, 3)
    assert valid[0, 0].tolist() == [True, False, False]  # query 0 sees one key
    assert valid[0, 4].all()
    best = scores[0, 4].argsort(descending=True, stable=True)[:3]
    assert idx[0, 4].tolist() == best.tolist()
    with pytest.raises(ValueError, match="topk"):
        dsa_topk(scores, 0)


def test_sparse_attention_equals_dense_masked_oracle_with_grads():
    q, k, v, _, indices, valid = _dsa_inputs()
    a = [t.clone().requires_grad_(True) for t in (q, k, v)]
    b = [t.clone().requires_grad_(True) for t in (q, k, v)]
    ours = dsa_sparse_attention(*a, indices, valid)
    ref = dense_sparse_attention_reference(*b, indices, valid)
    torch.testing.assert_close(ours, ref, rtol=1e-10, atol=1e-10)
    grad_out = torch.randn_like(ref)
    for x, y, n in zip(torch.autograd.grad(ours, a, grad_out), torch.autograd.grad(ref, b, grad_out), "qkv"):
        torch.testing.assert_close(x, y, rtol=1e-10, atol=1e-10, msg=lambda m, n=n: f"d{n}: {m}")


def test_indexer_loss_is_the_kl_of_the_attention_distribution():
    q, k, _, scores, indices, valid = _dsa_inputs(seed=1)
    loss = dsa_indexer_loss(q, k, scores, indices, valid)
    # oracle: dense attention probabilities of every head, restricted to the selection
    keep = torch.zeros(2, 10, 10, dtype=torch.bool).scatter_(-1, indices, valid)
    logits = torch.einsum("bhsd,bhtd->bhst", q, k.repeat_interleave(2, 1)) / 8 ** 0.5
    p = torch.softmax(logits.masked_fill(~keep.unsqueeze(1), float("-inf")), -1).sum(1)
    p = p / p.sum(-1, keepdim=True)
    logq = torch.log_softmax(scores.masked_fill(~keep, float("-inf")), -1)
    want = torch.where(keep, p * (p.clamp_min(1e-300).log() - logq), torch.zeros_like(p)).sum(-1)
    torch.testing.assert_close(loss, want, rtol=1e-10, atol=1e-12)
    assert (loss >= -1e-12).all()
