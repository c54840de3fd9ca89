# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Qwen3.5 and Qwen3.5-MoE vision-language models against transformers' ``Qwen3_5ForConditionalGeneration`` /
``Qwen3_5MoeForConditionalGeneration`` (the numerical reference), one process: real images (drawn with Pillow,
preprocessed by transformers' Qwen2-VL image processor) of two sizes in one sample, a text-only sample, left
and right padding and a 4-frame video; the weights go HF -> ``save_pretrained`` -> our adapter (``load_hf``);
logits and every gradient equal; the adapter round trip is bit-exact both ways; the MRoPE positions equal
transformers'; packed documents equal separate runs; config fields are honoured or refused by name."""
import dataclasses

import pytest
import torch
from safetensors.torch import load_file

import transformers
from hyper_parallel.checkpoint import load_hf
from hyper_parallel.models import get_model_spec
from hyper_parallel.models.llama3.model import document_mask
from hyper_parallel.models.qwen3_vl.model import rope_index
from tests.st.torch.vl_inputs import vl_batch

TOL = 1e-5
MODELS = [("qwen3_5_vl", "debug", transformers.Qwen3_5Config, transformers.Qwen3_5ForConditionalGeneration),
          ("qwen3_5_moe_vl", "debug_moe", transformers.Qwen3_5MoeConfig,
           transformers.Qwen3_5MoeForConditionalGeneration)]
IDS = ["dense", "moe"]


def _hf_model(spec, cfg, hf_config_cls, hf_cls, seed=0):
    hf_cfg = hf_config_cls(**spec.state_dict_adapter(cfg).hf_config())
    hf_cfg._attn_implementation = "eager"  # pylint: disable=protected-access
    torch.manual_seed(seed)
    hf = hf_cls(hf_cfg).float()
    with torch.no_grad():  # spread what HF initialises flat, and make the images move the logits
        for name, p in hf.named_parameters():
            if name.startswith("model.visual."):
                p.normal_(0.0, 0.2)
            elif name.endswith("norm.weight") or name.endswith("dt_bias"):
                p.add_(torch.randn_like(p) * 0.3)
            elif name.endswith("mlp.gate.weight"):
                p.normal_(std=0.5)
    return hf


def _ours_from_hf(spec, cfg, hf, tmp_path):
    hf.save_pretrained(tmp_path / "hf")
    ours = spec.model_cls(cfg)
    load_hf(ours, tmp_path / "hf", spec.state_dict_adapter(cfg))
    return ours


def _hf_grads(model):
    """HF gradients under the names ``save_pretrained`` writes (fused in-memory experts split per expert)."""
    out = {}
    for name, p in model.named_parameters():
        if name.endswith("mlp.experts.gate_up_proj"):
            stem, half = name[:-len("gate_up_proj")], p.shape[1] // 2
            for e in range(p.shape[0]):
                out[f"{stem}{e}.gate_proj.weight"] = p.grad[e, :half]
                out[f"{stem}{e}.up_proj.weight"] = p.grad[e, half:]
        elif name.endswith("mlp.experts.down_proj"):
            for e in range(p.shape[0]):
                out[f"{name[:-len('down_proj')]}{e}.down_proj.weight"] = p.grad[e]
        else:
            out[name] = p.grad
    return out


@pytest.mark.parametrize("name, flavor, hf_config_cls, hf_cls", MODELS, ids=IDS)
def test_logits_and_gradients_equal_transformers(name, flavor, hf_config_cls, hf_cls, tmp_path):
    spec = get_model_spec(name)
    cfg = spec.config(flavor)
    hf = _hf_model(spec, cfg, hf_config_cls, hf_cls).eval()  # eval: no auxiliary MoE loss on either side
    ours = _ours_from_hf(spec, cfg, hf, tmp_path).eval()
    batch = vl_batch(cfg)
    assert len({tuple(g) for g in batch["image_grid_thw"].tolist()}) == 2  # two image sizes
    ref = hf(**batch, use_cache=False).logits
    got = ours(**batch)
    keep = batch["attention_mask"].bool()
    scale = ref[keep].abs().max()
    diff = float((ref[keep] - got[keep]).abs().max().detach() / scale)
    weights = torch.randn_like(ref) * keep[..., None]
    (ref * weights).sum().backward()
    (got * weights).sum().backward()
    grads = spec.state_dict_adapter(cfg).to_hf({n: p.grad for n, p in ours.named_parameters()})
    theirs = _hf_grads(hf)
    assert sorted(grads) == sorted(k for k, g in theirs.items() if g is not None)
    top = max(float(g.abs().max()) for g in theirs.values() if g is not None)
    gdiff = max(float((grads[k] - theirs[k]).abs().max()) for k in grads) / top
    print(f"{name}: logits max |diff| / max |logit| = {diff:.2e}; gradients max |diff| / max |grad| = {gdiff:.2e} "
          f"({len(grads)} tensors)")
    assert diff <= TOL and gdiff <= TOL
    assert all(float(theirs[k].abs().max()) > 0 for k in grads if k.startswith("model.visual."))
    with torch.no_grad():  # the pixels really move the logits; the text-only sample does not see them
        blank = ours(**{**batch, "pixel_values": torch.zeros_like(batch["pixel_values"]),
                        "pixel_values_videos": torch.zeros_like(batch["pixel_values_videos"])})
    for row in (0, 2):
        assert (blank[row][keep[row]] - got[row][keep[row]]).abs().max() > 1e-3
    assert torch.equal(blank[1], got[1].detach())
    with pytest.raises(ValueError, match="image placeholder tokens in input_ids but no pixel_values"):
        ours(batch["input_ids"], batch["attention_mask"])


@pytest.mark.parametrize("name, flavor, hf_config_cls, hf_cls", MODELS[:1], ids=IDS[:1])
def test_rope_index_matches_transformers(name, flavor, hf_config_cls, hf_cls):
    spec = get_model_spec(name)
    cfg = spec.config(flavor)
    hf = _hf_model(spec, cfg, hf_config_cls, hf_cls)
    batch = vl_batch(cfg)
    want, _ = hf.model.get_rope_index(batch["input_ids"], batch["mm_token_type_ids"], batch["image_grid_thw"],
                                      batch["video_grid_thw"].clone(), batch["attention_mask"])
    got = rope_index(batch["input_ids"], cfg, batch["image_grid_thw"], batch["video_grid_thw"],
                     batch["attention_mask"])
    assert torch.equal(want, got)


@pytest.mark.parametrize("name, flavor, hf_config_cls, hf_cls", MODELS, ids=IDS)
def test_adapter_round_trip_is_bit_exact_both_ways(name, flavor, hf_config_cls, hf_cls, tmp_path):
    spec = get_model_spec(name)
    cfg = spec.config(flavor)
    adapter = spec.state_dict_adapter(cfg)
    hf = _hf_model(spec, cfg, hf_config_cls, hf_cls, seed=5)
    hf.save_pretrained(tmp_path / "hf")
    saved = {}
    for f in sorted((tmp_path / "hf").glob("*.safetensors")):
        saved.update(load_file(f))
    ours = adapter.from_hf(saved)  # HF -> ours -> HF
    back = adapter.to_hf(ours)
    assert sorted(back) == sorted(saved) and all(torch.equal(back[k], saved[k]) for k in saved)
    model = spec.model_cls(cfg)  # ours -> HF -> ours, and every tensor of the model is in the checkpoint
    model.load_state_dict(ours, strict=True)
    sd = model.state_dict()
    again = adapter.from_hf(adapter.to_hf(sd))
    assert sorted(again) == sorted(sd) and all(torch.equal(again[k], sd[k]) for k in sd)
    assert ("lm_head.weight" in saved) == (not cfg.text.tie_word_embeddings)


@pytest.mark.parametrize("name, flavor, hf_config_cls, hf_cls", MODELS, ids=IDS)
def test_config_round_trip_and_refusals(name, flavor, hf_config_cls, hf_cls):
    spec = get_model_spec(name)
    cfg = spec.config(flavor)
    adapter_cls = spec.state_dict_adapter
    hf_dict = adapter_cls(cfg).hf_config()

    def read(hf):  # the delta rule's chunk length is ours, not a config.json field (any value: same values)
        got = adapter_cls.config_from_hf(hf)
        return dataclasses.replace(got, text=dataclasses.replace(got.text, chunk_size=cfg.text.chunk_size))
    assert read(hf_dict) == cfg
    assert read(hf_config_cls(**hf_dict)) == cfg  # transformers' own to_dict()
    default = hf_config_cls().to_dict()  # transformers' defaults = our hf_default (vision width = text width)
    default["vision_config"]["out_hidden_size"] = default["text_config"]["hidden_size"]
    assert adapter_cls.config_from_hf(default) == spec.config("hf_default")
    cases = [("text_config", "hidden_act", "gelu", r"text_config: .*hidden_act='gelu' is not supported"),
             ("text_config", "attn_output_gate", False, r"attn_output_gate=False is not supported"),
             ("vision_config", "hidden_act", "relu", r"vision_config: config.json hidden_act='relu' is not supported"),
             ("vision_config", "window_size", 112, r"vision_config: config.json window_size=112 is not a field"),
             (None, "audio_token_id", 7, r"audio_token_id=7 is not a field this model knows")]
    for level, key, value, message in cases:
        bad = {**hf_dict, "text_config": dict(hf_dict["text_config"]), "vision_config": dict(hf_dict["vision_config"])}
        (bad if level is None else bad[level])[key] = value
        with pytest.raises(ValueError, match=message):
            adapter_cls.config_from_hf(bad)
    bad = {**hf_dict, "vision_config": {**hf_dict["vision_config"], "deepstack_visual_indexes": [0]}}
    with pytest.raises(ValueError, match="no DeepStack"):
        adapter_cls.config_from_hf(bad)


@pytest.mark.parametrize("name, flavor", [("qwen3_5_vl", "debug"), ("qwen3_5_moe_vl", "debug_moe")], ids=IDS)
def test_packed_documents_equal_separate_runs(name, flavor):
    """Two image-text samples packed in one row under the trainer's document mask give the logits each gives
    alone (the linear-attention state and conv window reset at the second document)."""
    spec = get_model_spec(name)
    cfg = spec.config(flavor)
    torch.manual_seed(0)
    model = spec.model_cls(cfg).eval()
    with torch.no_grad():
        for p in model.model.visual.parameters():
            p.normal_(0.0, 0.2)
    batch = vl_batch(cfg)
    docs = []
    for row, grids in ((0, batch["image_grid_thw"]), (1, None)):
        keep = batch["attention_mask"][row].bool()
        docs.append((batch["input_ids"][row][keep], grids))
    ids = torch.cat([d[0] for d in docs])[None]
    pos = torch.cat([rope_index(d[0][None], cfg, d[1]) for d in docs], dim=2)
    doc_ids = torch.cat([torch.full((len(d[0]),), i) for i, d in enumerate(docs)])[None]
    with torch.no_grad():
        packed = model(ids, attention_mask=document_mask(doc_ids), pixel_values=batch["pixel_values"],
                       image_grid_thw=batch["image_grid_thw"], position_ids=pos)
        alone = [model(docs[0][0][None], pixel_values=batch["pixel_values"], image_grid_thw=docs[0][1]),
                 model(docs[1][0][None])]
    want = torch.cat(alone, dim=1)
    assert (packed - want).abs().max() <= TOL * want.abs().max()
