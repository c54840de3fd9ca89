# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Image-text SFT data for Qwen3-VL from local files: the generated caption set, the record checks (file and
line named), the token layout (placeholders per merged patch, loss only on the answer), padding, and a few
training steps of the debug model on it (one process)."""
import json

import pytest
import torch
import transformers

from hyper_parallel.models.qwen3_vl import FLAVORS, Qwen3VLForConditionalGeneration
from hyper_parallel.trainer.vl_data import VLDataError, VLEncoder, collate, draw_caption_set, read_records


def _encoder(records):
    texts = []
    for r in records:
        for turn in r["messages"]:
            content = turn["content"]
            texts.append(content if isinstance(content, str) else " ".join(p.get("text", "") for p in content))
    vocab = {w: i + 1 for i, w in enumerate(sorted({w for t in texts for w in t.split()}))}
    proc = transformers.Qwen2VLImageProcessorPil(patch_size=8, merge_size=2, temporal_patch_size=2,
                                                 min_pixels=16 * 16, max_pixels=64 * 64)
    return VLEncoder(lambda s: [vocab[w] for w in s.split()], proc, FLAVORS["debug"]), vocab


def test_caption_set_encodes_to_qwen3_vl_inputs_and_trains(tmp_path):
    records = read_records(draw_caption_set(tmp_path, n=8, seed=1))
    assert len(records) == 8 and (tmp_path / "images" / "0007.png").is_file()
    enc, vocab = _encoder(records)
    cfg = enc.config
    sample = enc.encode(records[0])
    ids, labels = sample["input_ids"].tolist(), sample["labels"].tolist()
    n_image = int(sample["image_grid_thw"].prod()) // 4
    assert ids.count(cfg.image_token_id) == n_image > 0
    assert ids[0] == cfg.vision_start_token_id and ids[n_image + 1] == cfg.vision_end_token_id
    answer = records[0]["messages"][1]["content"].split()
    assert [t for t in labels if t != -100] == [vocab[w] for w in answer]       # loss only on the answer
    assert labels[-len(answer):] == ids[-len(answer):] and set(labels[:-len(answer)]) == {-100}
    batch = collate([enc.encode(r) for r in records[:3]])
    assert batch["input_ids"].shape[0] == 3 and batch["image_grid_thw"].shape == (3, 3)
    assert int(batch["attention_mask"].sum()) == sum(len(enc.encode(r)["input_ids"]) for r in records[:3])
    torch.manual_seed(0)
    model = Qwen3VLForConditionalGeneration(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(6):
        logits = model(batch["input_ids"], batch["attention_mask"], batch["pixel_values"], batch["image_grid_thw"])
        loss = model.loss(logits, batch["labels"])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert all(b < a for a, b in zip(losses, losses[1:])) and losses[-1] < 0.8 * losses[0], losses


@pytest.mark.parametrize("mutate, message", [
    (lambda r, d: "{not json", r"captions.jsonl:2: not valid JSON"),
    (lambda r, d: json.dumps({"text": "x"}), r"captions.jsonl:2: expected a non-empty list under 'messages'"),
    (lambda r, d: json.dumps({"messages": [r["messages"][0]]}), r"captions.jsonl:2: no assistant message"),
    (lambda r, d: json.dumps({"messages": [{"role": "user", "content": [{"type": "image", "path": "nope.png"}]},
                                           r["messages"][1]]}), r"captions.jsonl:2: image 'nope.png' not found"),
    (lambda r, d: (d / "bad.png").write_text("not a png") and json.dumps(
        {"messages": [{"role": "user", "content": [{"type": "image", "path": "bad.png"}]}, r["messages"][1]]}),
     r"captions.jsonl:2: image 'bad.png' cannot be read"),
    (lambda r, d: json.dumps({"messages": [{"role": "robot", "content": "hi"}]}), r"captions.jsonl:2: each message"),
])
def test_bad_records_are_named_with_file_and_line(tmp_path, mutate, message):
    path = draw_caption_set(tmp_path, n=2)
    lines = path.read_text(encoding="utf-8").splitlines()
    lines[1] = mutate(json.loads(lines[0]), tmp_path)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(VLDataError, match=message):
        read_records(path)
