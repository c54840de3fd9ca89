# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ST (one process): every model's ``debug`` flavor equals Hugging Face ``transformers`` on the same
random weights: a tiny random HF model is saved with ``save_pretrained``, loaded into ours through the
model's state-dict adapter (``load_hf``), logits compared with and without a padding mask; ours exported
with ``save_hf`` loads back into HF with the same tensors and logits. ``transformers`` is imported once,
for the whole module."""
import json
import os

import pytest
import torch
import transformers
from safetensors.torch import load_file

from hyper_parallel.checkpoint import load_hf, save_hf
from hyper_parallel.models import get_model_spec

CASES = [("llama3", "debug"), ("llama3", "debug_rope_llama3"), ("qwen3", "debug"), ("qwen3_moe", "debug"),
         ("deepseek_v3", "debug")]
TOL = 1e-5



def spread_routers(model, gate: str = "mlp.gate.weight", bias: str = "e_score_correction_bias") -> None:
    """HF initialises routers with std 0.02 and the expert bias with zeros: spread them, so routing differs
    between tokens and a wrong router shows in the logits (``gate`` / ``bias``: the name suffixes, Hugging
    Face's by default; ours are ``mlp.router.gate.weight`` / ``mlp.expert_bias``)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(gate):
                p.normal_(std=0.5)
        for name, b in model.named_buffers():
            if name.endswith(bias):
                b.copy_(torch.randn_like(b) * 0.1)


def _hf_model(adapter, seed: int):
    hf_dict = dict(adapter.hf_config())
    model_type = hf_dict.pop("model_type")
    hf_dict.pop("architectures")
    config = transformers.AutoConfig.for_model(model_type, **hf_dict)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager",
                                                          dtype=torch.float32)
    spread_routers(model)
    return model.eval()


def _saved(folder):
    out = {}
    for name in sorted(os.listdir(folder)):
        if name.endswith(".safetensors"):
            out.update(load_file(os.path.join(folder, name)))
    return out


@pytest.mark.parametrize("model_name, flavor", CASES)
def test_logits_equal_transformers_and_round_trip(model_name, flavor, tmp_path):
    spec = get_model_spec(model_name)
    config = spec.config(flavor)
    adapter = spec.state_dict_adapter(config)
    hf = _hf_model(adapter, seed=1)
    hf.save_pretrained(tmp_path / "hf")
    ours = spec.build(flavor).eval()
    load_hf(ours, tmp_path / "hf", adapter)

    torch.manual_seed(2)
    ids = torch.randint(0, config.vocab_size, (2, 12))
    mask = torch.ones(2, 12, dtype=torch.long)
    mask[0, :3] = 0  # left padding
    mask[1, 10:] = 0  # right padding
    with torch.no_grad():
        want = hf(input_ids=ids).logits
        got = ours(ids)
        diff = (got - want).abs().max().item()
        print(f"{model_name}/{flavor}: max |logit diff| vs transformers {diff:.2e}")
        assert diff <= TOL, f"{model_name}/{flavor}: logits differ from transformers by {diff}"
        want_m = hf(input_ids=ids, attention_mask=mask).logits
        got_m = ours(ids, attention_mask=mask)
        keep = mask.bool()
        diff_m = (got_m[keep] - want_m[keep]).abs().max().item()
        print(f"{model_name}/{flavor}: with padding mask {diff_m:.2e}")
        assert diff_m <= TOL, f"{model_name}/{flavor}: padded logits differ from transformers by {diff_m}"
        assert (got_m[0, 3:] - got[0, 3:]).abs().max() > 1e-3, "the padding mask changed nothing"

    save_hf(ours, tmp_path / "ours", adapter)
    original, exported = _saved(tmp_path / "hf"), _saved(tmp_path / "ours")
    if config.tie_word_embeddings:
        original.pop("lm_head.weight", None)
    assert sorted(exported) == sorted(original)
    for key, value in original.items():
        assert torch.equal(exported[key], value), f"{model_name}/{flavor}: {key} changed in the round trip"
    with open(tmp_path / "ours" / "config.json", encoding="utf-8") as f:
        assert json.load(f)["architectures"] == [spec.hf_architecture]
    back = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "ours", attn_implementation="eager").eval()
    with torch.no_grad():
        assert torch.equal(back(input_ids=ids).logits, want)


@pytest.mark.parametrize("model_name", ["llama3", "qwen3", "qwen3_moe", "deepseek_v3"])
def test_config_from_hf_round_trips(model_name):
    spec = get_model_spec(model_name)
    config = spec.config("debug")
    adapter = spec.state_dict_adapter(config)
    assert spec.state_dict_adapter.config_from_hf(adapter.hf_config()) == config


# one published size per family in CI (docs/models.md lists every flavor's count)
REAL_SIZES = [("llama3", "8B"), ("qwen3", "0.6B"), ("qwen3_moe", "30B-A3B"), ("deepseek_v3", "671B")]
#: published totals (Llama 3.1 8B's model card) where they count the same tensors as the model
PUBLISHED = {("llama3", "8B"): 8_030_261_248}


def _count(model):
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


@pytest.mark.parametrize("model_name, flavor", REAL_SIZES)
def test_real_sizes_build_on_meta_with_hf_parameter_counts(model_name, flavor):
    from hyper_parallel.models import init_empty_weights
    from hyper_parallel.testing.memory import AllocationTracker
    spec = get_model_spec(model_name)
    with AllocationTracker() as tracker:
        tracker.mark("before")
        with init_empty_weights():
            ours = spec.build(flavor)
        tracker.mark("after")
    assert all(p.is_meta for p in ours.parameters())
    assert tracker.peak("before", "after") < 1 << 20, "meta construction allocated memory"
    adapter = spec.state_dict_adapter(spec.config(flavor))
    hf_dict = dict(adapter.hf_config())
    model_type = hf_dict.pop("model_type")
    hf_dict.pop("architectures")
    with torch.device("meta"):
        hf = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(model_type, **hf_dict))
    ours_n, hf_n = _count(ours), _count(hf)
    print(f"{model_name}/{flavor}: {ours_n:,} parameters (transformers: {hf_n:,})")
    assert ours_n == hf_n
    if (model_name, flavor) in PUBLISHED:
        assert ours_n == PUBLISHED[model_name, flavor]


def test_deepseek_v3_mtp_logits_equal_transformers(tmp_path):
    """DeepSeek-V3 with one multi-token-prediction layer (``debug_mtp``): exported with ``save_hf``,
    loaded by transformers' ``DeepseekV3ForCausalLM`` and its MTP loader (``MtpModel.from_pretrained``, the
    module ``generate(use_mtp=True)`` drafts with); the MTP logits equal ours (and the checkpoint round-trips)."""
    from transformers.modeling_layers import MtpModel
    spec = get_model_spec("deepseek_v3")
    config = spec.config("debug_mtp")
    adapter = spec.state_dict_adapter(config)
    torch.manual_seed(3)
    ours = spec.build("debug_mtp").eval()
    spread_routers(ours, gate="mlp.router.gate.weight", bias="mlp.expert_bias")  # MTP layer included
    save_hf(ours, tmp_path / "ours", adapter)
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "ours", attn_implementation="eager").eval()
    # transformers finds the MTP weights through the main model's ignore patterns, written for the published
    # 61-layer checkpoint (model.layers.61.*); this config's MTP layer is layer num_hidden_layers
    hf._keys_to_ignore_on_load_unexpected = [rf"model\.layers\.{config.num_hidden_layers}\..*"]
    mtp = MtpModel.from_pretrained(hf).eval()
    assert mtp.num_mtp_layers == 1
    torch.manual_seed(4)
    ids = torch.randint(0, config.vocab_size, (2, 12))
    positions = torch.arange(12).expand(2, -1)
    with torch.no_grad():
        out = hf(input_ids=ids, output_hidden_states=True)
        hidden = mtp.forward_layer(0, out.hidden_states[-1][:, :-1], positions[:, 1:], None, input_ids=ids[:, 1:])
        want = mtp._project_to_logits(hidden)  # pylint: disable=protected-access
        got_main, got = ours(ids, return_mtp=True)
    main_diff = (got_main - out.logits).abs().max().item()
    diff = (got[0] - want).abs().max().item()
    print(f"deepseek_v3/debug_mtp: max |logit diff| main {main_diff:.2e}, MTP layer {diff:.2e}")
    assert main_diff <= TOL and diff <= TOL, (main_diff, diff)
    assert (got[0] - got_main[:, 1:]).abs().max() > 1e-2  # the MTP head is not the main head again
    loaded = spec.build("debug_mtp")
    load_hf(loaded, tmp_path / "ours", adapter)
    for key, value in ours.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value), key
