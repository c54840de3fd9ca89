# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Image-text rows for VLTrainer (one process): a processor folder written offline and read back by
transformers, the chat template rendered with image placeholders expanded per merged patch, loss only on the
assistant's tokens, packing and truncation that never cut an image, the max-pixels budget, caption folders
(metadata.jsonl or .txt beside each image), bad records named with file and line, and the config refusals."""
import dataclasses
import json
import os

import pytest
import torch
from PIL import Image

from hyper_parallel.models.qwen3_vl import FLAVORS, rope_index
from hyper_parallel.trainer.config import ConfigError, load_config
from hyper_parallel.trainer.sft import SFTStats
from hyper_parallel.trainer.vl_data import VLDataError, draw_caption_set
from hyper_parallel.trainer.vl_sft import (VLProcessor, build_vl_dataset, encode_vl_record, iter_vl_records,
                                           make_vl_processor, pack_vl_samples, vl_texts)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("vl_sft")
    captions = draw_caption_set(folder / "set", n=6, seed=2)
    make_vl_processor(folder / "processor", vl_texts(captions))
    return folder, captions, VLProcessor(str(folder / "processor"))


def _records(path):
    out = []
    for where, rec in iter_vl_records(str(path)):
        assert not isinstance(rec, Exception), (where, rec)
        out.append(rec)
    return out


def test_processor_tokens_and_loss_on_the_assistant_only(data):
    _, captions, proc = data
    rec = _records(captions)[0]
    sample = encode_vl_record(rec, proc)
    (t, h, w), = sample.grids
    n = t * h * w // 4
    ids, ids_image = sample.ids, proc.token_ids["image_token_id"]
    assert ids.count(ids_image) == n and sample.pixels[0].shape[0] == t * h * w
    start = ids.index(ids_image)
    assert ids[start - 1] == proc.token_ids["vision_start_token_id"]
    assert ids[start + n] == proc.token_ids["vision_end_token_id"]
    answer = proc.tokenizer.decode([i for i, keep in zip(ids, sample.train) if keep])
    assert answer == rec["messages"][1]["content"] + "<|im_end|>\n"
    rendered = proc.tokenizer.decode(ids)  # the template's layout, the placeholder repeated per merged patch
    assert rendered.startswith("<|im_start|>user\n<|vision_start|>" + "<|image_pad|>" * n + "<|vision_end|>")


def test_packing_keeps_images_whole_and_positions_per_sample(data):
    _, captions, proc = data
    cfg = FLAVORS["debug"]
    cfg = dataclasses.replace(cfg, **proc.token_ids)
    samples = [encode_vl_record(r, proc) for r in _records(captions)]
    lengths = [len(s.ids) - 1 for s in samples]
    rows = pack_vl_samples(samples, max(lengths[:2]) + min(lengths), proc, cfg, packing=True)
    assert len(rows) < len(samples)  # some rows hold several samples
    images = 0
    for row in rows:
        grids = row["image_grid_thw"]
        n = sum(t * h * w for t, h, w in grids)
        assert row["pixel_values"].shape[0] == n
        assert row["input_ids"].count(proc.token_ids["image_token_id"]) == n // 4
        docs = [d for d in row["doc_ids"] if d >= 0]
        ids = torch.tensor([row["input_ids"][:len(docs)]])
        first = docs.index(1) if 1 in docs else len(docs)
        want = rope_index(ids[:, :first], cfg, torch.tensor(grids[:1]))[:, 0]  # the first sample's MRoPE
        assert torch.equal(torch.tensor(row["position_ids"])[:, :first], want)
        if 1 in docs:
            assert row["position_ids"][0][first] == 0  # the next sample starts over
        images += len(grids)
    assert images == len(samples)
    # a sample cut at seq_len never keeps part of an image: the cut moves before the image
    stats = SFTStats()
    sample = samples[0]
    start = sample.ids.index(proc.token_ids["image_token_id"])
    cut = pack_vl_samples([sample], start + 1, proc, cfg, packing=True, stats=stats)
    assert not cut and stats.truncated == 1 and stats.dropped == 1  # nothing with loss before the image
    rec = {"messages": [{"role": "user", "content": "a long question " * 3},
                        {"role": "assistant", "content": "an answer"},
                        {"role": "user", "content": [{"type": "image", "path": "images/0000.png"}]},
                        {"role": "assistant", "content": "a caption"}], "_base": str(captions.parent)}
    two = encode_vl_record(rec, proc)
    first_image = two.ids.index(proc.token_ids["image_token_id"])
    kept = pack_vl_samples([two], first_image + 2, proc, cfg, packing=True, stats=SFTStats())
    assert len(kept) == 1 and kept[0]["pixel_values"] is None and kept[0]["image_grid_thw"] == []
    assert proc.token_ids["vision_start_token_id"] not in kept[0]["input_ids"]


def test_max_pixels_budget_bounds_each_image(data, tmp_path):
    folder, _, _ = data
    Image.new("RGB", (400, 200), "red").save(tmp_path / "big.png")
    rec = {"messages": [{"role": "user", "content": [{"type": "image", "path": "big.png"}]},
                        {"role": "assistant", "content": "a red picture"}], "_base": str(tmp_path)}
    wide = encode_vl_record(rec, VLProcessor(str(folder / "processor"), max_pixels=64 * 64))
    small = encode_vl_record(rec, VLProcessor(str(folder / "processor"), max_pixels=32 * 32))
    for sample, budget in ((wide, 64 * 64), (small, 32 * 32)):
        (t, h, w), = sample.grids
        assert h * w * 8 * 8 <= budget and t == 1
    assert small.grids[0][1] * small.grids[0][2] < wide.grids[0][1] * wide.grids[0][2]


def test_caption_folders_and_bad_records_named(data, tmp_path):
    _, _, proc = data
    side = tmp_path / "side"
    side.mkdir()
    for i, colour in enumerate(("red", "blue")):
        Image.new("RGB", (32, 32), colour).save(side / f"{i}.png")
        (side / f"{i}.txt").write_text(f"a {colour} square")
    recs = _records(side)
    assert [r["messages"][1]["content"] for r in recs] == ["a red square", "a blue square"]
    Image.new("RGB", (32, 32), "green").save(side / "2.png")
    (side / "3.png").write_bytes(b"not a png")
    Image.new("RGB", (600, 2), "green").save(side / "4.png")
    (side / "4.txt").write_text("a line")
    (side / "3.txt").write_text("broken")
    errors = {where: str(rec) for where, rec in iter_vl_records(str(side)) if isinstance(rec, Exception)}
    assert "no caption (expected 2.txt beside it" in errors[str(side / "2.png")]
    assert "cannot be read" in errors[str(side / "3.png")]
    assert "unusable dimensions 600x2" in errors[str(side / "4.png")]
    meta = tmp_path / "meta"
    meta.mkdir()
    Image.new("RGB", (32, 48), "red").save(meta / "a.png")
    (meta / "metadata.jsonl").write_text(json.dumps({"file_name": "a.png", "text": "a red box"}) + "\n"
                                         + json.dumps({"file_name": "gone.png", "text": "x"}) + "\n")
    out = list(iter_vl_records(str(meta)))
    assert out[0][1]["messages"][1]["content"] == "a red box"
    assert isinstance(out[1][1], VLDataError) and f"{meta / 'metadata.jsonl'}:2: image 'gone.png' not found" in str(
        out[1][1])
    with pytest.raises(VLDataError, match=r"metadata.jsonl:2: image 'gone.png' not found.*bad_records = 'skip'"):
        build_vl_dataset([str(meta)], [], proc, FLAVORS["debug"], seq_len=64, packing=True, bad_records="fail",
                         eval_fraction=0.1)


@pytest.mark.parametrize("overrides, message", [
    ([("data.processor", "")], "data.processor: model 'qwen3_vl' reads image-text data"),
    ([("data.format", "text")], "data.format: a vision-language run reads conversations"),
    ([("model.name", "qwen3")], "data.processor: model 'qwen3' is not a vision-language model"),
])
def test_config_refusals_name_the_key(overrides, message):
    from hyper_parallel.trainer.validate import validate_job
    with pytest.raises(ConfigError, match=message):  # data keys when read (layouts: tests/ut/models/test_vl_layout.py)
        validate_job(load_config(os.path.join(ROOT, "configs", "vl_demo.toml"), overrides))


@pytest.mark.parametrize("name, flavor", [("qwen3_vl_moe", "debug"), ("qwen3_5_moe_vl", "debug_moe")])
def test_vl_moe_expert_parallel_with_tp_is_accepted(name, flavor):
    from hyper_parallel.trainer.validate import validate_job
    validate_job(load_config(os.path.join(ROOT, "configs", "vl_demo.toml"), [  # once refused: experts whole under TP
        ("model.name", name), ("model.flavor", flavor), ("parallelism.tp", 2), ("parallelism.ep", 2),
        ("parallelism.dp_shard", 2), ("job.nproc", 4)]))
