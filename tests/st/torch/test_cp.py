# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ST (2 gloo ranks): context-parallel attention against one process — outputs AND dQ, dK, dV for every
method x causal/non-causal x GQA x document mask x load balancer; the state after every ring step
against reference partial sums; the tiny Llama trained 5 AdamW steps under ``context_parallel`` and
under the CP x FSDP plan; DSA sparse attention with its indexer loss; bytes vs the formulas; bad input."""
import pytest

from hyper_parallel.testing import multi_rank

FP32 = dict(rtol=1e-5, atol=1e-5)

# (method, async) x (causal, kv_heads, mask, load balance)
METHODS = [("ring", False), ("ring", True), ("allgather", False), ("allgather", True), ("alltoall", False)]
SHAPES = [(False, 4, None, "headtail"), (True, 4, None, "headtail"), (False, 2, None, "headtail"),
          (True, 2, None, "headtail"), (True, 2, None, "none"), (False, 4, None, "none"),
          (False, 2, "doc", "perdoc"), (False, 4, "doc", "headtail"), (False, 2, "random", "none")]
DOCS = [8, 16, 8]  # three packed documents, each a multiple of 2 * cp = 4


def doc_mask(lengths):
    """Per-document causal mask (True = attend), [S, S]."""
    import torch
    seq = sum(lengths)
    doc = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))
    pos = torch.arange(seq)
    return (doc[:, None] == doc[None, :]) & (pos[None, :] <= pos[:, None])


def balancer(name):
    """The load balancer of a case."""
    from hyper_parallel.cp import PerDocumentHeadTail
    return {"headtail": "headtail", "none": None, "perdoc": PerDocumentHeadTail(DOCS)}[name]


def cp_attention_vs_one_process(mesh, method, async_, causal, kv_heads, mask_kind, lb, dtype, seq=32):
    """Run one case on CP shards and on the whole sequence; return [(name, got, want)] for out, dq, dk, dv."""
    import torch
    import torch.nn.functional as F
    from hyper_parallel.cp import context_parallel_shard, context_parallel_unshard
    from hyper_parallel.cp import context_parallel
    g = torch.Generator().manual_seed(seq + kv_heads)
    q = torch.randn(2, 4, seq, 8, generator=g, dtype=dtype)
    k, v = (torch.randn(2, kv_heads, seq, 8, generator=g, dtype=dtype) for _ in range(2))
    grad_out = torch.randn(2, 4, seq, 8, generator=g, dtype=dtype)
    mask = None
    if mask_kind == "doc":
        mask = doc_mask(DOCS)
    elif mask_kind == "random":
        mask = torch.rand(2, 1, seq, seq, generator=g) > 0.3
        mask[..., 0] = True  # no fully masked row (SDPA's math would give NaN there)
    leaf = [t.clone().requires_grad_(True) for t in (q, k, v)]
    ref = F.scaled_dot_product_attention(*leaf, attn_mask=mask, is_causal=causal, enable_gqa=kv_heads != 4)
    want = [ref.detach(), *torch.autograd.grad(ref, leaf, grad_out)]
    shards = context_parallel_shard(mesh, [q, k, v, grad_out], [2, 2, 2, 2], balancer(lb))
    local = [t.requires_grad_(True) for t in shards[:3]]
    with context_parallel(mesh, method=method, load_balance=balancer(lb), async_op=async_):
        out = F.scaled_dot_product_attention(*local, attn_mask=mask, is_causal=causal, enable_gqa=kv_heads != 4)
    grads = torch.autograd.grad(out, local, shards[3])
    got = context_parallel_unshard(mesh, [out.detach(), *grads], [2, 2, 2, 2], balancer(lb))
    return list(zip(("out", "dq", "dk", "dv"), got, want))


@multi_rank(world_size=2, timeout=300)
def test_every_method_matches_one_process_outputs_and_gradients():
    import torch
    import hyper_parallel as hp
    mesh = hp.init_device_mesh("cpu", (2,))
    checked = 0
    for method, async_ in METHODS + [("auto", False)]:
        for causal, kv_heads, mask_kind, lb in SHAPES:
            case = f"{method}{'-async' if async_ else ''} causal={causal} kv_heads={kv_heads} mask={mask_kind} lb={lb}"
            for name, got, want in cp_attention_vs_one_process(mesh, method, async_, causal, kv_heads, mask_kind, lb,
                                                               torch.float32):
                assert want.abs().sum() > 0, f"{case} {name}: reference is all zeros"
                torch.testing.assert_close(got, want, **FP32, msg=lambda m, c=case, n=name: f"{c}: {n}: {m}")
                checked += 1
    assert checked == (len(METHODS) + 1) * len(SHAPES) * 4


@multi_rank(world_size=2, timeout=120)
def test_bfloat16_inputs_accumulate_in_fp32():
    import torch
    import hyper_parallel as hp
    mesh = hp.init_device_mesh("cpu", (2,))
    for method, async_ in METHODS:
        for name, got, want in cp_attention_vs_one_process(mesh, method, async_, True, 2, None, "headtail",
                                                           torch.bfloat16):
            assert got.dtype == torch.bfloat16
            # bf16 has 8 bits of mantissa: the merged result is rounded once, SDPA's once too, at other points
            torch.testing.assert_close(got.float(), want.float(), rtol=2e-2, atol=2e-2,
                                       msg=lambda m, c=f"{method} async={async_} {name}": f"{c}: {m}")


def reference_partials(q, k, v, grad_out, layout, rank, causal, scale, order):
    """Per-step reference of rank ``rank``: forward (out, lse) over the first t+1 blocks of ``order``, and the
    backward share of each block (dq_b, dk_b, dv_b) from autograd with one copy of q per block."""
    import torch
    qpos = torch.tensor(layout.positions(rank))
    q_loc = q.index_select(2, qpos)
    group = q.shape[1] // k.shape[1]
    blocks = [torch.tensor(layout.positions(s)) for s in order]

    def scores_of(qq, kk, kpos):
        s = qq @ kk.repeat_interleave(group, 1).transpose(-1, -2) * scale
        return s.masked_fill(kpos[None, :] > qpos[:, None], float("-inf")) if causal else s

    fwd = []
    for t in range(len(order)):
        ks = torch.cat([k.index_select(2, b) for b in blocks[:t + 1]], 2)
        vs = torch.cat([v.index_select(2, b) for b in blocks[:t + 1]], 2)
        s = scores_of(q_loc, ks, torch.cat(blocks[:t + 1]))
        lse = torch.logsumexp(s, -1)
        p = torch.exp(s - torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse).unsqueeze(-1))
        fwd.append((p @ vs.repeat_interleave(group, 1), lse))
    qs = [q_loc.clone().requires_grad_(True) for _ in order]
    ks = [k.index_select(2, b).requires_grad_(True) for b in blocks]
    vs = [v.index_select(2, b).requires_grad_(True) for b in blocks]
    s = torch.cat([scores_of(qq, kk, b) for qq, kk, b in zip(qs, ks, blocks)], -1)
    out = torch.softmax(s, -1) @ torch.cat([vv.repeat_interleave(group, 1) for vv in vs], 2)
    grads = torch.autograd.grad(out, qs + ks + vs, grad_out.index_select(2, qpos))
    n = len(order)
    return fwd, [(grads[i], grads[n + i], grads[2 * n + i]) for i in range(n)]


def check_steps(mesh, method, lb, causal, seq=16):
    """Every forward and backward step of ``method`` on this rank against the reference partial sums."""
    import torch
    import torch.nn.functional as F
    from hyper_parallel.cp import context_parallel, context_parallel_shard, record_steps
    from hyper_parallel.cp._torch.context import CPState
    from hyper_parallel.cp.load_balance import make_load_balancer
    rank, size = mesh.get_local_rank(0), mesh.size()
    g = torch.Generator().manual_seed(7)
    q = torch.randn(1, 4, seq, 8, generator=g, dtype=torch.float64)
    k, v = (torch.randn(1, 2, seq, 8, generator=g, dtype=torch.float64) for _ in range(2))
    grad_out = torch.randn(1, 4, seq, 8, generator=g, dtype=torch.float64)
    layout = CPState(mesh, method, make_load_balancer(lb)).layout(seq)
    local = [t.requires_grad_(True) for t in context_parallel_shard(mesh, [q, k, v], [2, 2, 2], lb)]
    (grad_out_l,) = context_parallel_shard(mesh, [grad_out], [2], lb)
    with record_steps() as trace, context_parallel(mesh, method=method, load_balance=lb):
        out = F.scaled_dot_product_attention(*local, is_causal=causal, enable_gqa=True)
        out.backward(grad_out_l)
    order = [(rank - i) % size for i in range(size)]
    fwd_ref, bwd_ref = reference_partials(q, k, v, grad_out, layout, rank, causal, 8 ** -0.5, order)
    fwd = [r for r in trace if r.phase == "fwd"]
    bwd = [r for r in trace if r.phase == "bwd"]
    assert [r.src for r in fwd] == order and [r.src for r in bwd] == order
    tol = dict(rtol=1e-9, atol=1e-9)
    dq_sum = torch.zeros_like(bwd_ref[0][0])
    for t in range(size):
        where = f"{method} lb={lb} causal={causal} rank {rank} step {t} (block of rank {order[t]})"
        torch.testing.assert_close(fwd[t].tensors[0], fwd_ref[t][0], **tol, msg=lambda m, w=where: f"{w}: out: {m}")
        torch.testing.assert_close(fwd[t].tensors[1], fwd_ref[t][1], **tol, msg=lambda m, w=where: f"{w}: lse: {m}")
        dq_sum = dq_sum + bwd_ref[t][0]
        for got, want, name in zip(bwd[t].tensors, (dq_sum, bwd_ref[t][1], bwd_ref[t][2]), ("dq", "dk", "dv")):
            torch.testing.assert_close(got, want, **tol, msg=lambda m, w=where, n=name: f"{w}: {n}: {m}")
    return len(trace)


@multi_rank(world_size=2, timeout=120)
def test_state_after_every_step_matches_reference_partial_sums():
    import hyper_parallel as hp
    mesh = hp.init_device_mesh("cpu", (2,))
    for method in ("ring", "allgather"):
        for lb, causal in (("headtail", True), (None, True), ("headtail", False)):
            assert check_steps(mesh, method, lb, causal) == 4


def llama_batch(step, seq=32, vocab=256):
    """Input ids, next-token labels and positions of one step (the same on every rank)."""
    import torch
    gen = torch.Generator().manual_seed(step)
    ids = torch.randint(0, vocab, (2, seq), generator=gen)
    return ids, torch.roll(ids, -1, dims=1), torch.arange(seq)


def _full_grads(model):
    from hyper_parallel import DTensor
    return {n: (p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad).clone()
            for n, p in model.named_parameters()}


def train_llama_cp(mesh, variant, steps=5):
    """Train a CP copy and a one-process copy of the tiny Llama; return (cp losses, ref losses, models,
    first-step gradients of both)."""
    import copy
    import torch
    import torch.distributed as dist
    from hyper_parallel.cp import context_parallel, context_parallel_shard
    from hyper_parallel.models.llama3 import LlamaForCausalLM, TINY_CONFIGS, parallelize_llama
    torch.manual_seed(0)
    ref = LlamaForCausalLM(TINY_CONFIGS["debug"])
    ours = copy.deepcopy(ref)
    kind, method = variant.split(":")
    if kind == "fsdp":
        parallelize_llama(ours, cp_mesh=mesh, fsdp_mesh=mesh, cp_method=method, async_cp=True)
    # eps 1e-4: an element whose gradient is ~0 moves by lr * g / eps (proportional to its gradient) instead of a
    # whole step of sign(g) * lr, so fp32 summation-order noise in a vanishing gradient stays noise; gradients of
    # the usual size (>> 1e-4) still take Adam's normalised steps
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-2, eps=1e-4) for m in (ours, ref)]
    got, want, first = [], [], None
    group = mesh.get_group(0)
    for step in range(steps):
        ids, labels, pos = llama_batch(step)
        loss = LlamaForCausalLM.loss(ref(ids), labels)
        loss.backward()
        want.append(loss.item())
        if kind == "ctx":
            with context_parallel(mesh, buffers=[ids, labels, pos], buffer_seq_dims=[1, 1, 0], method=method):
                assert ids.shape == (2, 16)
                loss = LlamaForCausalLM.loss(ours(ids, position_ids=pos), labels)
                loss.backward()
            assert ids.shape == (2, 32) and torch.equal(ids, llama_batch(step)[0]), "buffers restored on exit"
            for p in ours.parameters():  # the global loss is the mean of the CP ranks' losses
                dist.all_reduce(p.grad, group=group)
                p.grad /= mesh.size()
        else:
            ids, labels, pos = context_parallel_shard(mesh, [ids, labels, pos], [1, 1, 0])
            loss = LlamaForCausalLM.loss(ours(ids, position_ids=pos), labels)
            loss.backward()
        mine = loss.detach().clone()
        dist.all_reduce(mine, group=group)
        got.append(mine.item() / mesh.size())
        if first is None:
            first = (_full_grads(ours), _full_grads(ref))
        for o in opts:
            o.step()
            o.zero_grad()
    return got, want, ours, ref, first


@pytest.mark.parametrize("variant", ["ctx:ring", "ctx:alltoall", "fsdp:ring", "fsdp:allgather"])
@multi_rank(world_size=2, timeout=300)
def test_tiny_llama_five_adamw_steps_equal_one_process(variant):
    import torch
    import hyper_parallel as hp
    mesh = hp.init_device_mesh("cpu", (2,))
    got, want, ours, ref, (grads, ref_grads) = train_llama_cp(mesh, variant)
    for name, g in grads.items():
        torch.testing.assert_close(g, ref_grads[name], rtol=1e-5, atol=1e-6, msg=lambda m, n=name: f"step 0 grad {n}: {m}")
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want), rtol=1e-5, atol=1e-5)
    ref_params = dict(ref.named_parameters())
    for name, p in ours.named_parameters():
        full = p.full_tensor() if isinstance(p, hp.DTensor) else p
        # an AdamW step is ~lr (1e-2) per element for gradients >> eps; 5e-4 is 5% of one step
        torch.testing.assert_close(full, ref_params[name].detach(), rtol=1e-4, atol=5e-4,
                                   msg=lambda m, n=name: f"{variant} {n}: {m}")


@multi_rank(world_size=2, timeout=120)
def test_no_restore_buffers_and_rope_positions_follow_the_shard():
    import torch
    import hyper_parallel as hp
    from hyper_parallel.cp import context_parallel
    mesh = hp.init_device_mesh("cpu", (2,))
    rank = mesh.get_local_rank(0)
    ids, pos = torch.arange(16).view(1, 16), torch.arange(16)
    with context_parallel(mesh, buffers=[ids, pos], buffer_seq_dims=[1, 0], no_restore_buffers=[pos]):
        want = [0, 1, 2, 3, 12, 13, 14, 15] if rank == 0 else [4, 5, 6, 7, 8, 9, 10, 11]
        assert pos.tolist() == want and ids[0].tolist() == want  # head-tail positions feed RoPE
    assert ids.shape == (1, 16) and pos.tolist() == want


@pytest.mark.parametrize("styles", ["one", "split"])
@multi_rank(world_size=2, timeout=180)
def test_dsa_sparse_attention_and_indexer_loss_match_one_process(styles):
    import copy
    import torch
    import torch.distributed as dist
    import hyper_parallel as hp
    from hyper_parallel.cp import (AsyncDSASparseAttentionContextParallel, ContextParallel, DSAAttention,
                                   DSAIndexerContextParallel, DSAIndexerLossContextParallel, context_parallel_shard,
                                   context_parallel_unshard)
    from hyper_parallel.tp import parallelize_module
    mesh = hp.init_device_mesh("cpu", (2,))
    torch.manual_seed(0)
    ref = DSAAttention(dim=32, heads=4, kv_heads=2, index_heads=2, index_dim=8, topk=6).double()
    x = torch.randn(2, 16, 32, dtype=torch.float64)
    out, per_token = ref(x)
    (out.square().mean() + per_token.mean()).backward()
    ours = copy.deepcopy(ref)
    ours.zero_grad()
    if styles == "one":
        parallelize_module(ours, mesh, ContextParallel())
    else:
        parallelize_module(ours, mesh, {"indexer": DSAIndexerContextParallel(),
                                        "sparse": AsyncDSASparseAttentionContextParallel(),
                                        "indexer_loss": DSAIndexerLossContextParallel()})
    (x_local,) = context_parallel_shard(mesh, [x], [1])
    o, t = ours(x_local)
    (o.square().sum() / out.numel() + t.sum() / per_token.numel()).backward()
    got = context_parallel_unshard(mesh, [o.detach(), t.detach()], [1, 1])
    torch.testing.assert_close(got[0], out.detach(), rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(got[1], per_token.detach(), rtol=1e-10, atol=1e-12)
    assert per_token.abs().sum() > 0
    for (name, p), q in zip(ours.named_parameters(), ref.parameters()):
        dist.all_reduce(p.grad)  # each rank's grad covers its own tokens' loss terms
        assert q.grad.abs().sum() > 0, name
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-9, atol=1e-12, msg=lambda m, n=name: f"{styles} {n}: {m}")


@multi_rank(world_size=2, timeout=120)
def test_bytes_sent_equal_the_formulas():
    import torch
    import torch.nn.functional as F
    import hyper_parallel as hp
    from hyper_parallel.cp import comm_stats, context_parallel_shard
    from hyper_parallel.cp import context_parallel
    from hyper_parallel.cp.cost import method_bytes
    mesh = hp.init_device_mesh("cpu", (2,))
    seq, heads, kv_heads, dim = 32, 4, 2, 8
    for method, async_ in METHODS:
        q = torch.randn(2, heads, seq, dim)
        k, v = torch.randn(2, kv_heads, seq, dim), torch.randn(2, kv_heads, seq, dim)
        local = [t.requires_grad_(True) for t in context_parallel_shard(mesh, [q, k, v], [2, 2, 2])]
        with comm_stats() as stats, context_parallel(mesh, method=method, async_op=async_):
            F.scaled_dot_product_attention(*local, is_causal=True, enable_gqa=True).sum().backward()
        want = method_bytes(method, seq, 2, heads, kv_heads, dim, 4, batch=2)
        assert {ph: stats.total_bytes(phase=ph) for ph in ("fwd", "bwd")} == want, (method, async_)


@multi_rank(world_size=2, timeout=120)
def test_bad_input_gives_clear_errors():
    import torch
    import torch.nn.functional as F
    import hyper_parallel as hp
    from hyper_parallel.cp import AsyncContextParallel, ContextParallel, SequenceLengthError, context_parallel
    mesh = hp.init_device_mesh("cpu", (2,))
    ids = torch.zeros(2, 10, dtype=torch.long)
    with pytest.raises(SequenceLengthError, match=r"buffers\[0\].*sequence length 10 is not a positive multiple of 4"):
        with context_parallel(mesh, buffers=[ids], buffer_seq_dims=[1]):
            pass
    assert ids.shape == (2, 10)
    with pytest.raises(ValueError, match="2 buffers but 1 buffer_seq_dims"):
        with context_parallel(mesh, buffers=[ids, ids], buffer_seq_dims=[1]):
            pass
    with pytest.raises(ValueError, match=r"buffer_seq_dims\[0\]=2 is not a dim"):
        with context_parallel(mesh, buffers=[ids], buffer_seq_dims=[2]):
            pass
    with pytest.raises(ValueError, match=r"no_restore_buffers\[0\] are not among buffers"):
        with context_parallel(mesh, buffers=[ids], buffer_seq_dims=[1], no_restore_buffers=[torch.zeros(1)]):
            pass
    with pytest.raises(ValueError, match="requires grad"):
        with context_parallel(mesh, buffers=[torch.zeros(2, 8, requires_grad=True)], buffer_seq_dims=[1]):
            pass
    with pytest.raises(ValueError, match=r"method='p2p'"):
        with context_parallel(mesh, method="p2p"):
            pass
    with pytest.raises(ValueError, match="expected a 1-D CP mesh"):
        with context_parallel(hp.init_device_mesh("cpu", (1, 2))):
            pass
    with pytest.raises(ValueError, match="'alltoall' has no asynchronous variant"):
        AsyncContextParallel(method="alltoall")
    with pytest.raises(ValueError, match="load_balance: expected one of"):
        ContextParallel(load_balance="random")
    q = torch.randn(1, 3, 8, 4)
    with context_parallel(mesh, method="alltoall"):
        with pytest.raises(ValueError, match="3 query heads are not divisible by cp=2"):
            F.scaled_dot_product_attention(q, q, q)
    with context_parallel(mesh):
        with pytest.raises(ValueError, match="dropout_p=0.5 is not supported"):
            F.scaled_dot_product_attention(q, q, q, dropout_p=0.5)
        with pytest.raises(ValueError, match="either attn_mask or is_causal"):
            F.scaled_dot_product_attention(q, q, q, attn_mask=torch.ones(16, 16, dtype=torch.bool), is_causal=True)
        with pytest.raises(ValueError, match="same sequence shard"):
            F.scaled_dot_product_attention(q, q[:, :, :4], q[:, :, :4])
        with pytest.raises(SequenceLengthError, match=r"query \(1, 3, 3, 4\) x cp=2: sequence length 6"):
            F.scaled_dot_product_attention(q[:, :, :3], q[:, :, :3], q[:, :, :3])
        with pytest.raises(ValueError, match="attn_mask has 8 key columns"):
            F.scaled_dot_product_attention(q, q, q, attn_mask=torch.ones(8, 8, dtype=torch.bool))


@multi_rank(world_size=2, timeout=120)
def test_activation_checkpoint_recomputes_cp_attention():
    import copy
    import torch
    import torch.distributed as dist
    from torch.utils.checkpoint import checkpoint
    import hyper_parallel as hp
    from hyper_parallel.cp import context_parallel, context_parallel_shard
    from hyper_parallel.models.llama3 import LlamaForCausalLM, TINY_CONFIGS, parallelize_llama
    mesh = hp.init_device_mesh("cpu", (2,))
    torch.manual_seed(0)
    ref = LlamaForCausalLM(TINY_CONFIGS["debug"])
    ids, labels, pos = llama_batch(0)
    LlamaForCausalLM.loss(ref(ids), labels).backward()
    for how in ("style", "context"):
        ours = copy.deepcopy(ref)
        ours.zero_grad()
        for layer in ours.model.layers:  # recompute every decoder layer in backward
            layer.forward = (lambda f: lambda *a: checkpoint(f, *a, use_reentrant=False))(layer.forward)
        if how == "style":
            parallelize_llama(ours, cp_mesh=mesh)
            i, l, p = context_parallel_shard(mesh, [ids, labels, pos], [1, 1, 0])
            LlamaForCausalLM.loss(ours(i, position_ids=p), l).backward()
        else:
            i, l, p = ids.clone(), labels.clone(), pos.clone()
            with context_parallel(mesh, buffers=[i, l, p], buffer_seq_dims=[1, 1, 0]):
                LlamaForCausalLM.loss(ours(i, position_ids=p), l).backward()
        for (name, a), b in zip(ours.named_parameters(), ref.parameters()):
            dist.all_reduce(a.grad)
            torch.testing.assert_close(a.grad / 2, b.grad, rtol=1e-5, atol=1e-6, msg=lambda m, n=name: f"{how} {n}: {m}")


@multi_rank(world_size=2, timeout=180)
def test_uneven_shards_raise_sequence_length_error_on_every_rank():
    """31 tokens split 16 / 15 by the user (``torch.chunk``, or our ``Shard`` placement then ``to_local``) reach
    CP attention (the module style of the Llama CP plan, every method): every rank raises ``SequenceLengthError``
    naming both lengths, before any attention exchange (gloo used to abort a rank on the size mismatch). The group
    stays usable: an even split afterwards trains as before."""
    import torch
    import torch.distributed as dist
    import hyper_parallel as hp
    from hyper_parallel.cp import SequenceLengthError, context_parallel_shard
    from hyper_parallel.models.llama3.model import TINY_CONFIGS, LlamaForCausalLM
    from hyper_parallel.models.llama3.parallelize import llama_cp_plan
    from hyper_parallel.tp import parallelize_module
    mesh = hp.init_device_mesh("cpu", (2,), mesh_dim_names=("cp",))
    rank = dist.get_rank()
    torch.manual_seed(0)
    ids = torch.randint(0, TINY_CONFIGS["debug"].vocab_size, (1, 31))
    dt_local = hp.distribute_tensor(ids.float(), mesh, [hp.Shard(1)]).to_local().long()
    for method in ("ring", "allgather", "alltoall"):
        model = LlamaForCausalLM(TINY_CONFIGS["debug"])
        parallelize_module(model, mesh, llama_cp_plan(method))
        for local in (torch.chunk(ids, 2, dim=1)[rank], dt_local):
            assert local.shape[1] == (16, 15)[rank]
            pos = torch.arange(16)[:local.shape[1]] + 16 * rank
            with pytest.raises(SequenceLengthError, match=r"2 CP ranks hold sequence shards of lengths \[16, 15\] "
                                                          r"\(a global sequence of 31 split unevenly\).*multiple of 4"):
                model(local, position_ids=pos)
        even = ids[:, :28]
        shard, pos = context_parallel_shard(mesh, [even, torch.arange(28)], [1, 0])  # pylint: disable=W0632
        out = model(shard, position_ids=pos)
        assert out.shape == (1, 14, TINY_CONFIGS["debug"].vocab_size) and torch.isfinite(out).all()
