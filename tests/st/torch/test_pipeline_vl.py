# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ST (3 gloo ranks, one pool run; and one 4-rank run): Qwen3-VL under pipeline parallel equals one process.

A mixed batch of 4 samples (text only, one small image, one large image, two small images of different sizes),
packed by ``pack_vl_batch``. Four pipelines:

* ``stage0`` on 3 ranks (1F1B, m=2): vision tower + embedding + layer 0 on rank 0 (DeepStack level 1 carried
  on to rank 1), layer 1 on rank 1, layer 2 + head on rank 2; untied embeddings.
* ``mpipe`` on 3 ranks (ScheduleMpipe, m=2, balanced by image tokens, encoder all forwards ahead): the encoder
  stage alone on rank 0, layers 0-1 on rank 1 (both DeepStack levels consumed there), layer 2 + head on rank 2.
* ``stage0`` on the 2-rank group {0, 1} (GPipe, m=4) and ``mpipe`` on it (m=4, encoder_ahead=1): tied
  embeddings summed across the two ranks.

Each compares the merged logits (in the caller's sample order) and every gradient of its stage with the whole
model on one process.
"""
from hyper_parallel.testing import multi_rank

TOL = dict(rtol=1e-4, atol=1e-5)


def _batch(cfg):
    """Text only; one 4x4-patch image; one 8x8-patch image; two images (4x4 and 4x6 patches). Random patch
    values stand in for the processor's output (the model only sees patches and grids); no transformers import
    in the ranks."""
    import torch
    from hyper_parallel.models.qwen3_vl.pipeline import pack_vl_batch
    grids = torch.tensor([[1, 4, 4], [1, 8, 8], [1, 4, 4], [1, 4, 6]])
    pix = torch.randn(int(grids.prod(-1).sum()), 3 * 2 * 8 * 8, generator=torch.Generator().manual_seed(0))
    n = (grids.prod(-1) // 4).tolist()
    s, e, im = cfg.vision_start_token_id, cfg.vision_end_token_id, cfg.image_token_id
    rows = [[3, 4, 5, 6, 10, 11, 12, 13],
            [1, s] + [im] * n[0] + [e, 7],
            [2, s] + [im] * n[1] + [e, 8, 9],
            [14, s] + [im] * n[2] + [e, s] + [im] * n[3] + [e, 15]]
    width = max(len(r) for r in rows)
    ids = torch.tensor([r + [0] * (width - len(r)) for r in rows])
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    labels = torch.cat([ids[:, 1:], torch.zeros(4, 1, dtype=torch.long)], 1)
    labels = labels.masked_fill(torch.cat([mask[:, 1:], torch.zeros(4, 1, dtype=torch.long)], 1) == 0, -100)
    labels = labels.masked_fill(labels == im, -100)
    raw = {"input_ids": ids, "attention_mask": mask, "pixel_values": pix, "image_grid_thw": grids}
    return raw, pack_vl_batch(cfg, **raw), labels


def _case(cfg, placement, group, m, schedule="1F1B", mpipe_config=None, encoder_ranks=1):
    import copy
    import torch
    import torch.nn.functional as F
    import torch.distributed as dist
    from hyper_parallel.models.qwen3_vl import Qwen3VLForConditionalGeneration
    from hyper_parallel.models.qwen3_vl.pipeline import image_token_costs, pipeline_qwen3_vl
    torch.manual_seed(0)
    ref = Qwen3VLForConditionalGeneration(cfg)
    with torch.no_grad():
        for p in ref.parameters():
            p.normal_(0.0, 0.1)
    raw, packed, labels = _batch(cfg)
    count = int((labels != -100).sum())

    def loss_fn(logits, target):  # a sum over tokens / a constant: the same for any microbatch split
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), target.reshape(-1),
                               reduction="sum") / count

    ours = copy.deepcopy(ref)
    ref_logits = ref(**raw)
    (loss_fn(ref_logits, labels) / m).backward()
    sched, part = pipeline_qwen3_vl(ours, n_microbatches=m, placement=placement, schedule=schedule,
                                    pp_group=group, loss_fn=loss_fn, mpipe_config=mpipe_config,
                                    encoder_ranks=encoder_ranks)
    rank, p = dist.get_rank(group), dist.get_world_size(group)
    extra = {"sample_costs": image_token_costs(packed)} if placement == "mpipe" and rank == 0 else {}
    args = (packed["input_ids"], packed["pixel_values"], packed["image_grid_thw"]) if rank < encoder_ranks else ()
    losses = []
    out = sched.step(*args, target=labels if rank == p - 1 else None, losses=losses if rank == p - 1 else None,
                     position_ids=packed["position_ids"], attention_mask=packed["attention_mask"], **extra)
    where = f"{placement} on {p} ranks ({encoder_ranks} encoder), rank {rank}"
    if rank == p - 1:
        torch.testing.assert_close(out, ref_logits.detach(), **TOL, msg=lambda t: f"{where} logits: {t}")
        torch.testing.assert_close(sum(losses), loss_fn(ref_logits, labels).detach(), **TOL)
    theirs = dict(ref.named_parameters())
    if cfg.text.tie_word_embeddings:  # one Parameter in the reference; its gradient sums both uses
        theirs["lm_head.weight"] = theirs["model.language_model.embed_tokens.weight"]
    names = [n for n, _ in part.named_parameters()]
    assert names, where
    for name, q in part.named_parameters():
        assert q.grad is not None, f"{where}: {name} got no gradient"
        torch.testing.assert_close(q.grad, theirs[name].grad, **TOL, msg=lambda t, name=name: f"{where} {name}: {t}")
    return names, getattr(sched, "microbatch_groups", [])


@multi_rank(world_size=3, timeout=600)
def test_qwen3_vl_pipeline_stage0_and_mpipe_equal_one_process():
    import dataclasses
    import torch.distributed as dist
    from hyper_parallel.models.qwen3_vl import FLAVORS
    from hyper_parallel.pipeline import MpipeConfig
    cfg = FLAVORS["debug"]
    untied = dataclasses.replace(cfg, text=dataclasses.replace(cfg.text, tie_word_embeddings=False))
    rank = dist.get_rank()
    names, _ = _case(untied, "stage0", None, 2)
    expect = {0: "model.visual.patch_embed.proj.weight", 1: "model.language_model.layers.1.mlp.up_proj.weight",
              2: "lm_head.weight"}[rank]
    assert expect in names, (rank, names)
    names, groups = _case(untied, "mpipe", None, 2)
    assert ("model.visual.blocks.0.attn.q_proj.weight" in names) == (rank == 0)
    assert ("model.language_model.layers.0.self_attn.q_proj.weight" in names) == (rank == 1)
    # costs 1 (text), 17, 65, 41 (patches + 1): heaviest first -> {65, 1} and {41, 17}, not the contiguous split
    assert groups == [[0, 2], [1, 3]], groups
    pair = dist.new_group([0, 1])
    if rank < 2:
        _case(cfg, "stage0", pair, 4, schedule="GPipe")
        _, groups = _case(cfg, "mpipe", pair, 4, mpipe_config=MpipeConfig(encoder_ahead=1))
        assert sorted(g[0] for g in groups) == [0, 1, 2, 3]
    dist.barrier()


@multi_rank(world_size=4, timeout=600)
def test_qwen3_vl_mpipe_with_a_two_rank_encoder_stage_equals_one_process():
    """Mpipe on 4 ranks: the encoder stage data parallel on ranks {0, 1} (one sample of each 2-sample microbatch
    per rank; the balanced microbatch {text, large} gives rank 0 a text-only share, so its tower runs on the
    blank image), layers 0-1 on rank 2, layer 2 + head on rank 3. The encoder's Shard(0) outputs (hidden state
    and both DeepStack levels) are gathered onto rank 2 by the cross-mesh machinery, their gradients come back
    by the adjoint blocks and the encoder gradients are summed over {0, 1}: logits, loss and every gradient
    equal one process."""
    import dataclasses
    import torch.distributed as dist
    from hyper_parallel.models.qwen3_vl import FLAVORS
    cfg = FLAVORS["debug"]
    untied = dataclasses.replace(cfg, text=dataclasses.replace(cfg.text, tie_word_embeddings=False))
    rank = dist.get_rank()
    names, groups = _case(untied, "mpipe", None, 2, encoder_ranks=2)
    assert ("model.visual.blocks.0.attn.q_proj.weight" in names) == (rank < 2), (rank, names)
    assert ("model.language_model.layers.0.self_attn.q_proj.weight" in names) == (rank == 2), (rank, names)
    assert ("lm_head.weight" in names) == (rank == 3), (rank, names)
    assert groups == [[0, 2], [1, 3]], groups
    dist.barrier()
