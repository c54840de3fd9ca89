# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Qwen3.5 / Qwen3.5-MoE on one process against Hugging Face ``transformers`` (the numerical oracle: its pure
torch ``torch_chunk_gated_delta_rule`` path): the delta rule itself, then logits *and* gradients of whole tiny
models for several ``layer_types`` patterns with and without padding masks (fp32, <= 1e-5); packed documents
equal separate runs; the state-dict adapter round-trips bit-exactly and refuses unknown config fields."""
import dataclasses

import pytest
import torch
import transformers
from transformers.models.qwen3_5 import modeling_qwen3_5 as hf_qwen3_5

from hyper_parallel.models import get_model_spec
from hyper_parallel.models.qwen3_5.gated_delta import chunk_gated_delta_rule, recurrent_gated_delta_rule

TOL = 1e-5
L, F = "linear_attention", "full_attention"
PATTERNS = [(L, F), (F, L, L), (L, L, L), (F, F), (L, L, F, L)]


def _rule_inputs(b, s, hk, hv, dk, dv, seed):
    gen = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(b, s, hk, dk, generator=gen) for _ in range(2))
    v = torch.randn(b, s, hv, dv, generator=gen)
    g = -torch.rand(b, s, hv, generator=gen) * 2
    beta = torch.rand(b, s, hv, generator=gen)
    s0 = torch.randn(b, hv, dk, dv, generator=gen)
    return [t.requires_grad_() for t in (q, k, v, g, beta, s0)]


@pytest.mark.parametrize("shape", [(2, 37, 2, 4, 16, 12, 8), (1, 70, 2, 2, 8, 8, 64), (2, 5, 1, 3, 8, 4, 4)])
def test_delta_rule_equals_transformers_forward_and_backward(shape):
    """Ours (any chunk size) vs transformers' chunked and recurrent rules: output, final state and every input
    gradient (grouped heads, lengths not a multiple of the chunk, an initial state)."""
    *dims, chunk = shape
    inputs = _rule_inputs(*dims, seed=sum(shape))
    kw = {"initial_state": inputs[5], "output_final_state": True, "use_qk_l2norm_in_kernel": True}
    o_ref, s_ref = hf_qwen3_5.torch_chunk_gated_delta_rule(*inputs[:5], chunk_size=64, **kw)
    o, s = chunk_gated_delta_rule(*inputs[:5], chunk_size=chunk, **kw)
    o_rec, s_rec = recurrent_gated_delta_rule(*inputs[:5], **kw)
    for got in ((o, s), (o_rec, s_rec)):
        assert (got[0] - o_ref).abs().max() <= TOL and (got[1] - s_ref).abs().max() <= TOL
    w_o, w_s = torch.randn_like(o_ref), torch.randn_like(s_ref)
    want = torch.autograd.grad((o_ref * w_o).sum() + (s_ref * w_s).sum(), inputs)
    got = torch.autograd.grad((o * w_o).sum() + (s * w_s).sum(), inputs)
    for name, a, b in zip(("q", "k", "v", "g", "beta", "state"), got, want):
        assert (a - b).abs().max() <= TOL, f"d{name} differs by {(a - b).abs().max()}"


def _hf_model(adapter, seed):
    hf_dict = dict(adapter.hf_config())
    model_type = hf_dict.pop("model_type")
    hf_dict.pop("architectures")
    config = transformers.AutoConfig.for_model(model_type, **hf_dict)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager", dtype=torch.float32)
    with torch.no_grad():  # HF initialises the zero-centred norms at 0 and routers at std 0.02: spread them
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or name.endswith("dt_bias"):
                p.add_(torch.randn_like(p) * 0.3)
            elif name.endswith("mlp.gate.weight"):
                p.normal_(std=0.5)
    return model


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


def _load_from_hf(spec, config, hf, tmp_path):
    from hyper_parallel.checkpoint import load_hf
    hf.save_pretrained(tmp_path / "hf")
    ours = spec.model_cls(config)
    load_hf(ours, tmp_path / "hf", spec.state_dict_adapter(config))
    return ours


@pytest.mark.parametrize("model_name, flavor", [("qwen3_5", "debug"), ("qwen3_5_moe", "debug_moe")])
@pytest.mark.parametrize("pattern", PATTERNS, ids=["".join(t[0].upper() for t in p) for p in PATTERNS])
def test_logits_and_gradients_equal_transformers(model_name, flavor, pattern, tmp_path):
    spec = get_model_spec(model_name)
    config = spec.config(flavor, layer_types=pattern, num_hidden_layers=len(pattern))
    adapter = spec.state_dict_adapter(config)
    hf = _hf_model(adapter, seed=len(pattern)).eval()  # eval: no auxiliary MoE loss in our gradients either
    ours = _load_from_hf(spec, config, hf, tmp_path).eval()
    torch.manual_seed(3)
    ids = torch.randint(0, config.vocab_size, (2, 19))
    mask = torch.ones(2, 19, dtype=torch.long)
    mask[0, :4] = 0  # left padding
    mask[1, 15:] = 0  # right padding
    weight = torch.randn(2, 19, config.vocab_size)
    report = []
    for m in (None, mask):
        hf.zero_grad()
        ours.zero_grad()
        want = hf(input_ids=ids, attention_mask=m, use_cache=False).logits
        got = ours(ids, attention_mask=m)
        keep = torch.ones(2, 19, dtype=torch.bool) if m is None else m.bool()
        diff = (got[keep] - want[keep]).abs().max().item()
        (want * weight * keep[..., None]).sum().backward()
        (got * weight * keep[..., None]).sum().backward()
        grads = adapter.to_hf({n: p.grad for n, p in ours.named_parameters()})
        hf_grads = _hf_grads(hf)
        assert sorted(grads) == sorted(k for k, g in hf_grads.items() if g is not None)
        # the loss sums 9728 weighted logits, so gradients reach ~1e2: the error is measured relative to the
        # model's largest gradient (<= 1e-5), and per tensor relative to its own largest (<= 1e-3: a tensor
        # computed wrongly is off by O(1) there) for the tensors whose gradients are not ~0 at this scale
        # (dt_bias / A_log of a saturated decay get 1e-5 while the embedding gets 1e2)
        scale = max(g.abs().max().item() for g in hf_grads.values() if g is not None)
        errors = {k: (grads[k] - hf_grads[k]).abs().max().item() for k in grads}
        gdiff = max(errors.values()) / scale
        worst = max(errors[k] / hf_grads[k].abs().max().item() for k in grads
                    if hf_grads[k].abs().max().item() >= 1e-4 * scale)
        report.append(f"{'padded' if m is not None else 'plain'} logits {diff:.1e} grads {gdiff:.1e} (abs "
                      f"{max(errors.values()):.1e}; worst tensor {worst:.1e})")
        assert diff <= TOL and gdiff <= TOL and worst <= 1e-2, (model_name, pattern, report)
    print(f"{model_name} {''.join(t[0].upper() for t in pattern)}: {'; '.join(report)}")


@pytest.mark.parametrize("model_name, flavor", [("qwen3_5", "debug"), ("qwen3_5_moe", "debug_moe")])
def test_packed_documents_equal_separate_runs(model_name, flavor):
    """Positions that restart mark packed documents: the logits of each document (linear attention reset, full
    attention within the document) equal the document run alone, and gradients flow."""
    spec = get_model_spec(model_name)
    torch.manual_seed(5)
    model = spec.build(flavor)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.add_(torch.randn_like(p) * 0.3)
    lengths = [(7, 3, 12), (1, 13, 8)]
    ids = torch.randint(0, model.config.vocab_size, (2, 22))
    positions = torch.cat([torch.cat([torch.arange(n) for n in row]).unsqueeze(0) for row in lengths])
    packed = model(ids, position_ids=positions)
    for r, row in enumerate(lengths):
        start = 0
        for n in row:
            alone = model(ids[r:r + 1, start:start + n])
            diff = (packed[r, start:start + n] - alone[0]).abs().max().item()
            assert diff <= TOL, f"row {r} document at {start} (length {n}) differs by {diff}"
            start += n
    assert (packed[0, 7:10] - model(ids[:1, :10])[0, 7:]).abs().max() > 1e-3, "packing changed nothing"
    packed.sum().backward()


@pytest.mark.parametrize("model_name, flavor", [("qwen3_5", "debug"), ("qwen3_5_moe", "debug_moe")])
def test_adapter_round_trip_is_bit_exact(model_name, flavor):
    spec = get_model_spec(model_name)
    config = spec.config(flavor)
    adapter = spec.state_dict_adapter(config)
    model = spec.build(flavor)
    ours = model.state_dict()
    hf = adapter.to_hf(ours)
    assert any(k.endswith("linear_attn.in_proj_qkv.weight") for k in hf)
    assert any(k.endswith("linear_attn.conv1d.weight") for k in hf)
    back = adapter.from_hf(hf)
    assert sorted(back) == sorted(ours)
    for key, value in ours.items():
        assert torch.equal(back[key], value), key
    config = dataclasses.replace(config, chunk_size=64)  # ours only: not in config.json
    assert spec.state_dict_adapter.config_from_hf(adapter.hf_config()) == config
    vl = {"architectures": ["Qwen3_5ForConditionalGeneration"], "text_config": adapter.hf_config(),
          "vision_config": {"depth": 2}}
    assert spec.state_dict_adapter.config_from_hf(vl) == config
    prefixed = spec.state_dict_adapter(config, text_prefix="model.language_model.").to_hf(ours)
    assert all(k.startswith("model.language_model.") or k == "lm_head.weight" for k in prefixed)


@pytest.mark.parametrize("field, value, message", [
    ("hidden_act", "gelu", "hidden_act='gelu' is not supported"),
    ("attention_bias", True, "attention_bias=True is not supported"),
    ("sliding_window", 128, "config.json sliding_window=128 is not a field this model knows"),
    ("rope_parameters", {"rope_type": "yarn", "rope_theta": 1e4}, "rope_type='yarn' is not supported"),
    ("layer_types", ["linear_attention", "sliding_attention", "full_attention", "full_attention"],
     "layer_types"),
])
def test_config_fields_are_honoured_or_refused(field, value, message):
    spec = get_model_spec("qwen3_5")
    hf_config = dict(spec.state_dict_adapter(spec.config("debug")).hf_config())
    hf_config[field] = value
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        spec.state_dict_adapter.config_from_hf(hf_config)


def test_published_configs_are_read():
    """The fields of the published text configs (Qwen3.5-0.8B, Qwen3.5-35B-A3B, as in their config.json) give
    our flavors."""
    dense = {"vocab_size": 248320, "hidden_size": 1024, "intermediate_size": 3584, "num_hidden_layers": 24,
             "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 256, "attention_bias": False,
             "attn_output_gate": True, "linear_num_key_heads": 16, "linear_num_value_heads": 16,
             "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
             "rms_norm_eps": 1e-6, "full_attention_interval": 4, "max_position_embeddings": 262144,
             "tie_word_embeddings": True, "mtp_num_hidden_layers": 1, "mtp_use_dedicated_embeddings": False,
             "rope_parameters": {"mrope_interleaved": True, "mrope_section": [11, 11, 10], "rope_type": "default",
                                 "rope_theta": 10000000, "partial_rotary_factor": 0.25}}
    spec = get_model_spec("qwen3_5")
    assert spec.state_dict_adapter.config_from_hf({"text_config": dense}) == spec.config("0.8B")
    moe = {k: v for k, v in dense.items() if k not in ("intermediate_size", "tie_word_embeddings")}
    moe.update(hidden_size=2048, num_hidden_layers=40, num_attention_heads=16, linear_num_value_heads=32,
               num_experts=256, num_experts_per_tok=8, moe_intermediate_size=512, shared_expert_intermediate_size=512)
    spec = get_model_spec("qwen3_5_moe")
    assert spec.state_dict_adapter.config_from_hf(moe) == spec.config("35B-A3B")


def test_delta_rule_stays_fp32_under_autocast():
    """Under ``torch.autocast`` (bf16 training) the rule computes in fp32 like without it, backward included (the
    scan's backward used to meet bf16 states with fp32 matrices)."""
    gen = torch.Generator().manual_seed(0)
    shapes = [(2, 10, 2, 8), (2, 10, 2, 8), (2, 10, 4, 8), (2, 10, 4), (2, 10, 4)]
    base = [torch.randn(s, generator=gen) for s in shapes]
    base[3] = -torch.rand(shapes[3], generator=gen)  # log-decays <= 0
    base[4] = torch.rand(shapes[4], generator=gen)

    def run(autocast):
        args = [x.clone().requires_grad_() for x in base]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            out, _ = chunk_gated_delta_rule(*args, chunk_size=4, use_qk_l2norm_in_kernel=True)
        out.sum().backward()
        return out, [a.grad for a in args]

    (out_a, grads_a), (out_b, grads_b) = run(True), run(False)
    assert out_a.dtype == torch.float32 and torch.equal(out_a, out_b)
    for a, b in zip(grads_a, grads_b):
        assert torch.equal(a, b)
