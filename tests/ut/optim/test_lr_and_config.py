# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT: the LR formulas (against their closed forms), the config parser and the assignment rules."""
import math
from dataclasses import dataclass

import pytest

from hyper_parallel.optim.config import OptimConfig
from hyper_parallel.optim.groups import ParamDesc, assign_params
from hyper_parallel.optim.lr import LRLambda, lr_factor


def test_warmup_then_cosine_closed_form():
    s = dict(warmup_steps=4, decay="cosine", total_steps=14, min_lr_ratio=0.1)
    assert [lr_factor(t, **s) for t in range(4)] == [1 / 5, 2 / 5, 3 / 5, 4 / 5]
    assert lr_factor(4, **s) == 1.0
    assert lr_factor(9, **s) == pytest.approx(0.1 + 0.9 * 0.5)
    assert lr_factor(14, **s) == pytest.approx(0.1) and lr_factor(40, **s) == pytest.approx(0.1)


def test_linear_and_constant():
    s = dict(warmup_steps=0, decay="linear", total_steps=10, min_lr_ratio=0.0)
    assert [lr_factor(t, **s) for t in (0, 5, 10, 11)] == [1.0, 0.5, 0.0, 0.0]
    assert [lr_factor(t, warmup_steps=2) for t in range(4)] == [1 / 3, 2 / 3, 1.0, 1.0]


@pytest.mark.parametrize("shape,mid", [("linear", 0.55), ("cosine", 0.55), ("sqrt", 1 - 0.9 * math.sqrt(0.5))])
def test_wsd_stable_then_decay_in_the_last_fraction(shape, mid):
    # W=2, T=22: D = round(0.5 * 20) = 10, decay from step 12 to 22
    s = dict(warmup_steps=2, decay="wsd", total_steps=22, decay_ratio=0.5, min_lr_ratio=0.1, wsd_shape=shape)
    assert [lr_factor(t, **s) for t in range(2)] == [1 / 3, 2 / 3]
    assert all(lr_factor(t, **s) == 1.0 for t in range(2, 13))
    assert lr_factor(17, **s) == pytest.approx(mid)
    assert lr_factor(22, **s) == pytest.approx(0.1) and lr_factor(30, **s) == pytest.approx(0.1)


def test_lr_lambda_is_picklable_and_validates_early():
    import pickle
    f = LRLambda(warmup_steps=3, decay="linear", total_steps=9)
    assert pickle.loads(pickle.dumps(f))(5) == f(5) == lr_factor(5, warmup_steps=3, decay="linear", total_steps=9)
    with pytest.raises(ValueError, match="needs total_steps"):
        LRLambda(decay="cosine")


def test_config_parses_dicts_dataclasses_and_nested_blocks():
    @dataclass
    class Block:
        name: str = "muon"
        lr: float = 3e-4
        warmup_steps: int = 10

    assert OptimConfig.parse(Block()).name == "muon"
    cfg = OptimConfig.parse({"optimizer": {"name": "AdamW", "lr": 1e-3}, "lr_scheduler": {"decay": "wsd",
                                                                                           "total_steps": 100}})
    assert (cfg.name, cfg.lr, cfg.decay, cfg.total_steps) == ("adamw", 1e-3, "wsd", 100)
    assert OptimConfig.parse(None) == OptimConfig()
    assert OptimConfig.parse({"adjust_lr": "none"}).adjust_lr is None


@pytest.mark.parametrize("config,match", [
    ({"name": "lion"}, r"'name': expected one of \['adamw', 'adam', 'muon'\], got 'lion'"),
    ({"lr": -1}, r"'lr': expected a number >= 0.0, got -1"),
    ({"lr": "fast"}, r"'lr': expected a number, got 'fast'"),
    ({"betas": (0.9, 1.2)}, r"'betas\[1\]'"),
    ({"momentum": 1.0}, r"'momentum'"),
    ({"ns_steps": 0}, r"'ns_steps'"),
    ({"adjust_lr": "rms"}, r"'adjust_lr'"),
    ({"decay": "cosine"}, r"'total_steps': decay 'cosine' needs total_steps"),
    ({"decay": "linear", "total_steps": 5, "warmup_steps": 5}, r"'total_steps': expected more than warmup_steps"),
    ({"learning_rate": 1}, r"unknown keys \['learning_rate'\]"),
    ({"muon_lr": 0.02}, r"'muon_lr': Muon settings need name='muon'"),
    ({"param_groups": [{"params": ["x"], "gamma": 1}]}, r"'param_groups\[0\]': unknown keys \['gamma'\]"),
    ({"param_groups": [{"lr": 1}]}, r"'param_groups\[0\]': expected a dict with 'params'"),
    ({"optimizer": {"lr": 1.0}, "lr": 2.0}, r"key 'lr' is set twice"),
])
def test_bad_config_names_the_item(config, match):
    with pytest.raises(ValueError, match=match):
        OptimConfig.parse(config)


LLAMA = [
    ParamDesc("model.embed_tokens.weight", (256, 64), "embedding"),
    ParamDesc("model.layers.0.input_layernorm.weight", (64,), "norm"),
    ParamDesc("model.layers.0.self_attn.q_proj.weight", (64, 64), "linear"),
    ParamDesc("model.layers.0.self_attn.q_proj.bias", (64,), "linear"),
    ParamDesc("model.layers.0.mlp.experts.w1", (4, 64, 32), "other"),
    ParamDesc("model.norm.weight", (64,), "norm"),
    ParamDesc("lm_head.weight", (256, 64), "linear"),
]


def _table(groups):
    return {n: (g.optimizer, g.source) for g in groups for n in g.names}


def test_default_assignment_documented_rule():
    groups = assign_params(LLAMA, {"name": "muon", "lr": 1e-3, "muon_lr": 0.02})
    assert _table(groups) == {
        "model.embed_tokens.weight": ("adamw", "default"),
        "model.layers.0.input_layernorm.weight": ("adamw", "default"),
        "model.layers.0.self_attn.q_proj.weight": ("muon", "default"),
        "model.layers.0.self_attn.q_proj.bias": ("adamw", "default"),
        "model.layers.0.mlp.experts.w1": ("muon", "default"),
        "model.norm.weight": ("adamw", "default"),
        "lm_head.weight": ("adamw", "default"),
    }
    assert [g.optimizer for g in groups] == ["muon", "adamw"]
    assert groups[0].settings["lr"] == 0.02 and groups[1].settings["lr"] == 1e-3
    assert {g.optimizer for g in assign_params(LLAMA, {"name": "adamw"})} == {"adamw"}


def test_explicit_globs_and_group_overrides():
    cfg = {"name": "muon", "adamw_params": ["*.experts.*"], "muon_params": ["lm_head.weight", "*.q_proj.weight"],
           "param_groups": [{"params": ["model.norm.*", "*.input_layernorm.*"], "weight_decay": 0.0}]}
    table = _table(assign_params(LLAMA, cfg))
    assert table["model.layers.0.mlp.experts.w1"] == ("adamw", "default")
    assert table["lm_head.weight"] == ("muon", "default")
    assert table["model.embed_tokens.weight"] == ("adamw", "default")  # muon_params given: the rest is AdamW
    assert table["model.norm.weight"] == ("adamw", "param_groups[0]")
    groups = assign_params(LLAMA, cfg)
    assert [g.settings["weight_decay"] for g in groups if g.source == "param_groups[0]"] == [0.0]


@pytest.mark.parametrize("config,match", [
    ({"name": "muon", "param_groups": [{"params": ["*.q_proj.*"]}, {"params": ["model.layers.0.*"]}]},
     r"parameter 'model.layers.0.self_attn.q_proj.\w+' is claimed by two groups: param_groups\[0\] and "
     r"param_groups\[1\]"),
    ({"name": "muon", "muon_params": ["lm_head.*"], "adamw_params": ["lm_*"]},
     r"'lm_head.weight' is claimed by both 'muon_params'"),
    ({"name": "muon", "muon_params": ["*.q_proj.bias"]}, r"'model.layers.0.self_attn.q_proj.bias' of shape \(64,\)"),
    ({"name": "muon", "adamw_params": ["nothing.*"]}, r"'adamw_params': glob 'nothing.\*' matches no parameter"),
    ({"name": "muon", "param_groups": [{"params": ["lm_head.*"], "momentum": 0.9}]},
     r"'param_groups\[0\]': key 'momentum' does not apply to adamw"),
])
def test_bad_assignment_names_the_item(config, match):
    with pytest.raises(ValueError, match=match):
        assign_params(LLAMA, config)


def test_importing_the_optim_package_imports_no_framework():
    import subprocess
    import sys
    code = ("import sys, hyper_parallel.optim as o; o.OptimConfig.parse({'name': 'muon'}); "
            "o.plan_work([o.TensorLayout((4, 4))], [5]); "
            "bad = [m for m in ('torch', 'mindspore') if m in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)
