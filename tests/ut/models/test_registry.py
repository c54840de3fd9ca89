# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT: the model registry and ModelSpec (pure logic, no processes); ParallelDims: test_parallel_dims.py."""
import dataclasses

import pytest

from hyper_parallel.models import ModelSpec, get_model_spec, list_models, register_model_spec


def test_registry_returns_llama3_spec_and_rejects_unknown_names():
    spec = get_model_spec("llama3")
    assert spec.name == "llama3" and "llama3" in list_models()
    assert {"debug", "debug_moe", "small"} <= set(spec.flavors)
    assert spec.config("debug", num_hidden_layers=3).num_hidden_layers == 3
    with pytest.raises(KeyError, match="model 'llama3' has no flavor 'huge'; known flavors"):
        spec.config("huge")
    with pytest.raises(KeyError, match="unknown model 'gpt9'; known models"):
        get_model_spec("gpt9")
    with pytest.raises(ValueError, match="'llama3' is already registered"):
        register_model_spec(spec)
    with pytest.raises(TypeError, match="expected a ModelSpec"):
        register_model_spec("llama3")


def test_register_a_user_model_spec():
    base = get_model_spec("llama3")
    mine = dataclasses.replace(base, name="my_llama_ut")
    assert register_model_spec(mine) is mine
    assert get_model_spec("my_llama_ut") is mine and "my_llama_ut" in list_models()
    assert isinstance(mine, ModelSpec)


def test_old_llama_import_path_still_works():
    from hyper_parallel.models.llama import LlamaForCausalLM as old
    from hyper_parallel.models.llama.state_dict_adapter import LLAMA_RULES
    from hyper_parallel.models.llama3 import LlamaForCausalLM as new
    from hyper_parallel.models.llama3.state_dict_adapter import LLAMA_RULES as new_rules
    assert old is new and LLAMA_RULES is new_rules


def test_every_model_is_registered_with_its_flavors():
    for name, flavors in (("llama3", {"debug", "small", "8B", "70B", "405B"}),
                          ("qwen3", {"debug", "small", "0.6B", "32B"}),
                          ("qwen3_moe", {"debug", "small", "30B-A3B", "235B-A22B"}),
                          ("deepseek_v3", {"debug", "small", "671B"})):
        spec = get_model_spec(name)
        assert flavors <= set(spec.flavors), (name, sorted(spec.flavors))
        assert spec.hf_architecture.endswith("ForCausalLM")


@pytest.mark.parametrize("model_name, overrides, message", [
    ("llama3", {"hidden_size": 60, "num_attention_heads": 8}, "hidden_size 60 is not divisible by num_attention_heads 8"),
    ("llama3", {"num_key_value_heads": 3}, "num_attention_heads=4 is not a multiple of num_key_value_heads=3"),
    ("qwen3", {"num_key_value_heads": 3}, "Qwen3Config: num_attention_heads=4 is not a multiple of num_key_value"),
    ("qwen3", {"head_dim": 7}, "head_dim=7 must be even"),
    ("qwen3", {"vocab_size": 0}, "vocab_size.*expected a positive int"),
    ("llama3", {"rope_type": "yarn"}, "rope_type.*expected one of \\('default', 'llama3'\\)"),
    ("qwen3_moe", {"moe": None}, "Qwen3MoeConfig\\(moe\\): a MoEConfig is required"),
    ("deepseek_v3", {"num_key_value_heads": 2}, "num_key_value_heads == num_attention_heads"),
    ("deepseek_v3", {"q_lora_rank": -1}, "q_lora_rank.*expected an int >= 0"),
])
def test_inconsistent_configs_are_refused_by_name(model_name, overrides, message):
    with pytest.raises(ValueError, match=message):
        get_model_spec(model_name).config("debug", **overrides)


def test_deepseek_softmax_scale_uses_yarn_mscale():
    import math
    cfg = get_model_spec("deepseek_v3").config("671B")
    m = 0.1 * math.log(40.0) + 1.0
    assert cfg.softmax_scale == pytest.approx(192 ** -0.5 * m * m)
    assert get_model_spec("deepseek_v3").config("debug").softmax_scale == pytest.approx(24 ** -0.5)


@pytest.mark.parametrize("name", ["llama3", "qwen3", "qwen3_moe", "deepseek_v3"])
def test_pure_flavor_table_is_the_specs_table(name):
    """The flavor table read without the model code is the very one the spec holds (and builds the same
    config); other models have none (their packages import their code)."""
    from hyper_parallel.models.registry import pure_flavor_table
    from hyper_parallel.models.spec import flavor_config
    table = pure_flavor_table(name)
    spec = get_model_spec(name)
    assert table is spec.flavors
    assert flavor_config(name, table, "debug", vocab_size=300) == spec.config("debug", vocab_size=300)
    assert pure_flavor_table("qwen3_vl") is None and pure_flavor_table("my_llama_ut") is None
