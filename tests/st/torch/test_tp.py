# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ST: tensor-parallel styles, parallelize_module, loss parallel and the Llama TP(+SP) plan, each
compared with the same model on one process (forward, backward, and 5 AdamW steps)."""
import pytest

from hyper_parallel.testing import multi_rank


def _grads_full(module):
    """name -> full gradient (DTensor grads gathered)."""
    from hyper_parallel import DTensor
    out = {}
    for name, p in module.named_parameters():
        g = p.grad
        out[name] = g.full_tensor() if isinstance(g, DTensor) else g
    return out


@multi_rank(world_size=2, timeout=300)
def test_linear_and_embedding_styles_match_one_process():
    import copy
    import torch
    import hyper_parallel as hp
    from hyper_parallel import Replicate, Shard
    from hyper_parallel.tp import ColwiseParallel, RowwiseParallel, parallelize_module
    mesh = hp.init_device_mesh("cpu", (2,))
    torch.manual_seed(0)
    cases = [
        (torch.nn.Linear(6, 8), ColwiseParallel(), torch.randn(3, 6)),
        (torch.nn.Linear(6, 8), ColwiseParallel(output_layouts=Replicate()), torch.randn(3, 6)),
        (torch.nn.Linear(8, 5), RowwiseParallel(input_layouts=Replicate()), torch.randn(3, 8)),
        (torch.nn.Linear(8, 5), RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(0)),
         torch.randn(4, 8)),
        (torch.nn.Embedding(10, 6), RowwiseParallel(), torch.randint(0, 10, (3, 4))),
        (torch.nn.Embedding(10, 6), ColwiseParallel(output_layouts=Replicate()), torch.randint(0, 10, (3, 4))),
    ]
    for ref, style, x in cases:
        ours = parallelize_module(copy.deepcopy(ref), mesh, style)
        w = torch.randn(ref(x).shape)
        (ref(x) * w).sum().backward()
        out = ours(x)
        full = out.full_tensor() if isinstance(out, hp.DTensor) else out
        if isinstance(style, RowwiseParallel) and style.output_layouts == (Shard(0),):
            full = hp.DTensor.from_local(out, mesh, [Shard(0)]).full_tensor()
        elif isinstance(style, ColwiseParallel) and style.output_layouts is None:
            full = hp.DTensor.from_local(out, mesh, [Shard(-1)]).full_tensor()
        torch.testing.assert_close(full, ref(x), msg=lambda m: f"{type(style).__name__} {type(ref).__name__}: {m}")
        (full * w).sum().backward()
        for name, g in _grads_full(ours).items():
            torch.testing.assert_close(g, dict(ref.named_parameters())[name].grad,
                                       msg=lambda m: f"grad {name} {type(style).__name__}: {m}")


@multi_rank(world_size=2, timeout=120)
def test_bad_plans_give_clear_errors():
    import torch
    import hyper_parallel as hp
    from hyper_parallel.models.llama3 import LlamaConfig, LlamaForCausalLM, parallelize_llama
    from hyper_parallel.tp import ColwiseParallel, SequenceParallel, parallelize_module
    mesh = hp.init_device_mesh("cpu", (2,))
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    with pytest.raises(ValueError, match=r"plan key 'layers\.\*\.wq' matches no submodule"):
        parallelize_module(model, mesh, {"layers.*.wq": ColwiseParallel()})
    with pytest.raises(TypeError, match="supports nn.Linear and nn.Embedding, got ReLU"):
        parallelize_module(model, mesh, {"1": ColwiseParallel()})
    with pytest.raises(TypeError, match="must be a ParallelStyle"):
        parallelize_module(model, mesh, {"0": "colwise"})
    odd = LlamaForCausalLM(LlamaConfig(num_attention_heads=4, num_key_value_heads=1, hidden_size=32))
    with pytest.raises(ValueError, match="num_key_value_heads=1 is not divisible by the TP degree 2"):
        parallelize_llama(odd, mesh)
    with pytest.raises(ValueError, match="expected a 1-D device mesh"):
        SequenceParallel().apply(torch.nn.LayerNorm(4), hp.init_device_mesh("cpu", (1, 2)))


def _train(model, steps, ids, labels, loss_fn, lr=1e-2):
    import torch
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = loss_fn(model, ids, labels)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("variant", ["tp", "tp_sp", "tp_sp_loss_parallel", "tp_sp_unfused"])
@multi_rank(world_size=2, timeout=600)
def test_llama_tp_training_matches_one_process(variant):
    import copy
    import torch
    import hyper_parallel as hp
    from hyper_parallel.models.llama3 import LlamaForCausalLM, TINY_CONFIGS, parallelize_llama
    from hyper_parallel.tp import loss_parallel
    mesh = hp.init_device_mesh("cpu", (2,))
    torch.manual_seed(0)
    ref = LlamaForCausalLM(TINY_CONFIGS["debug"])
    ours = copy.deepcopy(ref)
    sp = variant != "tp"
    lp = variant == "tp_sp_loss_parallel"
    parallelize_llama(ours, mesh, sequence_parallel=sp, loss_parallel=lp, fused_sp_grad=variant != "tp_sp_unfused")
    ids = torch.randint(0, 256, (2, 16))
    labels = torch.randint(0, 256, (2, 16))
    labels[0, :3] = -100

    def ref_loss(m, i, lab):
        return LlamaForCausalLM.loss(m(i), lab)

    def our_loss(m, i, lab):
        if lp:
            with loss_parallel():
                logits = m(i)
                return hp.tp.vocab_parallel_cross_entropy(logits, lab)
        return LlamaForCausalLM.loss(m(i), lab)

    want = _train(ref, 5, ids, labels, ref_loss)
    got = _train(ours, 5, ids, labels, our_loss)
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want), rtol=1e-4, atol=1e-5)
    ref_params = dict(ref.named_parameters())
    # Parameters: AdamW normalises each update to about lr (1e-2) in size, so an element whose
    # gradient is ~0 can flip its step on fp32 summation-order noise; 1e-4 is 1% of one step.
    for name, p in ours.named_parameters():
        full = p.full_tensor() if isinstance(p, hp.DTensor) else p
        torch.testing.assert_close(full, ref_params[name].detach(), rtol=1e-4, atol=1e-4,
                                   msg=lambda m: f"{variant} {name}: {m}")


@multi_rank(world_size=2, timeout=300)
def test_shard_module_custom_shard_dfunction_value_and_grad():
    import copy
    import torch
    import hyper_parallel as hp
    from hyper_parallel import Layout, Partial, Replicate, Shard
    mesh = hp.init_device_mesh("cpu", (2,))
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
    ours = copy.deepcopy(ref)
    layout = Layout((2,), ("tp",))
    hp.shard_module(ours, mesh, {
        "parameters": {"0.weight": (Shard(0),), "0.bias": layout("tp"), "2.weight": layout("None", "tp")},
        "inputs": {"": (Replicate(),)},
        "outputs": {"": (Replicate(),)},
        "use_local_output": [""],
    })
    assert ours[0].weight.placements == (Shard(0),) and ours[2].weight.placements == (Shard(1),)
    x = torch.randn(5, 6)
    w = torch.randn(5, 4)
    out = ours(x)
    assert type(out) is torch.Tensor
    torch.testing.assert_close(out, ref(x))
    (out * w).sum().backward()
    (ref(x) * w).sum().backward()
    for (name, p), (_, q) in zip(ours.named_parameters(), ref.named_parameters()):
        g = p.grad.full_tensor() if isinstance(p.grad, hp.DTensor) else p.grad
        torch.testing.assert_close(g, q.grad, msg=lambda m: f"{name}: {m}")
    with pytest.raises(ValueError, match="parameter pattern 'nope.*' matches nothing"):
        hp.shard_module(copy.deepcopy(ref), mesh, {"parameters": {"nope.*": (Shard(0),)}})
    with pytest.raises(ValueError, match=r"parameter 0.bias of shape \[8\]: .*out of range for a 1-D tensor"):
        hp.shard_module(copy.deepcopy(ref), mesh, {"parameters": {"0.bias": (Shard(1),)}})
    with pytest.raises(ValueError, match="unknown plan key"):
        hp.shard_module(copy.deepcopy(ref), mesh, {"params": {}})

    # custom_shard: a local row-wise softmax on Shard(0) rows, gradients right
    a = torch.randn(6, 5, requires_grad=True)
    da = hp.distribute_tensor(a.detach(), mesh, [Replicate()]).requires_grad_()
    f = hp.custom_shard(lambda t: torch.softmax(t, -1), mesh, [(Shard(0),)], [(Shard(0),)])
    y = f(da)
    assert y.placements == (Shard(0),)
    wy = torch.randn(6, 5)
    (y.full_tensor() * wy).sum().backward()
    (torch.softmax(a, -1) * wy).sum().backward()
    torch.testing.assert_close(da.grad.to_local(), a.grad)

    class LocalMatmul(hp.DFunction):
        """x[S(1)] @ w[S(0)] -> Partial, with a hand-written backward."""

        @staticmethod
        def forward(ctx, x, wt):
            ctx.save_for_backward(x, wt)
            return x @ wt

        @staticmethod
        def backward(ctx, g):
            x, wt = ctx.saved_tensors
            return g @ wt.t(), x.t() @ g

        @staticmethod
        def infer_layout(px, pw):
            return [(Shard(1),), (Shard(0),)], [(Partial(),)]

    xm = torch.randn(3, 4, requires_grad=True)
    wm = torch.randn(4, 2, requires_grad=True)
    dx = hp.distribute_tensor(xm.detach(), mesh, [Replicate()]).requires_grad_()
    dw = hp.distribute_tensor(wm.detach(), mesh, [Replicate()]).requires_grad_()
    z = LocalMatmul.apply(dx, dw)
    assert z.placements == (Partial(),)
    g = torch.randn(3, 2)
    (z.full_tensor() * g).sum().backward()
    (xm @ wm * g).sum().backward()
    torch.testing.assert_close(dx.grad.to_local(), xm.grad)
    torch.testing.assert_close(dw.grad.to_local(), wm.grad)

    # parallelize_value_and_grad on a functional loss
    p1 = torch.nn.Parameter(hp.distribute_tensor(torch.randn(8, 6), mesh, [Shard(0)]))
    vg = hp.parallelize_value_and_grad(lambda inp: (torch.nn.functional.linear(inp, p1) ** 2).sum(), [p1])
    loss, grads = vg(torch.randn(4, 6, generator=torch.Generator().manual_seed(5)))
    p_ref = p1.full_tensor().detach().requires_grad_()
    ref_loss = (torch.nn.functional.linear(torch.randn(4, 6, generator=torch.Generator().manual_seed(5)),
                                           p_ref) ** 2).sum()
    ref_loss.backward()
    torch.testing.assert_close(loss, ref_loss.detach())
    assert grads[0].placements == (Shard(0),)
    torch.testing.assert_close(grads[0].full_tensor(), p_ref.grad)
