# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The one validation that needs no rank (``hyper_parallel.trainer.validate``): every check names its key, every
refusal names both settings, and ``hp-train --check`` / ``hp-train`` before launch exit 2 with one line."""
import json
import os
import subprocess
import sys

import pytest

from hyper_parallel.trainer.config import ConfigError, load_config, parse_overrides
from hyper_parallel.trainer.validate import REFUSALS, validate_job


def _cfg(*args):
    return load_config(None, parse_overrides([str(a) for a in args]))


def _error(*args):
    with pytest.raises(ConfigError) as info:
        validate_job(_cfg(*args))
    return str(info.value)


@pytest.mark.parametrize("args, needles", [
    (("--model.name", "llama9"), ["model.name: unknown model 'llama9'", "llama3"]),
    (("--model.flavor", "huge"), ["model.flavor: 'llama3' has no flavor 'huge'", "debug"]),
    (("--job.nproc", 2, "--training.global_batch", 7),
     ["training.global_batch = 7 is not divisible by data-parallel degree dp_replicate*dp_shard = 2"]),
    (("--job.nproc", 2, "--parallelism.dp_shard", 1, "--parallelism.pp", 2, "--parallelism.pp_microbatches", 3),
     ["training.global_batch = 8", "parallelism.pp_microbatches 3"]),
    (("--job.nproc", 2, "--parallelism.dp_shard", 1, "--parallelism.tp", 4), ["[parallelism] on job.nproc = 2"]),
    (("--job.nproc", 4, "--parallelism.dp_shard", 1, "--parallelism.pp", 4, "--parallelism.pp_schedule",
      "Interleaved1F1B", "--parallelism.pp_microbatches", 4),
     ["parallelism.pp = 4 (Interleaved1F1B: 8 stages)", "2 layers"]),
    (("--job.nproc", 2, "--parallelism.dp_shard", 1, "--parallelism.pp", 2, "--parallelism.pp_schedule", "DualPipeV"),
     ["parallelism.pp_schedule = 'DualPipeV'", "n_microbatches >= num_stages = 4"]),
    (("--job.nproc", 2, "--parallelism.dp_shard", 1, "--parallelism.pp", 2, "--parallelism.pp_layers_per_stage",
      "[1, 2]"), ["parallelism.pp_layers_per_stage: [1, 2] sums to 3 layers"]),
    (("--job.nproc", 4, "--parallelism.dp_shard", 1, "--parallelism.tp", 4),
     ["parallelism.tp = 4 does not divide llama3/debug's num_key_value_heads = 2"]),
    (("--job.nproc", 4, "--parallelism.dp_shard", 1, "--parallelism.cp", 4, "--training.seq_len", 20),
     ["training.seq_len = 20 is not divisible by 8"]),
    (("--job.nproc", 4, "--parallelism.dp_shard", 1, "--parallelism.cp", 4, "--parallelism.cp_load_balance", "none",
      "--training.seq_len", 20), []),
    (("--job.nproc", 4, "--parallelism.dp_shard", 4, "--parallelism.ep", 3, "--model.flavor", "debug_moe"),
     ["ParallelDims(ep=3)"]),
    (("--job.nproc", 2, "--parallelism.dp_shard", 2, "--parallelism.pp_overlap_b_f", "true"),
     ["parallelism.pp_overlap_b_f", "parallelism.pp", "it needs pp > 1"]),
])
def test_each_check_names_its_key(args, needles):
    if not needles:  # the same layout without head-tail balancing needs seq_len % cp only
        validate_job(_cfg(*args))
        return
    message = _error(*args)
    assert "\n" not in message
    for needle in needles:
        assert needle in message, message


def test_valid_layouts_pass_and_return_the_resolved_degrees():
    facts = validate_job(_cfg("--job.nproc", 4, "--parallelism.dp_shard", -1, "--parallelism.tp", 2))
    assert facts.degrees["dp_shard"] == 2 and not facts.moe
    facts = validate_job(_cfg("--job.nproc", 2, "--model.flavor", "debug_moe", "--parallelism.ep", 2))
    assert facts.moe and facts.degrees["ep"] == 2


def test_data_and_tokenizer_paths(tmp_path):
    missing = str(tmp_path / "nope.jsonl")
    assert f"data.paths: {missing!r} does not exist" in _error("--data.source", "files", "--data.paths", f"['{missing}']")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "a"}\n{"body": 1}\n')
    ok_first = _cfg("--data.source", "files", "--data.paths", f"['{bad}']")
    validate_job(ok_first)  # the first record decides the format
    bad.write_text("not json\n")
    assert f"data.paths: {bad}:1: not valid JSON" in _error("--data.source", "files", "--data.paths", f"['{bad}']")
    bad.write_text('{"body": "x"}\n')
    assert "expected an object with a string field 'text'" in _error("--data.source", "files", "--data.paths",
                                                                     f"['{bad}']")
    conv = tmp_path / "conv.jsonl"  # the fields of data.format, not always data.text_key
    conv.write_text('{"messages": [{"role": "user", "content": "hi"}]}\n')
    folder = tmp_path / "hf"
    folder.mkdir()
    messages = ("--data.source", "files", "--data.paths", f"['{conv}']", "--data.format", "messages",
                "--data.tokenizer", f"hf:{folder}")
    assert f"data.tokenizer: '{folder}' holds no tokenizer files" in _error(*messages)
    (folder / "tokenizer.json").write_text(json.dumps({"model": {}}))
    validate_job(_cfg(*messages))
    assert "data.tokenizer: expected 'hf:<folder>'" in _error(*messages[:-1], "hf:")
    assert "expected an object with a string field 'prompt' (data.format = 'prompt_completion')" in _error(
        "--data.source", "files", "--data.paths", f"['{conv}']", "--data.format", "prompt_completion")
    odd = tmp_path / "x.bin"
    odd.write_bytes(b"\0")
    assert "unsupported file type '.bin'" in _error("--data.source", "files", "--data.paths", f"['{odd}']")
    assert "data.tokenizer: '/no/tok.json' does not exist" in _error("--data.tokenizer", "/no/tok.json")
    tok = tmp_path / "tok.json"
    tok.write_text(json.dumps({"version": "1"}))
    assert "is not a tokenizer.json file (no 'model' entry)" in _error("--data.tokenizer", str(tok))


def _refusal_configs():
    """One config per refusal rule (the rule's own two settings)."""
    return {
        ("parallelism.cp", "parallelism.etp"): ("--job.nproc", 4, "--parallelism.dp_shard", 1, "--parallelism.cp", 2,
                                                "--parallelism.tp", 2, "--parallelism.etp", 2, "--model.flavor",
                                                "debug_moe"),
        ("parallelism.dp_replicate", "parallelism.etp"): ("--job.nproc", 4, "--parallelism.dp_shard", 1,
                                                          "--parallelism.dp_replicate", 2, "--parallelism.tp", 2,
                                                          "--parallelism.etp", 2, "--model.flavor", "debug_moe"),
        ("parallelism.etp", "parallelism.ep"): ("--job.nproc", 2, "--parallelism.dp_shard", 1, "--parallelism.tp", 2,
                                                "--parallelism.ep", 2, "--parallelism.etp", 2, "--model.flavor",
                                                "debug_moe"),
        ("parallelism.etp", "model.name"): ("--job.nproc", 2, "--parallelism.dp_shard", 1, "--parallelism.tp", 2,
                                            "--parallelism.etp", 2),
        ("parallelism.ep", "model.name"): ("--job.nproc", 2, "--parallelism.ep", 2),
        ("parallelism.loss_parallel", "parallelism.tp"): ("--job.nproc", 1, "--parallelism.loss_parallel", "true"),
        ("parallelism.pp_overlap_b_f", "parallelism.pp"): ("--job.nproc", 1, "--parallelism.pp_overlap_b_f", "true"),
        ("parallelism.pp_recompute_ahead", "parallelism.pp"): ("--job.nproc", 1, "--job.backend", "mindspore",
                                                               "--parallelism.pp_recompute_ahead", "true"),
        ("parallelism.cp_async", "parallelism.cp_method"): ("--job.nproc", 2, "--parallelism.dp_shard", 1,
                                                            "--parallelism.cp", 2, "--parallelism.cp_method",
                                                            "alltoall", "--parallelism.cp_async", "true"),
        ("training.compile", "parallelism.tp"): ("--job.nproc", 2, "--parallelism.dp_shard", 1, "--parallelism.tp", 2,
                                                 "--training.compile", "true"),
        ("training.compile", "model.name"): ("--job.nproc", 1, "--model.flavor", "debug_moe", "--training.compile",
                                             "true"),
        ("model.flavor", "parallelism.pp"): ("--job.nproc", 4, "--parallelism.dp_shard", 1, "--parallelism.pp", 4,
                                             "--model.name", "qwen3", "--parallelism.pp_microbatches", 4),
        ("model.flavor", "parallelism"): ("--job.nproc", 2, "--parallelism.dp_shard", 1, "--parallelism.tp", 2,
                                          "--model.name", "deepseek_v3", "--model.flavor", "debug_mtp"),
    }


def test_every_refusal_fires_and_names_both_settings():
    configs = _refusal_configs()
    assert set(configs) == {(r.first, r.second) for r in REFUSALS}, "a refusal rule without a test config"
    for (first, second), args in configs.items():
        message = _error(*args)
        assert f"{first} = " in message and " conflicts with " in message, message
        assert (second + " = " in message) or (second == "parallelism" and "parallelism.tp = 2" in message), message
        why = next(r.why for r in REFUSALS if (r.first, r.second) == (first, second))
        assert message.endswith(why)


def test_lifted_layouts_pass_validation():
    """TP x CP and DDP x TP (refused before: the trainer's meshes had no 2-D (cp, tp) / (dp_replicate, tp) slice for
    fully_shard) and PP x CP now train like one process (tests/st/torch/test_trainer_4ranks.py); MoE x CP, MoE x
    HSDP and compile x CP too (the composition matrix, tests/st/torch/test_composition.py): no refusal."""
    for args in (("--parallelism.dp_shard", 1, "--parallelism.cp", 2, "--parallelism.tp", 2),
                 ("--parallelism.dp_shard", 1, "--parallelism.dp_replicate", 2, "--parallelism.tp", 2),
                 ("--parallelism.dp_shard", 1, "--parallelism.pp", 2, "--parallelism.cp", 2),
                 ("--parallelism.dp_shard", 2, "--parallelism.cp", 2, "--parallelism.ep", 2, "--model.flavor",
                  "debug_moe"),
                 ("--parallelism.dp_shard", 2, "--parallelism.dp_replicate", 2, "--parallelism.ep", 2,
                  "--model.flavor", "debug_moe"),
                 ("--parallelism.dp_shard", 2, "--parallelism.cp", 2, "--training.compile", "true")):
        validate_job(_cfg("--job.nproc", 4, *args))
    # expert tensor parallelism (tests/st/torch/test_moe*.py): ep = 1 on tp = 2, and the [ep, tp] = (2, 2) mesh
    for args in (("--parallelism.dp_shard", 1, "--parallelism.tp", 2, "--parallelism.etp", 2),
                 ("--parallelism.dp_shard", 2, "--parallelism.tp", 2, "--parallelism.ep", 2, "--parallelism.etp", 2)):
        validate_job(_cfg("--job.nproc", 2 * args[1], "--model.flavor", "debug_moe", *args))


def _backend_class(backend):
    if backend == "torch":
        from hyper_parallel.trainer._torch.backend import TorchTrainerBackend
        return TorchTrainerBackend
    from hyper_parallel.trainer._mindspore.backend import MindSporeTrainerBackend
    return MindSporeTrainerBackend


@pytest.mark.parametrize("backend", ["torch", "mindspore"])
@pytest.mark.parametrize("args", [("--job.nproc", 2, "--training.global_batch", 7),
                                  ("--job.nproc", 2, "--parallelism.dp_shard", 1, "--parallelism.pp", 2,
                                   "--parallelism.pp_microbatches", 3)])
def test_the_backends_split_the_batch_by_the_check_rule(backend, args):
    """Each trainer backend checks the batch split on the world it runs in with ``hp-train --check``'s rule
    (``config.check_global_batch``), in its words."""
    from types import SimpleNamespace
    from hyper_parallel.models import ParallelDims
    cfg = _cfg(*args)
    par = cfg.parallelism
    fake = SimpleNamespace(config=cfg, dims=ParallelDims(dp_shard=par.dp_shard, pp=par.pp, world_size=2))
    with pytest.raises(ValueError) as info:
        _backend_class(backend)._check_pp_batch(fake)
    assert _error(*args) == f"<defaults> + command line: {info.value}"


@pytest.mark.parametrize("args", [("--parallelism.dp_shard", 1, "--parallelism.tp", 2),
                                  ("--parallelism.dp_shard", 2, "--model.flavor", "debug_moe")])
def test_the_torch_backend_refuses_compile_by_the_check_rule(args):
    """``training.compile``'s refusals (``validate.REFUSALS``: TP, MoE layers) on the torch backend's world and
    model: ``hp-train --check``'s words."""
    from types import SimpleNamespace
    from hyper_parallel.models import ParallelDims
    from hyper_parallel.trainer.validate import run_facts
    args = ("--job.nproc", 2, "--training.compile", "true") + args
    cfg = _cfg(*args)
    par = cfg.parallelism
    fake = SimpleNamespace(config=cfg, dims=ParallelDims(dp_shard=par.dp_shard, tp=par.tp, world_size=2),
                           model_config=run_facts(cfg).model)
    with pytest.raises(ConfigError) as info:
        _backend_class("torch")._check_compile(fake)
    assert str(info.value) == _error(*args) and "training.compile = true conflicts with" in str(info.value)


def _hp_train(*args, env_extra=None):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "hyper_parallel.trainer.cli", *map(str, args)], capture_output=True,
                          text=True, env=env, timeout=120, check=False)


def test_hp_train_check_and_launch_refuse_with_one_line(tmp_path):
    """The issue's cases: global_batch 7 on 2 ranks, an unknown model, a missing data file -- exit 2, one line,
    no traceback, both from --check and from a launch (which never reaches torchrun)."""
    cases = [(["--training.global_batch", 7], "training.global_batch = 7"),
             (["--model.name", "gpt5"], "model.name: unknown model 'gpt5'"),
             (["--data.source", "files", "--data.paths", f"['{tmp_path}/missing.txt']"], "data.paths: "),
             (["--parallelism.dp_shard", 1, "--parallelism.tp", 2, "--training.compile", "true"],
              "training.compile = true conflicts with parallelism.tp = 2")]
    for args, needle in cases:
        for extra in (["--check"], []):
            out = _hp_train("--job.nproc", 2, *args, *extra)
            lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
            assert out.returncode == 2 and len(lines) == 1, (args, extra, out.stderr)
            assert lines[0].startswith("hp-train: error: <defaults> + command line: ") and needle in lines[0]
            assert "Traceback" not in out.stdout + out.stderr


def test_hp_train_help_lists_every_section_and_key():
    from hyper_parallel.trainer.cli import config_reference
    out = _hp_train("--help")
    assert out.returncode == 0
    text = config_reference()
    assert text in out.stdout
    lines = text.splitlines()
    for needle in ("    cp_load_balance        string     default \"headtail\"",
                   "    global_batch           int        default 8",
                   "    sequence_parallel      bool       default true",
                   "    pp_layers_per_stage    list[int]  default []",
                   "    clip_grad_norm         float      default 1.0"):
        assert needle in lines, needle
    assert "  [parallelism]" in lines and "  [optimizer]  free-form table: the keys of hyper_parallel.optim" in text


def test_init_from_takes_the_shapes_from_the_folder(tmp_path):
    """``flavor = "hf"`` (set by ``init_from``) is not a registry flavor: the checks use the folder's
    ``config.json``, so its heads decide what TP may split."""
    from hyper_parallel.models import get_model_spec
    spec = get_model_spec("llama3")
    doc = dict(spec.state_dict_adapter(spec.config("debug")).hf_config(), num_attention_heads=3,
               num_key_value_heads=3, head_dim=16, hidden_size=48)
    (tmp_path / "config.json").write_text(json.dumps(doc))
    facts = validate_job(_cfg("--model.init_from", f"hf:{tmp_path}", "--job.nproc", 1))
    assert facts.degrees["tp"] == 1
    message = _error("--model.init_from", f"hf:{tmp_path}", "--job.nproc", 2, "--parallelism.dp_shard", 1,
                     "--parallelism.tp", 2)
    assert "3" in message and "parallelism.tp" in message, message


def test_hp_train_check_imports_no_torch_for_the_pure_models():
    """``hp-train --check`` (and the launching hp-train, which validates the same way before it execs torchrun)
    reads the flavor table of llama3 / qwen3 / qwen3_moe / deepseek_v3 without importing torch: ~4-20 s less
    on every launch on a loaded CPU. A bad flavor still exits 2 with one line."""
    code = ("import sys\nfrom hyper_parallel.trainer.cli import main\n"
            "layouts = [['--model.name', 'llama3', '--parallelism.pp', '2', '--parallelism.dp_shard', '1'],\n"
            "           ['--model.name', 'qwen3_moe', '--parallelism.ep', '2'],\n"
            "           ['--model.name', 'deepseek_v3', '--parallelism.tp', '2', '--parallelism.dp_shard', '1'],\n"
            "           ['--model.name', 'qwen3', '--parallelism.cp', '2', '--parallelism.dp_shard', '1']]\n"
            "codes = [main(['--check', '--job.nproc', '2', *a]) for a in layouts]\n"
            "bad = main(['--check', '--model.flavor', 'huge'])\n"
            "print('RESULT', codes, bad, 'torch' in sys.modules)\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert "RESULT [0, 0, 0, 0] 2 False" in res.stdout, (res.stdout[-2000:], res.stderr[-2000:])
    assert res.stderr.strip().splitlines()[-1].startswith("hp-train: error: <defaults> + command line: "
                                                          "model.flavor: 'llama3' has no flavor 'huge'")
