# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Trainer config: TOML parsing, every validation error, CLI overrides, and hp-train's exit status 2."""
import glob
import os
import subprocess
import sys

import pytest

from hyper_parallel.trainer.config import ConfigError, load_config, parse_config, parse_overrides

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _write(tmp_path, text):
    path = tmp_path / "c.toml"
    path.write_text(text)
    return str(path)


def test_every_shipped_config_parses():
    files = sorted(glob.glob(os.path.join(ROOT, "configs", "*.toml")))
    assert any(f.endswith("demo.toml") for f in files)
    for path in files:
        cfg = load_config(path)
        assert cfg.training.steps >= 1 and cfg.source == path


def test_every_shipped_config_passes_the_rank_free_validation(tmp_path, monkeypatch):
    """What ``hp-train --check`` runs before a launch; a config starting from a Hugging Face folder gets a small
    one (``make finetune`` writes the real one first)."""
    import json  # pylint: disable=import-outside-toplevel
    from hyper_parallel.models import get_model_spec  # pylint: disable=import-outside-toplevel
    from hyper_parallel.trainer.validate import validate_job  # pylint: disable=import-outside-toplevel
    spec = get_model_spec("llama3")
    (tmp_path / "config.json").write_text(json.dumps(spec.state_dict_adapter(spec.config("debug")).hf_config()))
    monkeypatch.chdir(ROOT)
    for path in sorted(glob.glob(os.path.join(ROOT, "configs", "*.toml"))):
        probe = load_config(path)
        extra = [("model.init_from", f"hf:{tmp_path}")] if probe.model.init_from else []
        facts = validate_job(load_config(path, extra))
        assert facts.degrees, path


def test_typed_values_and_defaults(tmp_path):
    cfg = load_config(_write(tmp_path, "[training]\nsteps = 7\nclip_grad_norm = 2\n[data]\npaths = ['a']\n"
                                       "source = 'files'\n[metrics]\nprofile_steps = [3, 4]\n"))
    assert cfg.training.steps == 7 and cfg.training.clip_grad_norm == 2.0
    assert isinstance(cfg.training.clip_grad_norm, float)
    assert cfg.data.paths == ["a"] and cfg.metrics.profile_steps == [3, 4]
    assert cfg.training.seq_len == 128 and cfg.checkpoint_folder == os.path.join("runs/run", "checkpoints")


@pytest.mark.parametrize("text, needle", [
    ("[training]\nstepz = 3\n", "unknown key 'stepz' (did you mean 'steps'?)"),
    ("[trainer]\nsteps = 3\n", "unknown key 'trainer' (did you mean 'training'?)"),
    ("[training]\nsteps = 'ten'\n", "training.steps: expected an int, got 'ten'"),
    ("[training]\nsteps = 1.5\n", "training.steps: expected an int"),
    ("[training]\ncompile = 1\n", "training.compile: expected true or false"),
    ("[training]\nclip_grad_norm = 'x'\n", "training.clip_grad_norm: expected a number"),
    ("[training]\nclip_grad_norm = -1.0\n", "training.clip_grad_norm: expected >= 0"),
    ("[training]\nsteps = 0\n", "training.steps: expected a value >= 1"),
    ("[training]\nmixed_precision = 'fp16'\n", "training.mixed_precision: expected one of ['fp32', 'bf16']"),
    ("[training]\ncompile_backend = 'tvm'\n", "training.compile_backend: expected one of ['inductor', 'aot_eager']"),
    ("[job]\nname = 3\n", "job.name: expected a string"),
    ("[job]\nbackend = 'jax'\n", "job.backend: expected one of"),
    ("[job]\nnproc = 0\n", "job.nproc: expected a value >= 1"),
    ("[parallelism]\ntp = 0\n", "[parallelism]: ParallelDims(tp=0): expected a positive int or -1"),
    ("[parallelism]\nep = -1\n", "[parallelism]: ParallelDims(ep=-1): ep cannot be inferred"),
    ("[parallelism]\ncp_method = 'x'\n", "parallelism.cp_method"),
    ("[parallelism]\npp_microbatches = 0\n", "parallelism.pp_microbatches"),
    ("[parallelism]\npp = 2\npp_schedule = 'zigzag'\n", "parallelism.pp_schedule: unknown schedule 'zigzag'"),
    ("[parallelism]\npp_layers_per_stage = [1, 1]\n", "parallelism.pp_layers_per_stage: [1, 1] given but "
                                                     "parallelism.pp = 1"),
    ("[parallelism]\npp = 2\npp_layers_per_stage = [1, -1]\n", "parallelism.pp_layers_per_stage: expected "
                                                               "non-negative ints, got [1, -1]"),
    ("[parallelism]\npp = 2\npp_layers_per_stage = [1, 1, 1]\n", "parallelism.pp_layers_per_stage: [1, 1, 1] "
                                                                 "has 3 entries; expected one per pipeline stage: "
                                                                 "pp 2 x 1 stage(s) per rank (1F1B) = 2"),
    ("[parallelism]\npp = 2\npp_schedule = 'Interleaved1F1B'\npp_layers_per_stage = [1, 1]\n",
     "has 2 entries; expected one per pipeline stage: pp 2 x 2 stage(s) per rank (Interleaved1F1B) = 4"),
    ("[parallelism]\npp = 2\npp_layers_per_stage = ['a', 1]\n", "parallelism.pp_layers_per_stage[0]: expected "
                                                                "an int"),
    ("[checkpoint]\nasync_mode = 'maybe'\n", "checkpoint.async_mode"),
    ("[checkpoint]\ninterval = 0\n", "checkpoint.interval"),
    ("[checkpoint]\nkeep_latest_k = -1\n", "checkpoint.keep_latest_k"),
    ("[data]\nsource = 'web'\n", "data.source: expected 'stdlib' or 'files'"),
    ("[data]\nsource = 'files'\n", "data.paths: data.source = 'files' needs at least one path"),
    ("[data]\nvocab_size = 100\n", "data.vocab_size: expected a value >= 260"),
    ("[data]\nmax_corpus_mb = 0.0\n", "data.max_corpus_mb"),
    ("[data]\neval_fraction = 0.9\n", "data.eval_fraction"),
    ("[data]\npaths = 'a'\n", "data.paths: expected a list"),
    ("[metrics]\nlog_every = 0\n", "metrics.log_every"),
    ("[metrics]\neval_every = -1\n", "metrics.eval_every"),
    ("[metrics]\neval_batches = 0\n", "metrics.eval_batches"),
    ("[metrics]\nprofile_steps = ['a']\n", "metrics.profile_steps[0]: expected an int"),
    ("[demo]\nresume_steps = 2\nresume_from = 3\n", "demo.resume_from"),
    ("[demo]\ncompare_steps = -1\n", "demo.compare_steps"),
    ("[optimizer]\nlr = 'fast'\n", "[optimizer]"),
    ("[optimizer]\nlrr = 1e-3\n", "[optimizer]: optimizer config: unknown keys ['lrr']"),
    ("[activation]\nmode = 'sometimes'\n", "[activation]"),
    ("training = 3\n", "[training] must be a table"),
    ("optimizer = 3\n", "[optimizer] must be a table"),
    ("[training\n", "not valid TOML"),
])
def test_validation_errors_name_key_and_file(tmp_path, text, needle):
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert needle in str(err.value)
    assert path in str(err.value)


def test_missing_file():
    with pytest.raises(ConfigError, match="no such config file"):
        load_config("/nonexistent/c.toml")


def test_overrides(tmp_path):
    path = _write(tmp_path, "[training]\nsteps = 7\n")
    ov = parse_overrides(["--training.steps", "3", "--optimizer.lr=1e-2", "--data.paths", "['x', 'y']",
                          "--job.name", "abc", "--training.clip_grad_norm", "2", "--data.source", "files"])
    assert ov[0] == ("training.steps", 3) and ov[1] == ("optimizer.lr", 0.01)
    cfg = load_config(path, ov)
    assert cfg.training.steps == 3 and cfg.optimizer["lr"] == 0.01 and cfg.data.paths == ["x", "y"]
    assert cfg.job.name == "abc" and cfg.training.clip_grad_norm == 2.0
    assert cfg.source.endswith("+ command line")
    with pytest.raises(ConfigError, match="unknown key 'stepz'"):
        load_config(path, parse_overrides(["--training.stepz", "3"]))
    with pytest.raises(ConfigError, match="unknown key 'trainingg'"):
        load_config(path, parse_overrides(["--trainingg.steps", "3"]))
    with pytest.raises(ConfigError, match="training.steps: expected an int, got 'x'"):
        load_config(path, parse_overrides(["--training.steps", "x"]))
    with pytest.raises(ConfigError, match="needs a value"):
        parse_overrides(["--training.steps"])
    with pytest.raises(ConfigError, match="expected --section.key VALUE"):
        parse_overrides(["steps"])


def test_parse_config_dict():
    cfg = parse_config({"model": {"flavor": "small"}, "parallelism": {"tp": 2}})
    assert cfg.model.flavor == "small" and cfg.parallelism.tp == 2


def test_hp_train_bad_config_exits_2_without_traceback(tmp_path):
    path = _write(tmp_path, "[training]\nsteps = 'ten'\n")
    env = dict(os.environ)
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        env.pop(k, None)
    out = subprocess.run([sys.executable, "-m", "hyper_parallel.trainer.cli", "--config", path],
                         capture_output=True, text=True, env=env, timeout=60, check=False)
    assert out.returncode == 2
    assert f"hp-train: error: {path}: training.steps: expected an int, got 'ten'" in out.stderr
    assert "Traceback" not in out.stderr + out.stdout
    out = subprocess.run([sys.executable, "-m", "hyper_parallel.trainer.cli", "--config", path,
                          "--training.steps", "4", "--check"], capture_output=True, text=True, env=env, timeout=60,
                         check=False)
    assert out.returncode == 0 and '"steps": 4' in out.stdout


def test_hp_train_checks_the_degrees_product_on_job_nproc_before_launching(tmp_path, monkeypatch, capsys):
    from hyper_parallel.trainer.cli import main
    for k in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(k, raising=False)
    path = _write(tmp_path, "[job]\nnproc = 2\n[parallelism]\ndp_shard = 1\ntp = 4\n")
    assert main(["--config", path]) == 2
    assert (f"hp-train: error: {path}: [parallelism] on job.nproc = 2 ranks: ParallelDims: pp(1)*dp_replicate(1)*"
            f"dp_shard(1)*cp(1)*tp(4) = 4 does not match world_size 2") in capsys.readouterr().err


def test_stage_split_key_parses_and_counts_stages(tmp_path):
    from hyper_parallel.trainer.config import pipeline_stages
    cfg = load_config(_write(tmp_path, "[parallelism]\npp = 2\npp_layers_per_stage = [2, 0]\n"))
    assert cfg.parallelism.pp_layers_per_stage == [2, 0] and pipeline_stages(cfg.parallelism) == 2
    cfg = load_config(_write(tmp_path, "[parallelism]\ndp_shard = 1\npp = -1\npp_schedule = 'zbv'\n"
                                       "pp_layers_per_stage = [1, 1, 1, 1]\n"))  # pp inferred: checked at launch
    assert pipeline_stages(cfg.parallelism, pp=2) == 4
    cfg = load_config(None, parse_overrides(["--parallelism.pp", "2", "--parallelism.pp_layers_per_stage", "[3, 5]"]))
    assert cfg.parallelism.pp_layers_per_stage == [3, 5]
