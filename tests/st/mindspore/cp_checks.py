# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Context-parallel checks run inside 2 MindSpore ranks (one launch): the ring, all-gather and all-to-all
(Ulysses) attention under head-tail and contiguous layouts, forward and the gradients of q, k and v, against the
MindSpore Llama's attention on the whole sequence in one process; shard / unshard round trip; the
``context_parallel`` block with in-place buffers; the MindSpore Llama's logits and weight gradients with CP
against one process."""
import numpy as np

from tests.st.mindspore.common import TOL

METHODS = ("ring", "allgather", "alltoall")
BALANCES = ("headtail", "none")


def _qkv(seed=3, b=2, s=16, h=4, kv=2, d=8):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(np.float32) for shape in
            ((b, s, h, d), (b, s, kv, d), (b, s, kv, d), (b, s, h * d))]


def _reference(q, k, v, w):
    """One process: the Llama attention on the whole sequence; output and gradients of sum(out * w)."""
    import mindspore as ms
    from hyper_parallel.models.llama3._mindspore.model import attention

    def fn(a, b, c):
        return (attention(a, b, c) * ms.Tensor(w)).sum()

    out = attention(ms.Tensor(q), ms.Tensor(k), ms.Tensor(v)).asnumpy()
    grads = ms.grad(fn, grad_position=(0, 1, 2))(ms.Tensor(q), ms.Tensor(k), ms.Tensor(v))
    return out, [g.asnumpy() for g in grads]


def _attention_check(mesh, method, balance):
    import mindspore as ms
    from hyper_parallel.cp import context_parallel, context_parallel_shard
    from hyper_parallel.cp.load_balance import make_load_balancer
    q, k, v, w = _qkv()
    want_out, want_grads = _reference(q, k, v, w)
    rank = mesh.get_local_rank()
    pos = make_load_balancer(balance).layout(q.shape[1], 2).positions(rank)
    local = context_parallel_shard(mesh, [ms.Tensor(t) for t in (q, k, v, w)], [1, 1, 1, 1], load_balance=balance)
    np.testing.assert_array_equal(local[0].asnumpy(), q[:, pos])
    from hyper_parallel.models.llama3._mindspore.model import attention

    def fn(a, b, c):
        return (attention(a, b, c) * local[3]).sum()

    with context_parallel(mesh, method=method, load_balance=balance):
        out = attention(*local[:3])
        grads = ms.grad(fn, grad_position=(0, 1, 2))(*local[:3])
    np.testing.assert_allclose(out.asnumpy(), want_out[:, pos], **TOL)
    for got, want in zip(grads, want_grads):
        np.testing.assert_allclose(got.asnumpy(), want[:, pos], **TOL)


def _roundtrip(mesh):
    import mindspore as ms
    from hyper_parallel.cp import context_parallel, context_parallel_shard, context_parallel_unshard
    x = np.arange(2 * 12 * 3, dtype=np.float32).reshape(2, 12, 3)
    for balance in BALANCES:
        shard = context_parallel_shard(mesh, [ms.Tensor(x)], [1], load_balance=balance)[0]
        back = context_parallel_unshard(mesh, [shard], [1], load_balance=balance)[0]
        np.testing.assert_array_equal(back.asnumpy(), x)
    buf, kept = ms.Tensor(x.copy()), ms.Tensor(x.copy())
    with context_parallel(mesh, buffers=[buf, kept], buffer_seq_dims=[1, 1], no_restore_buffers=[kept]):
        assert tuple(buf.shape) == (2, 6, 3), buf.shape
    assert tuple(buf.shape) == (2, 12, 3) and tuple(kept.shape) == (2, 6, 3), (buf.shape, kept.shape)
    np.testing.assert_array_equal(buf.asnumpy(), x)
    try:
        context_parallel_shard(mesh, [ms.Tensor(x[:, :10])], [1])
    except ValueError as exc:
        assert "multiple of 4" in str(exc), exc
    else:
        raise AssertionError("a length not divisible by 2 * cp was accepted")


def _llama(mesh, method):
    """The MindSpore Llama's logits and weight gradients with CP equal one process's."""
    import mindspore as ms
    from hyper_parallel.cp import context_parallel, context_parallel_shard
    from hyper_parallel.models.llama3._mindspore.model import LlamaForCausalLM
    from hyper_parallel.models.llama3.args import TINY_CONFIGS
    model = LlamaForCausalLM(TINY_CONFIGS["debug"], seed=1)
    params = model.trainable_params()
    ids = np.random.default_rng(5).integers(0, 256, (2, 17)).astype(np.int32)
    inp, lab = ms.Tensor(ids[:, :-1]), ms.Tensor(ids[:, 1:])

    def loss(i, l, p=None):
        return LlamaForCausalLM.loss(model(i, p), l)

    want_loss, want = ms.value_and_grad(loss, None, params)(inp, lab)
    want_logits = model(inp).asnumpy()
    pos = ms.Tensor(np.arange(16, dtype=np.int32))
    i_loc, l_loc, p_loc = context_parallel_shard(mesh, [inp, lab, pos], [1, 1, 0])
    with context_parallel(mesh, method=method):
        got_loss, got = ms.value_and_grad(loss, None, params)(i_loc, l_loc, p_loc)
        logits = model(i_loc, p_loc).asnumpy()
    np.testing.assert_allclose(logits, want_logits[:, p_loc.asnumpy()], **TOL)
    from hyper_parallel.platform.mindspore.collectives import raw_all_reduce
    group = mesh.get_group()
    mean = raw_all_reduce(got_loss.reshape(1), "sum", group).asnumpy()[0] / 2
    np.testing.assert_allclose(mean, want_loss.asnumpy(), **TOL)
    for p, g, w in zip(params, got, want):  # the average of the ranks' gradients is the whole-batch gradient
        total = raw_all_reduce(g, "sum", group).asnumpy() / 2
        np.testing.assert_allclose(total, w.asnumpy(), rtol=1e-4, atol=1e-5, err_msg=p.name)


def _errors(mesh):
    from hyper_parallel.cp import context_parallel
    for kwargs, text in (({"method": "bogus"}, "expected one of"), ({"async_op": True}, "synchronous")):
        try:
            with context_parallel(mesh, **kwargs):
                pass
        except ValueError as exc:
            assert text in str(exc), exc
        else:
            raise AssertionError(f"context_parallel({kwargs}) was accepted")


CP_CHECKS = {**{f"cp {m} {b}": (lambda mesh, m=m, b=b: _attention_check(mesh, m, b))
                for m in METHODS for b in BALANCES},
             "cp shard unshard and buffers": _roundtrip,
             **{f"cp llama {m}": (lambda mesh, m=m: _llama(mesh, m)) for m in METHODS},
             "cp errors": _errors}

