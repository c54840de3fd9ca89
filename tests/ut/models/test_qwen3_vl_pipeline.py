# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT (one process): the Qwen3-VL pipeline stage modules chained by hand equal the whole model, for both
placements; ``pack_vl_batch`` and ``stage_layers`` reject bad input."""
import pytest
import torch

from hyper_parallel.models.qwen3_vl import FLAVORS, Qwen3VLForConditionalGeneration
from hyper_parallel.models.qwen3_vl.pipeline import (Qwen3VLStageModule, image_token_costs, pack_vl_batch,
                                                     stage_layers)

CFG = FLAVORS["debug"]
WIDTH = 3 * 2 * 8 * 8


def _batch():
    """Text only, one 4x4-patch image, two images (4x4 and 2x6 patches); right padding."""
    g = torch.Generator().manual_seed(0)
    grids = torch.tensor([[1, 4, 4], [1, 4, 4], [1, 2, 6]])
    pix = torch.randn(int(grids.prod(-1).sum()), WIDTH, generator=g)
    s, e, im = CFG.vision_start_token_id, CFG.vision_end_token_id, CFG.image_token_id
    rows = [[3, 4, 5, 6, 7], [1, s] + [im] * 4 + [e, 2], [8, s] + [im] * 4 + [e, s] + [im] * 3 + [e, 9]]
    width = max(len(r) for r in rows)
    ids = torch.tensor([r + [0] * (width - len(r)) for r in rows])
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    return {"input_ids": ids, "attention_mask": mask, "pixel_values": pix, "image_grid_thw": grids}


@pytest.mark.parametrize("placement,stages", [("stage0", 3), ("stage0", 2), ("mpipe", 2), ("mpipe", 3)])
def test_stage_chain_equals_the_model(placement, stages):
    torch.manual_seed(0)
    model = Qwen3VLForConditionalGeneration(CFG)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.1)
    raw = _batch()
    want = model(**raw)
    packed = pack_vl_batch(CFG, **raw)
    assert packed["pixel_values"].shape == (3, 28, WIDTH) and packed["image_grid_thw"].shape == (3, 2, 3)
    assert image_token_costs(packed) == [1.0, 17.0, 29.0]
    layers = stage_layers(CFG.text.num_hidden_layers, stages, placement)
    parts = [Qwen3VLStageModule(model, layers[s], encoder=s == 0, head=s == stages - 1) for s in range(stages)]
    out = (packed["input_ids"], packed["pixel_values"], packed["image_grid_thw"])
    for part in parts:
        out = part(*out, position_ids=packed["position_ids"], attention_mask=packed["attention_mask"])
        out = out if isinstance(out, tuple) else (out,)
    torch.testing.assert_close(out[0], want, rtol=1e-5, atol=1e-6)
    names = {n for part in parts for n, _ in part.named_parameters()}
    assert names == {n for n, _ in model.named_parameters(remove_duplicate=False)}  # HF names, tied head too


def test_bad_input_is_named():
    raw = _batch()
    with pytest.raises(ValueError, match="pass pixel_values and image_grid_thw together"):
        pack_vl_batch(CFG, raw["input_ids"], pixel_values=raw["pixel_values"])
    with pytest.raises(ValueError, match="image_grid_thw has 4 images but input_ids holds placeholders for 3"):
        pack_vl_batch(CFG, raw["input_ids"], pixel_values=raw["pixel_values"],
                      image_grid_thw=torch.cat([raw["image_grid_thw"], torch.tensor([[1, 2, 2]])]))
    with pytest.raises(ValueError, match="sample 2 has image placeholder tokens beyond image_grid_thw"):
        pack_vl_batch(CFG, raw["input_ids"], pixel_values=raw["pixel_values"], image_grid_thw=raw["image_grid_thw"][:2])
    part = Qwen3VLStageModule(Qwen3VLForConditionalGeneration(CFG), [1], encoder=False, head=False)
    with pytest.raises(ValueError, match="position_ids is missing"):
        part(torch.zeros(1, 4, CFG.text.hidden_size))
    with pytest.raises(ValueError, match="placement='x'"):
        stage_layers(3, 2, "x")
    with pytest.raises(ValueError, match="stage 0 is the encoder stage"):
        stage_layers(3, 2, "mpipe", [1, 2])
