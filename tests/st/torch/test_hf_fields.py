# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Every field of each supported transformers config class is honoured, irrelevant to training, or refused.

For ``LlamaConfig``, ``Qwen3Config``, ``Qwen3MoeConfig``, ``DeepseekV3Config``, ``Qwen3_5TextConfig`` and
``Qwen3_5MoeTextConfig`` the test walks every field of
the class (``to_dict()`` of a default instance) and finds it in exactly one list of the model's adapter
(``hf_fields``). Honoured fields are proved by a parity case: a random transformers model with the field set
away from the base value is saved with ``save_pretrained``, built by ``config_from_hf`` and loaded by ``load_hf``,
and our logits equal transformers' (<= 1e-5, fp32); fields that do not reach the logits (the position limit,
the auxiliary-loss weight) are proved by the export round trip. Refused fields raise one line naming the field
and value. The counts per model are printed."""
import json

import pytest
import torch
import transformers

from hyper_parallel.checkpoint import load_hf
from hyper_parallel.models import get_model_spec
from tests.st.torch.test_models_hf import spread_routers

TOL = 1e-5
HF_CLASSES = {"llama3": transformers.LlamaConfig, "qwen3": transformers.Qwen3Config,
              "qwen3_moe": transformers.Qwen3MoeConfig, "deepseek_v3": transformers.DeepseekV3Config,
              "qwen3_5": transformers.Qwen3_5TextConfig, "qwen3_5_moe": transformers.Qwen3_5MoeTextConfig}
_SHAPES = {"vocab_size": 96, "hidden_size": 48, "intermediate_size": 80, "num_hidden_layers": 3,
           "num_attention_heads": 6, "num_key_value_heads": 3, "head_dim": 8, "rms_norm_eps": 1e-3,
           "tie_word_embeddings": True, "rope_parameters": {"rope_type": "default", "rope_theta": 500.0}}
_LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 5e5, "factor": 4.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 32}
#: model -> parity cases (field overrides on the debug flavor's config.json); every honoured field is in one
PARITY = {
    "llama3": [_SHAPES, {"hidden_act": "gelu"}, {"hidden_act": "gelu_pytorch_tanh"}, {"hidden_act": "relu"},
               {"hidden_act": "gelu_new"}, {"rope_parameters": _LLAMA3_ROPE},
               {"rope_parameters": None, "rope_scaling": _LLAMA3_ROPE, "rope_theta": 5e5}],
    "qwen3": [_SHAPES, {"hidden_act": "gelu"}, {"rope_parameters": None, "rope_theta": 321.0},
              {"use_sliding_window": False, "sliding_window": 4, "max_window_layers": 1}],
    "qwen3_moe": [{"vocab_size": 96, "hidden_size": 48, "num_attention_heads": 6, "num_key_value_heads": 3,
                   "head_dim": 8, "rms_norm_eps": 1e-3, "tie_word_embeddings": True, "num_hidden_layers": 3,
                   "moe_intermediate_size": 24, "num_experts": 6, "num_experts_per_tok": 3,
                   "norm_topk_prob": False, "mlp_only_layers": [0], "intermediate_size": 40},
                  {"num_experts": None, "num_local_experts": 5, "rope_parameters": None, "rope_theta": 777.0}],
    "deepseek_v3": [{"vocab_size": 96, "hidden_size": 48, "num_attention_heads": 6, "num_key_value_heads": 6,
                     "rms_norm_eps": 1e-3, "tie_word_embeddings": True, "num_hidden_layers": 3,
                     "intermediate_size": 80, "q_lora_rank": 16, "kv_lora_rank": 24, "qk_nope_head_dim": 8,
                     "qk_rope_head_dim": 4, "v_head_dim": 12, "first_k_dense_replace": 2, "moe_intermediate_size": 24,
                     "n_routed_experts": 6, "num_experts_per_tok": 3, "n_shared_experts": 2, "n_group": 3,
                     "topk_group": 2, "norm_topk_prob": False, "routed_scaling_factor": 1.5},
                    {"q_lora_rank": None, "rope_interleave": False},
                    {"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0,
                                         "original_max_position_embeddings": 32, "beta_fast": 32.0,
                                         "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0}}],
}
_QWEN3_5 = {"vocab_size": 96, "hidden_size": 48, "num_hidden_layers": 3, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 12, "rms_norm_eps": 1e-3, "tie_word_embeddings": True,
            "layer_types": ["full_attention", "linear_attention", "full_attention"], "linear_conv_kernel_dim": 3,
            "linear_key_head_dim": 8, "linear_value_head_dim": 12, "linear_num_key_heads": 2,
            "linear_num_value_heads": 4, "hidden_act": "silu",
            "rope_parameters": {"rope_type": "default", "rope_theta": 500.0, "partial_rotary_factor": 0.5,
                                "mrope_section": [1, 1, 1], "mrope_interleaved": True}}
#: legacy spellings: the layer pattern from full_attention_interval, rope from top-level fields
_QWEN3_5_LEGACY = {"layer_types": None, "full_attention_interval": 2, "rope_parameters": None,
                   "rope_scaling": {"rope_type": "default", "mrope_section": [4, 2, 2], "mrope_interleaved": True},
                   "rope_theta": 321.0, "partial_rotary_factor": 0.5}
PARITY.update({
    "qwen3_5": [{**_QWEN3_5, "intermediate_size": 80}, _QWEN3_5_LEGACY],
    "qwen3_5_moe": [{**_QWEN3_5, "moe_intermediate_size": 24, "num_experts": 6, "num_experts_per_tok": 3,
                     "shared_expert_intermediate_size": 40}, _QWEN3_5_LEGACY]})
#: honoured fields that do not reach the logits: proved by config_from_hf -> export config.json round trip
ROUND_TRIP = {"llama3": {"max_position_embeddings": 77}, "qwen3": {"max_position_embeddings": 77},
              "qwen3_moe": {"max_position_embeddings": 77, "router_aux_loss_coef": 0.02},
              "deepseek_v3": {"max_position_embeddings": 77, "num_nextn_predict_layers": 2},
              "qwen3_5": {"max_position_embeddings": 77},
              "qwen3_5_moe": {"max_position_embeddings": 77, "router_aux_loss_coef": 0.02}}
#: model -> {refused field: a value the model does not implement}
REFUSE = {"llama3": {"attention_bias": True, "mlp_bias": True, "attention_dropout": 0.1, "hidden_act": "tanh",
                     "quantization_config": {"quant_method": "fp8"}},
          "qwen3": {"use_sliding_window": True, "layer_types": ["sliding_attention", "full_attention"],
                    "attention_bias": True, "attention_dropout": 0.1, "hidden_act": "tanh"},
          "qwen3_moe": {"hidden_act": "gelu", "decoder_sparse_step": 2, "use_sliding_window": True,
                        "attention_bias": True},
          "deepseek_v3": {"hidden_act": "gelu", "attention_bias": True, "scoring_func": "softmax",
                          "topk_method": "greedy", "moe_layer_freq": 2, "attention_dropout": 0.5},
          "qwen3_5": {"hidden_act": "gelu", "attention_bias": True, "attention_dropout": 0.1,
                      "attn_output_gate": False, "mamba_ssm_dtype": "bfloat16",
                      "layer_types": ["linear_attention", "sliding_attention", "full_attention", "full_attention"]},
          "qwen3_5_moe": {"hidden_act": "gelu", "attention_bias": True, "attention_dropout": 0.1}}


def _base(model_name):
    spec = get_model_spec(model_name)
    return spec, dict(spec.state_dict_adapter(spec.config("debug")).hf_config())


def _save_hf(hf_dict, folder, seed=1):
    hf_dict = {k: v for k, v in hf_dict.items() if v is not None or k in ("q_lora_rank",)}
    model_type = hf_dict.pop("model_type")
    hf_dict.pop("architectures", None)
    config = transformers.AutoConfig.for_model(model_type, **hf_dict)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager", dtype=torch.float32)
    spread_routers(model)
    model.eval().save_pretrained(folder)
    return model


def _ours(spec, folder):
    with open(f"{folder}/config.json", encoding="utf-8") as fh:
        doc = json.load(fh)
    doc.pop("num_nextn_predict_layers", None)  # no MTP weights in these checkpoints (see the MTP test)
    config = spec.state_dict_adapter.config_from_hf(doc)
    model = spec.model_cls(config).eval()
    load_hf(model, folder, spec.state_dict_adapter(config))
    return model, config


def _logit_diff(hf, ours, vocab):
    torch.manual_seed(2)
    ids = torch.randint(0, vocab, (2, 12))
    with torch.no_grad():
        return (hf(input_ids=ids).logits - ours(ids)).abs().max().item()


@pytest.mark.parametrize("model_name", list(HF_CLASSES))
def test_every_field_is_classified_and_honoured_fields_have_parity(model_name, tmp_path):
    spec, base = _base(model_name)
    rules = spec.state_dict_adapter.hf_fields
    fields = sorted(HF_CLASSES[model_name]().to_dict())
    kinds = {f: rules.classify(f) for f in fields}
    assert not [f for f, k in kinds.items() if k is None], f"{model_name}: unclassified fields"
    honoured = {f for f, k in kinds.items() if k == "honoured"}
    covered = {"model_type"} | set(ROUND_TRIP[model_name])
    for case in PARITY[model_name]:
        covered |= set(case)
    assert honoured <= covered, f"{model_name}: honoured fields without a parity case: {honoured - covered}"
    counts = {k: sum(1 for v in kinds.values() if v == k) for k in ("honoured", "irrelevant", "refused")}
    print(f"{model_name} ({HF_CLASSES[model_name].__name__}): {len(fields)} fields: {counts}")
    for i, case in enumerate(PARITY[model_name]):
        folder = str(tmp_path / f"case{i}")
        hf = _save_hf({**base, **case}, folder)
        ours, config = _ours(spec, folder)
        diff = _logit_diff(hf, ours, config.vocab_size)
        print(f"{model_name} case {sorted(case)}: max |logit diff| {diff:.2e}")
        assert diff <= TOL, (model_name, case, diff)
        if case.get("hidden_act") in ("gelu", "relu", "gelu_pytorch_tanh", "gelu_new"):  # the field matters
            silu = spec.model_cls(spec.state_dict_adapter.config_from_hf({**base, **case, "hidden_act": "silu"}))
            silu.load_state_dict(ours.state_dict())
            assert _logit_diff(hf, silu.eval(), config.vocab_size) > 1e-3


@pytest.mark.parametrize("model_name", list(HF_CLASSES))
def test_training_only_fields_round_trip_and_refused_fields_name_field_and_value(model_name):
    spec, base = _base(model_name)
    trip = ROUND_TRIP[model_name]
    doc = {**base, **trip}
    if "num_nextn_predict_layers" in trip:
        doc["num_nextn_predict_layers"] = trip["num_nextn_predict_layers"]
    exported = spec.state_dict_adapter(spec.state_dict_adapter.config_from_hf(doc)).hf_config()
    for key, value in trip.items():
        assert exported[key] == value, (model_name, key, exported[key], value)
    for field, value in REFUSE[model_name].items():
        assert spec.state_dict_adapter.hf_fields.classify(field) in ("refused", "honoured"), field
        with pytest.raises(ValueError) as err:
            spec.state_dict_adapter.config_from_hf({**base, field: value})
        message = str(err.value)
        assert f"{field}={value!r}" in message and "\n" not in message, message
    with pytest.raises(ValueError, match=r"config.json frobnicate=3 is not a field this model knows"):
        spec.state_dict_adapter.config_from_hf({**base, "frobnicate": 3})
    assert spec.state_dict_adapter.config_from_hf({**base, "frobnicate": None}) is not None  # an unknown field off


def test_deepseek_mtp_layers_not_built_when_the_checkpoint_has_none(tmp_path):
    """transformers' DeepseekV3Config defaults to one MTP layer, which save_pretrained does not write: the
    init_from path builds the model without it and says so."""
    from hyper_parallel.trainer._torch.finetune import hf_model_config
    spec, base = _base("deepseek_v3")
    _save_hf({**base, "num_nextn_predict_layers": 1}, str(tmp_path / "ds"))
    config, notes = hf_model_config(spec, str(tmp_path / "ds"))
    assert config.num_nextn_predict_layers == 0
    assert "num_nextn_predict_layers=1 but the checkpoint holds no weights for model.layers.3.*" in notes[0]
