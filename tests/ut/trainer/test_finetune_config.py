# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Fine-tuning config keys (pure): ``[model] init_from`` takes the model name from config.json and refuses a
disagreeing name or flavor; the SFT / export / wandb keys are validated; the resume banner's LR-schedule line;
``hp-train --check`` on a bad init_from exits 2 with one line."""
import json
import os
import subprocess
import sys

import pytest

from hyper_parallel.models.registry import HF_MODEL_TYPES, model_for_hf_type
from hyper_parallel.trainer.config import ConfigError, load_config
from hyper_parallel.trainer.finetune import resolve_init_from, schedule_note, tokenizer_spec


def _folder(tmp_path, model_type="qwen3"):
    folder = tmp_path / "hf"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"model_type": model_type, "vocab_size": 32}))
    return str(folder)


def test_init_from_takes_name_from_config_json(tmp_path):
    folder = _folder(tmp_path)
    cfg = load_config(None, [("model.init_from", f"hf:{folder}")])
    assert (cfg.model.name, cfg.model.flavor) == ("qwen3", "hf")
    assert tokenizer_spec(cfg) == f"hf:{folder}"  # the folder's tokenizer unless data.tokenizer says otherwise
    cfg = load_config(None, [("model.init_from", f"hf:{folder}"), ("model.name", "qwen3"),
                             ("data.tokenizer", "/x/tokenizer.json")])
    assert tokenizer_spec(cfg) == "/x/tokenizer.json"
    assert {t: model_for_hf_type(t) for t in HF_MODEL_TYPES} == {
        "llama": "llama3", "qwen3": "qwen3", "qwen3_moe": "qwen3_moe", "deepseek_v3": "deepseek_v3",
        "qwen3_vl": "qwen3_vl", "qwen3_vl_moe": "qwen3_vl_moe", "qwen3_5": "qwen3_5_vl",
        "qwen3_5_moe": "qwen3_5_moe_vl", "qwen3_5_text": "qwen3_5", "qwen3_5_moe_text": "qwen3_5_moe"}


@pytest.mark.parametrize("model_type, vl, text", [("qwen3_5", "qwen3_5_vl", "qwen3_5"),
                                                  ("qwen3_5_moe", "qwen3_5_moe_vl", "qwen3_5_moe")])
def test_text_model_of_a_vision_language_folder(tmp_path, model_type, vl, text):
    """A Qwen3.5 VL folder is the VL model by default, its language model with ``name`` = the text model; any
    other name is refused with both choices named."""
    folder = _folder(tmp_path, model_type)
    assert resolve_init_from({"init_from": f"hf:{folder}"})["name"] == vl
    cfg = load_config(None, [("model.init_from", f"hf:{folder}"), ("model.name", text)])
    assert (cfg.model.name, cfg.model.flavor) == (text, "hf")
    with pytest.raises(ConfigError, match=rf"model_type '{model_type}' \('{vl}' or '{text}' \(its language model "
                                          r"only\)\); leave model.name out"):
        load_config(None, [("model.init_from", f"hf:{folder}"), ("model.name", "qwen3")])


@pytest.mark.parametrize("overrides, needle", [
    ([("model.name", "llama3")], "model.name: 'llama3' given, but model.init_from"),
    ([("model.flavor", "debug")], "model.flavor: 'debug' given with model.init_from"),
    ([("model.init_from", "{folder}/nothing")], "model.init_from: expected 'hf:<folder>'"),
    ([("model.init_from", "hf:{folder}/nothing")], "is not a folder"),
    ([("data.format", "chat")], "data.format: expected one of ['stream', 'text', 'prompt_completion', 'messages']"),
    ([("data.format", "text")], "data.format = 'text' reads records from data.paths: set data.source = 'files'"),
    ([("data.bad_records", "ignore")], "data.bad_records: expected one of ['fail', 'skip']"),
    ([("checkpoint.export_folder", "x")], "checkpoint.export_folder given but checkpoint.export_hf is false"),
    ([("metrics.wandb", "cloud")], "metrics.wandb: expected '', 'offline' or 'online'"),
    ([("job.backend", "mindspore")], "run on job.backend = 'torch'"),
])
def test_bad_finetune_keys_name_the_key(tmp_path, overrides, needle):
    folder = _folder(tmp_path)
    base = [("model.init_from", f"hf:{folder}")]
    with pytest.raises(ConfigError) as err:
        load_config(None, base + [(k, v.format(folder=folder) if isinstance(v, str) else v) for k, v in overrides])
    assert needle in str(err.value)


def test_unknown_model_type_and_messages_without_template(tmp_path):
    folder = _folder(tmp_path, "gpt2")
    with pytest.raises(ConfigError, match=r"config.json: Hugging Face model_type 'gpt2' is not supported"):
        load_config(None, [("model.init_from", f"hf:{folder}")])
    with pytest.raises(ConfigError, match="data.format = 'messages' renders conversations"):
        load_config(None, [("data.source", "files"), ("data.paths", ["x"]), ("data.format", "messages")])


def test_schedule_note_says_what_happens_to_the_lr_schedule():
    assert schedule_note(100, 100, 50) == "LR schedule: unchanged (100 steps), continuing at step 50"
    changed = schedule_note(100, 200, 50)
    assert "CHANGED" in changed and "100-step schedule" in changed and "optimizer.total_steps = 100" in changed
    assert "does not record" in schedule_note(None, 100, 50)


def test_hp_train_check_exits_2_on_a_bad_init_from(tmp_path):
    out = subprocess.run([sys.executable, "-m", "hyper_parallel.trainer.cli", "--check", "--model.init_from",
                          f"hf:{tmp_path}/missing"], capture_output=True, text=True, check=False,
                         env=dict(os.environ, RANK="0", WORLD_SIZE="1"))
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "model.init_from" in out.stderr and "is not a folder" in out.stderr


def test_checks_of_a_vision_language_folder_see_its_language_model(tmp_path):
    """``hp-train --check``'s facts of an ``init_from`` vision-language folder are its language model's sizes
    (the TP / layer rules read heads and layers), as for a registry flavor -- not the whole VL config."""
    from transformers import Qwen3VLConfig
    from hyper_parallel.trainer.validate import run_facts
    folder = tmp_path / "vl"
    Qwen3VLConfig(text_config={"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 3,
                               "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
                               "vocab_size": 1024, "rope_scaling": {"rope_type": "default", "mrope_section": [2, 3, 3]}},
                  vision_config={"depth": 2, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2,
                                 "out_hidden_size": 64, "deepstack_visual_indexes": [0]}).save_pretrained(folder)
    cfg = load_config(None, [("model.init_from", f"hf:{folder}"), ("data.processor", f"hf:{folder}"),
                             ("data.source", "files"), ("data.paths", [str(folder)]), ("data.format", "messages")])
    model = run_facts(cfg).model
    assert not hasattr(model, "text") and not hasattr(model, "vision")
    assert (model.num_hidden_layers, model.num_attention_heads, model.num_key_value_heads) == (3, 4, 2)
