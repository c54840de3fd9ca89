# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ST: ``fully_shard`` where a 2-D mesh or 4 ranks is the point: HSDP (2, 2), TP x FSDP (2, 2) and
``reshard_after_forward=2`` on 4 ranks. Same parity protocol and fp32 tolerances as ``test_fsdp.py``
(5 AdamW steps, loss of every step and every gathered parameter vs one process)."""
import copy

import pytest

from hyper_parallel.testing import multi_rank
from tests.st.torch.test_fsdp import FP32, STEPS, batch, dp_mean, env_vars, make_mlp, shard_model, train_parity


@pytest.mark.parametrize("reduce", ["all_reduce", "reduce_scatter"])
@multi_rank(world_size=4, timeout=180)
def test_hsdp_2x2_parity(reduce):
    """``all_reduce``: one all-reduce over all 4 ranks + slice (gloo default); ``reduce_scatter``:
    reduce-scatter within the shard group, then all-reduce across the replicas."""
    import torch.distributed as dist
    import hyper_parallel as hp
    from hyper_parallel import Replicate, Shard
    mesh = hp.init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"))
    ref = make_mlp()
    with env_vars({"HYPER_PARALLEL_FSDP_REDUCE": reduce}):
        model = shard_model(copy.deepcopy(ref), mesh)
    w = model[0].weight
    assert w.placements == (Replicate(), Shard(0)) and tuple(w.shape) == (7, 12)
    assert tuple(w.to_local().shape) == ((4, 12) if mesh.get_coordinate()[1] == 0 else (3, 12))
    train_parity(model, ref, dp_rank=dist.get_rank(), dp_size=4)
    # clip_grad_norm_ over HSDP: summed within the shard group only (replicas hold the same shard)
    import torch
    import torch.nn.functional as F
    from hyper_parallel.fsdp import clip_grad_norm_
    x, y = batch(0)
    F.mse_loss(ref(x), y).backward()
    F.mse_loss(model(x.chunk(4)[dist.get_rank()]), y.chunk(4)[dist.get_rank()]).backward()
    torch.testing.assert_close(clip_grad_norm_(model.parameters(), 0.1).float(),
                               torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.1), **FP32)


@multi_rank(world_size=4, timeout=180)
def test_fsdp_reshard_after_forward_to_2_of_4_ranks():
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    import hyper_parallel as hp
    from hyper_parallel.fsdp._torch.unit import POST_FORWARD
    rank = dist.get_rank()
    mesh = hp.init_device_mesh("cpu", (4,))
    ref = make_mlp()
    model = shard_model(copy.deepcopy(ref), mesh, reshard_after_forward=2)
    x, y = batch(0)
    out = model(x.chunk(4)[rank])
    first = model[0].__dict__["_hp_fsdp_state"].unit
    assert first.state == POST_FORWARD  # keeps 1/2 of the unit: backward gathers within 2 ranks
    assert first.buckets[0].pf_shard.numel() == 4 * first.buckets[0].layout.total // 2
    F.mse_loss(out, y.chunk(4)[rank]).backward()
    ref_out = F.mse_loss(ref(x), y)
    ref_out.backward()
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.grad.full_tensor(), dict(ref.named_parameters())[n].grad, **FP32)
    model.zero_grad()
    ref.zero_grad()
    train_parity(model, ref, dp_rank=rank, dp_size=4)


def make_tp_module(tp_mesh, ref):
    """A column-parallel Linear, tanh, a row-parallel Linear (weights and the first bias TP-sharded, the
    last bias replicated), written with ``DTensor.from_local`` and an explicit Partial -> Replicate
    redistribute: ``hyper_parallel`` has no TP Linear rules in this tree yet."""
    import torch
    import torch.nn.functional as F
    from torch import nn
    import hyper_parallel as hp
    from hyper_parallel import Partial, Replicate, Shard

    class TPMLP(nn.Module):
        """TP version of ``nn.Sequential(Linear(12, 6), Tanh(), Linear(6, 3))``."""

        def __init__(self):
            super().__init__()
            self.tp = tp_mesh
            self.w1 = nn.Parameter(hp.distribute_tensor(ref[0].weight.detach(), tp_mesh, [Shard(0)]))
            self.b1 = nn.Parameter(hp.distribute_tensor(ref[0].bias.detach(), tp_mesh, [Shard(0)]))
            self.w2 = nn.Parameter(hp.distribute_tensor(ref[2].weight.detach(), tp_mesh, [Shard(1)]))
            self.b2 = nn.Parameter(hp.distribute_tensor(ref[2].bias.detach(), tp_mesh, [Replicate()]))

        def forward(self, x):
            h = torch.tanh(F.linear(x, self.w1.to_local(), self.b1.to_local()))
            partial = F.linear(h, self.w2.to_local())
            y = hp.DTensor.from_local(partial, self.tp, [Partial()]).redistribute(placements=[Replicate()])
            return y.to_local() + self.b2.to_local()

    return TPMLP()


@multi_rank(world_size=4, timeout=180)
def test_tp_x_fsdp_2x2_parity_and_full_state_dict():
    import torch
    import torch.nn.functional as F
    from torch import nn
    import hyper_parallel as hp
    from hyper_parallel import Replicate, Shard
    from hyper_parallel.fsdp import clip_grad_norm_, get_model_state_dict, set_model_state_dict
    mesh = hp.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    dp_rank = mesh.get_coordinate()[0]
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Linear(12, 6), nn.Tanh(), nn.Linear(6, 3))
    model = hp.fully_shard(make_tp_module(mesh["tp"], ref), mesh=mesh["dp"])
    names = {"w1": "0.weight", "b1": "0.bias", "w2": "2.weight", "b2": "2.bias"}
    # nested order: w1 is split by TP first (outer), then by FSDP within the TP shard
    w1, w2, b2 = model.w1, model.w2, model.b2
    assert w1.device_mesh.mesh_dim_names == ("tp", "dp") and w1.placements == (Shard(0), Shard(0))
    assert w2.device_mesh.mesh_dim_names == ("dp", "tp") and w2.placements == (Shard(0), Shard(1))
    assert b2.placements == (Shard(0), Replicate())
    tp_rows = 3  # 6 rows over tp=2, then 3 rows over dp=2 -> (2, 1)
    assert tuple(w1.to_local().shape) == ((2, 12) if dp_rank == 0 else (tp_rows - 2, 12))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    dp_group = mesh.get_group("dp")
    for step in range(STEPS):
        x, _ = batch(step)
        y = torch.randn(8, 3, generator=torch.Generator().manual_seed(step))
        ref_loss = F.mse_loss(ref(x), y)
        ref_loss.backward()
        ref_opt.step()
        ref_opt.zero_grad()
        loss = F.mse_loss(model(x.chunk(2)[dp_rank]), y.chunk(2)[dp_rank])
        loss.backward()
        opt.step()
        opt.zero_grad()
        torch.testing.assert_close(dp_mean(loss, dp_group), ref_loss.detach(), **FP32)
    ref_params = dict(ref.named_parameters())
    full = get_model_state_dict(model, full_state_dict=True)
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.full_tensor(), ref_params[names[name]].detach(), **FP32)
        torch.testing.assert_close(full[name], ref_params[names[name]].detach(), **FP32)
    # clip_grad_norm_ sums each gradient's norm over exactly its sharded mesh dims (b2 is TP-replicated)
    x, _ = batch(0)
    y = torch.randn(8, 3, generator=torch.Generator().manual_seed(0))
    F.mse_loss(ref(x), y).backward()
    F.mse_loss(model(x.chunk(2)[dp_rank]), y.chunk(2)[dp_rank]).backward()
    want = torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.1)
    got = clip_grad_norm_(model.parameters(), 0.1)
    torch.testing.assert_close(got.float(), want, **FP32)
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.grad.full_tensor(), ref_params[names[name]].grad, **FP32)
    other = hp.fully_shard(make_tp_module(mesh["tp"], nn.Sequential(nn.Linear(12, 6), nn.Tanh(), nn.Linear(6, 3))),
                           mesh=mesh["dp"])
    set_model_state_dict(other, full)
    for (n, p), q in zip(model.named_parameters(), other.parameters()):
        torch.testing.assert_close(q.to_local(), p.to_local(), rtol=0, atol=0, msg=n)


@multi_rank(world_size=4, timeout=300)
def test_tp_x_fsdp_tiny_llama_with_parallelize_llama():
    """The real TP plan (TP + SP) on the tiny Llama, then one FSDP unit per decoder layer plus the root
    on the dp dim; 3 AdamW steps against one process. TP changes the summation order of the row-parallel
    matmuls and norms, so the tolerance is 1e-4."""
    import torch
    import torch.nn.functional as F
    import hyper_parallel as hp
    from hyper_parallel.models.llama3 import TINY_CONFIGS, LlamaForCausalLM, parallelize_llama
    mesh = hp.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    dp_rank = mesh.get_coordinate()[0]
    cfg = TINY_CONFIGS["debug"]
    torch.manual_seed(0)
    ref = LlamaForCausalLM(cfg)
    model = parallelize_llama(copy.deepcopy(ref), mesh["tp"])
    for layer in model.model.layers:
        hp.fully_shard(layer, mesh=mesh["dp"])
    hp.fully_shard(model, mesh=mesh["dp"])
    assert model.model.layers[0].mlp.gate_proj.weight.placements == (hp.Shard(0), hp.Shard(0))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-3)

    def loss_of(m, ids):
        logits = m(ids)
        return F.cross_entropy(logits[:, :-1].reshape(-1, cfg.vocab_size), ids[:, 1:].reshape(-1))

    for step in range(3):
        ids = torch.randint(0, cfg.vocab_size, (4, 16), generator=torch.Generator().manual_seed(step))
        ref_loss = loss_of(ref, ids)
        ref_loss.backward()
        ref_opt.step()
        ref_opt.zero_grad()
        loss = loss_of(model, ids.chunk(2)[dp_rank])
        loss.backward()
        opt.step()
        opt.zero_grad()
        torch.testing.assert_close(dp_mean(loss, mesh.get_group("dp")), ref_loss.detach(), rtol=1e-4, atol=1e-4)
    ref_params = dict(ref.named_parameters())
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.full_tensor(), ref_params[name].detach(), rtol=1e-4, atol=1e-4,
                                   msg=lambda m, n=name: f"{n}: {m}")
