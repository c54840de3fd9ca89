# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ST: Qwen3-VL under FSDP (2 ranks, each its own image-text sample) and TP (2 ranks, the whole batch; the language
model and the vision tower sharded) trains like one process: 3 SGD steps, the same losses and parameters."""
import pytest

from hyper_parallel.testing import multi_rank


def _sample(batch, index):
    """Sample ``index`` of the test batch with only its own pixels (images of sample 0, the video of sample 2)."""
    out = {k: batch[k][index:index + 1] for k in ("input_ids", "attention_mask", "mm_token_type_ids")}
    if index == 0:
        out.update(pixel_values=batch["pixel_values"], image_grid_thw=batch["image_grid_thw"])
    if index == 2:
        out.update(pixel_values_videos=batch["pixel_values_videos"], video_grid_thw=batch["video_grid_thw"])
    return out


def _loss(model, sample):
    import torch.nn.functional as F
    logits = model(**sample)
    labels = sample["input_ids"][:, 1:].masked_fill(sample["attention_mask"][:, 1:] == 0, -100)
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(), labels.reshape(-1))


def _steps(model, samples, n=3, lr=0.5):
    """``n`` SGD steps on the mean of the samples' losses (SGD: a gradient off by a factor shows, where Adam
    would normalise it away); the losses per step."""
    import torch
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    out = []
    for _ in range(n):
        opt.zero_grad()
        loss = sum(_loss(model, s) for s in samples) / len(samples)
        loss.backward()
        opt.step()
        out.append(loss.detach())
    return torch.stack(out)


@pytest.mark.parametrize("layout", ["fsdp", "tp"])
@multi_rank(world_size=2, timeout=600)
def test_qwen3_vl_trains_like_one_process(layout):
    import copy
    import torch
    import torch.distributed as dist
    import hyper_parallel as hp
    from hyper_parallel.models.qwen3_vl import FLAVORS, Qwen3VLForConditionalGeneration
    from hyper_parallel.models.qwen3_vl.parallelize import parallelize_qwen3_vl
    from tests.st.torch.vl_inputs import vl_batch
    cfg = FLAVORS["debug"]
    torch.manual_seed(0)
    ref = Qwen3VLForConditionalGeneration(cfg)
    with torch.no_grad():
        for p in ref.parameters():
            p.normal_(0.0, 0.1)
    batch = vl_batch(cfg)
    mesh = hp.init_device_mesh("cpu", (2,), mesh_dim_names=(layout,))
    ours = copy.deepcopy(ref)
    rank = dist.get_rank()
    samples = [_sample(batch, 0), _sample(batch, 2)]
    start = {k: v.detach().clone() for k, v in ref.named_parameters()}
    want = _steps(ref, samples)
    moved = max(float((p.detach() - start[k]).abs().max()) for k, p in ref.named_parameters())
    assert moved > 1e-2, moved  # the comparison below (1e-4) is a small fraction of how far training moved
    if layout == "fsdp":
        parallelize_qwen3_vl(ours, dp_mesh=mesh)
        got = _steps(ours, [samples[rank]])      # each rank its own sample; gradients averaged by FSDP
        dist.all_reduce(got)
        got = got / 2
    else:
        parallelize_qwen3_vl(ours, tp_mesh=mesh)
        visual = ours.model.visual
        for sharded in (visual.blocks[0].attn.q_proj.weight, visual.blocks[1].attn.v_proj.weight,
                        visual.blocks[0].mlp.linear_fc1.weight, visual.merger.linear_fc1.weight,
                        visual.deepstack_merger_list[0].linear_fc1.weight):  # the vision tower is TP-sharded too
            assert isinstance(sharded, hp.DTensor) and sharded.to_local().shape[0] * 2 == sharded.shape[0]
        assert isinstance(visual.blocks[0].attn.proj.weight, hp.DTensor)
        assert visual.blocks[0].attn.proj.weight.to_local().shape[1] * 2 == cfg.vision.hidden_size
        got = _steps(ours, samples)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    theirs = dict(ref.named_parameters())
    for name, p in ours.named_parameters():
        full = p.full_tensor() if isinstance(p, hp.DTensor) else p
        torch.testing.assert_close(full.detach(), theirs[name].detach(), rtol=1e-4, atol=1e-4,
                                   msg=lambda m, name=name: f"{layout} {name}: {m}")


def _steps_one_forward(model, samples, n=3, lr=0.5):
    """:func:`_steps` with the samples (same padded width) in one forward: the mean of their mean losses."""
    import torch
    joint = {k: torch.cat([s[k] for s in samples]) for k in ("input_ids", "attention_mask", "mm_token_type_ids")}
    for s in samples:
        joint.update({k: v for k, v in s.items() if k not in joint})
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    out = []
    for _ in range(n):
        opt.zero_grad()
        logits = model(**joint)
        losses = []
        for row in range(len(samples)):
            one = {k: v[row:row + 1] for k, v in joint.items() if k in ("input_ids", "attention_mask")}
            labels = one["input_ids"][:, 1:].masked_fill(one["attention_mask"][:, 1:] == 0, -100)
            losses.append(torch.nn.functional.cross_entropy(logits[row, :-1].float(), labels[0]))
        loss = sum(losses) / len(losses)
        loss.backward()
        opt.step()
        out.append(loss.detach())
    return torch.stack(out)


@multi_rank(world_size=2, timeout=600)
def test_qwen3_vl_moe_expert_parallel_trains_like_one_process():
    """Qwen3-VL-MoE with its experts split over 2 ranks (EP 2, FSDP for the rest), each rank its own sample,
    the auxiliary load-balancing loss on: the losses and every parameter after 3 SGD steps equal one process."""
    import copy
    import torch
    import torch.distributed as dist
    import hyper_parallel as hp
    from hyper_parallel.models.qwen3_vl_moe import FLAVORS, Qwen3VLMoeForConditionalGeneration, parallelize_qwen3_vl_moe
    from tests.st.torch.vl_inputs import vl_batch
    cfg = FLAVORS["debug"]
    torch.manual_seed(0)
    ref = Qwen3VLMoeForConditionalGeneration(cfg)
    with torch.no_grad():
        for p in ref.parameters():
            p.normal_(0.0, 0.1)
    batch = vl_batch(cfg)
    ours = copy.deepcopy(ref)
    rank = dist.get_rank()
    samples = [_sample(batch, 0), _sample(batch, 2)]
    want = _steps_one_forward(ref, samples)  # the routers' load statistics of both samples together, as under EP
    parallelize_qwen3_vl_moe(ours, hp.init_device_mesh("cpu", (2,), mesh_dim_names=("dp_shard",)), ep=2)
    experts = ours.model.language_model.layers[1].mlp.experts.gate_proj
    assert isinstance(experts, hp.DTensor) and experts.to_local().shape[0] == cfg.text.moe.num_experts // 2
    got = _steps(ours, [samples[rank]])
    dist.all_reduce(got)
    torch.testing.assert_close(got / 2, want, rtol=1e-5, atol=1e-6)
    theirs = dict(ref.named_parameters())
    for name, p in ours.named_parameters():
        full = p.full_tensor() if isinstance(p, hp.DTensor) else p
        torch.testing.assert_close(full.detach(), theirs[name].detach(), rtol=1e-4, atol=1e-4,
                                   msg=lambda m, name=name: f"ep {name}: {m}")


@multi_rank(world_size=2, timeout=600)
def test_qwen3_vl_moe_expert_parallel_under_tp_trains_like_one_process():
    """Qwen3-VL-MoE with TP 2 (vision tower and attention sharded) and its experts split over the same 2 ranks
    (EP 2 borrowed from dp x tp; each MoE block routes its TP rank's half of the sequence), both samples on both
    ranks in one forward, the auxiliary load-balancing loss on: losses and every parameter after 3 SGD steps equal
    one process."""
    import copy
    import torch
    import hyper_parallel as hp
    from hyper_parallel.models.parallel_dims import ParallelDims
    from hyper_parallel.models.qwen3_vl.train_spec import parallelize_qwen3_vl_job
    from hyper_parallel.models.qwen3_vl_moe import FLAVORS, Qwen3VLMoeForConditionalGeneration
    from tests.st.torch.vl_inputs import vl_batch
    cfg = FLAVORS["debug"]
    assert cfg.text.moe.uses_aux_loss
    torch.manual_seed(0)
    ref = Qwen3VLMoeForConditionalGeneration(cfg)
    with torch.no_grad():
        for p in ref.parameters():
            p.normal_(0.0, 0.1)
    batch = vl_batch(cfg)
    ours = copy.deepcopy(ref)
    samples = [_sample(batch, 0), _sample(batch, 2)]
    start = {k: v.detach().clone() for k, v in ref.named_parameters()}
    want = _steps_one_forward(ref, samples)
    dims = ParallelDims(dp_shard=1, tp=2, ep=2, world_size=2)
    parallelize_qwen3_vl_job(ours, dims.build_mesh("cpu"), dims)
    experts = ours.model.language_model.layers[1].mlp.experts.gate_proj
    assert isinstance(experts, hp.DTensor) and experts.to_local().shape[0] == cfg.text.moe.num_experts // 2
    assert isinstance(ours.model.visual.blocks[0].attn.q_proj.weight, hp.DTensor)
    got = _steps_one_forward(ours, samples)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    theirs = dict(ref.named_parameters())
    for name, p in ours.named_parameters():  # measured against how far training moved each tensor: the routers
        full = (p.full_tensor() if isinstance(p, hp.DTensor) else p).detach()  # move ~3e-5 only
        moved = float((theirs[name].detach() - start[name]).abs().max())
        err = float((full - theirs[name].detach()).abs().max())
        assert moved > 0 and err <= 1e-3 * moved, (name, err, moved)
