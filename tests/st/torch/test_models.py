# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ST: each registered model's ``parallelize_fn`` on 2 ranks trains like one process (5 AdamW steps)."""
import pytest

from hyper_parallel.testing import multi_rank


def _train(model, steps, ids, labels, loss_fn, lr=1e-2):
    import torch
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = loss_fn(model(ids), labels)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("model_name, flavor, layout", [
    ("llama3", "debug", {"tp": 2}),
    ("llama3", "debug", {"dp_shard": 2}),
    ("llama3", "debug_moe", {"dp_shard": 2, "ep": 2}),
    ("qwen3", "debug", {"tp": 2}),
    ("qwen3", "debug", {"dp_shard": 2}),
    ("qwen3_moe", "debug", {"dp_shard": 2, "ep": 2}),
    ("qwen3_moe", "debug", {"tp": 2, "ep": 2}),
    ("deepseek_v3", "debug", {"dp_shard": 2, "ep": 2}),
    ("deepseek_v3", "debug", {"tp": 2, "ep": 2}),
    ("qwen3_moe", "debug", {"tp": 2, "ep": 2, "trainer_dims": True}),
    ("qwen3", "debug", {"dp_shard": 2, "trainer_dims": True}),
])
@multi_rank(world_size=2, timeout=300)
def test_registry_parallelize_fn_trains_like_one_process(model_name, flavor, layout):
    import copy
    import dataclasses
    import torch
    import torch.distributed as dist
    import hyper_parallel as hp
    from hyper_parallel.models import ParallelDims, get_model_spec
    spec = get_model_spec(model_name)
    layout = dict(layout)
    if layout.pop("trainer_dims", False):  # the trainer's own ParallelDims (its mesh omits size-1 dims)
        from hyper_parallel.trainer import ParallelDims as TrainerDims
        dims = TrainerDims(**{"dp_shard": 1, **layout, "world_size": 2})
    else:
        dims = ParallelDims(world_size=2, **layout)
    mesh = dims.build_mesh("cpu")
    torch.manual_seed(0)
    moe = spec.config(flavor).moe
    # the auxiliary load-balancing loss sees each rank's tokens only: switched off to compare the main loss
    ref = spec.build(flavor, moe=dataclasses.replace(moe, aux_loss_coeff=0.0)) if moe is not None else spec.build(flavor)
    ours = spec.parallelize_fn(copy.deepcopy(ref), mesh, dims)
    ids = torch.randint(0, ref.config.vocab_size, (2, 16))
    labels = torch.randint(0, ref.config.vocab_size, (2, 16))
    if dims.tp == 1:  # data parallel: each rank trains on its own half of the batch
        rank = dist.get_rank()
        want = _train(ref, 5, ids, labels, spec.loss_fn)
        got = _train(ours, 5, ids[rank:rank + 1], labels[rank:rank + 1], spec.loss_fn)
        got_t = torch.tensor(got)
        dist.all_reduce(got_t)
        got = (got_t / 2).tolist()
    else:
        want = _train(ref, 5, ids, labels, spec.loss_fn)
        got = _train(ours, 5, ids, labels, spec.loss_fn)
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want), rtol=1e-5, atol=1e-6)
    # parameters: AdamW steps each element by about lr (1e-2) whatever its gradient's size, so an element
    # with a ~0 gradient moves on fp32 summation-order noise; 1e-3 is a tenth of one step
    for name, p in ours.named_parameters():
        full = p.full_tensor() if isinstance(p, hp.DTensor) else p
        torch.testing.assert_close(full, dict(ref.named_parameters())[name].detach(), rtol=1e-3, atol=1e-3,
                                   msg=lambda m: f"{model_name}/{flavor} {layout} {name}: {m}")
