# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``[parallelism] vl_encoder`` / ``vl_encoder_ahead`` / ``vl_encoder_ranks`` (pipeline parallel for the vision-language models): what
``hp-train --check`` accepts and refuses (one line naming the key), ``--explain-schedule``, and the layout refusals of
``models/vl_layout.py`` end to end through ``hp-train --check``."""
import os
import subprocess
import sys

import pytest

from hyper_parallel.trainer.config import ConfigError, load_config, parse_overrides
from hyper_parallel.trainer.validate import validate_job

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
VL_DEMO = os.path.join(ROOT, "configs", "vl_demo.toml")


@pytest.fixture(scope="module")
def vl_data(tmp_path_factory):
    """A tiny generated image-caption set and processor folder (the demo's, 6 images)."""
    from hyper_parallel.trainer.vl_data import draw_caption_set
    from hyper_parallel.trainer.vl_sft import make_vl_processor, vl_texts
    folder = tmp_path_factory.mktemp("vl")
    captions = draw_caption_set(folder / "set", n=6, seed=1)
    make_vl_processor(folder / "processor", vl_texts(captions))
    return ["--data.paths", f"['{captions}']", "--data.processor", f"hf:{folder / 'processor'}"]


def _cfg(data, *args):
    return load_config(VL_DEMO, parse_overrides([str(a) for a in list(data) + list(args)]))


PP2 = ("--parallelism.pp", 2, "--parallelism.dp_shard", 1)
PP3 = ("--job.nproc", 3, "--parallelism.pp", 3, "--parallelism.dp_shard", 1)
MPIPE = ("--parallelism.vl_encoder", "mpipe")


@pytest.mark.parametrize("args, needles", [
    (("--parallelism.vl_encoder", "mpipe"), ["parallelism.vl_encoder = 'mpipe' needs parallelism.pp >= 2"]),
    (("--parallelism.vl_encoder", "bogus"), ["parallelism.vl_encoder: expected one of ['stage0', 'mpipe']"]),
    (PP2 + ("--parallelism.vl_encoder_ahead", 2), ["parallelism.vl_encoder_ahead = 2: only for vl_encoder = 'mpipe'"]),
    (PP2 + ("--parallelism.vl_encoder", "mpipe", "--parallelism.pp_schedule", "GPipe"),
     ["parallelism.pp_schedule = 'GPipe': vl_encoder = 'mpipe' runs its own schedule"]),
    (PP2 + ("--parallelism.pp_schedule", "Interleaved1F1B"), ["a vision-language model runs one stage per rank"]),
    (PP2 + ("--parallelism.pp_schedule", "Mpipe"), ["set parallelism.vl_encoder = 'mpipe' instead"]),
    (PP2 + ("--parallelism.vl_encoder", "mpipe", "--parallelism.pp_layers_per_stage", "[1, 2]"),
     ["parallelism.pp_layers_per_stage=[1, 2]: under Mpipe stage 0 is the encoder stage"]),
    (("--job.nproc", 3, "--parallelism.pp", 3, "--parallelism.dp_shard", 1, "--parallelism.vl_encoder", "mpipe",
      "--parallelism.vl_encoder_ahead", 1, "--training.global_batch", 3, "--parallelism.pp_microbatches", 3),
     ["parallelism.vl_encoder_ahead = 1: expected 0 (all) or >= pp - 1 = 2"]),
    # an encoder stage on several pipeline ranks (vl_encoder_ranks)
    (PP3 + ("--parallelism.vl_encoder_ranks", 2), ["parallelism.vl_encoder_ranks = 2: only for vl_encoder = 'mpipe'"]),
    (PP2 + MPIPE + ("--parallelism.vl_encoder_ranks", 2),
     ["parallelism.vl_encoder_ranks = 2 with parallelism.pp = 2: expected 1 <= vl_encoder_ranks < pp"]),
    (("--model.flavor", "debug") + PP3 + MPIPE + ("--parallelism.vl_encoder_ranks", 2),
     ["parallelism.vl_encoder_ranks = 2: model.flavor = 'debug' ties the embedding to the LM head"]),
    (("--model.flavor", "debug_untied", "--job.nproc", 6, "--parallelism.pp", 3, "--parallelism.dp_shard", 2)
     + MPIPE + ("--parallelism.vl_encoder_ranks", 2),
     ["parallelism.dp_shard = 2 with parallelism.vl_encoder_ranks = 2: not yet"]),
    (("--model.flavor", "debug_untied") + PP3 + MPIPE + ("--parallelism.vl_encoder_ranks", 2,
                                                         "--training.global_batch", 6),
     ["parallelism.vl_encoder_ranks = 2: a microbatch of training.global_batch / (grad_accum x pp_microbatches) = 3 "
      "rows does not split evenly over the 2 encoder ranks"]),
    (("--model.flavor", "debug_untied") + PP3 + MPIPE + ("--parallelism.vl_encoder_ranks", 2,
                                                         "--parallelism.pp_layers_per_stage", "[0, 1, 2]"),
     ["[0, 1, 2] has 3 entries; expected one per pipeline stage: pp 3 - vl_encoder_ranks 2 + 1"]),
    (("--job.nproc", 4, "--parallelism.pp", 4, "--parallelism.dp_shard", 1, "--parallelism.vl_encoder", "mpipe",
      "--parallelism.pp_microbatches", 4), ["model.flavor = 'debug' conflicts with parallelism.pp = 4: tied"]),
])
def test_vision_pipeline_keys_are_checked_with_one_line(vl_data, args, needles):
    with pytest.raises(ConfigError) as info:
        validate_job(_cfg(vl_data, *args))
    message = str(info.value)
    assert "\n" not in message
    for needle in needles:
        assert needle in message, message


def _hp_train(*args):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    return subprocess.run([sys.executable, "-m", "hyper_parallel.trainer.cli", "--config", VL_DEMO,
                           *[str(a) for a in args]], capture_output=True, text=True, env=env, timeout=120, check=False)


@pytest.mark.parametrize("args, needle", [
    (("--parallelism.cp", 2, "--parallelism.dp_shard", 1), "parallelism.cp = 2: not yet for model.name = 'qwen3_vl' "
                                                           "(FSDP / HSDP, TP, PP, activation policies are)"),
    (("--model.name", "qwen3_5_moe_vl", "--model.flavor", "debug_moe", "--job.nproc", 4, "--parallelism.dp_replicate",
      2, "--parallelism.dp_shard", 1, "--parallelism.tp", 2), "parallelism.dp_replicate = 2 with parallelism.tp = 2: "
                                                               "not yet for model.name = 'qwen3_5_moe_vl' (HSDP x EP"),
    (("--model.name", "qwen3_vl_moe", "--job.nproc", 4, "--parallelism.pp", 2, "--parallelism.dp_shard", 1,
      "--parallelism.tp", 2, "--parallelism.ep", 2),
     "parallelism.ep = 2 with parallelism.tp = 2 and parallelism.pp = 2: not yet for model.name = 'qwen3_vl_moe' (a "
     "stage's expert meshes are not built under TP)"),
    (("--job.nproc", 2, "--parallelism.dp_shard", 1, "--parallelism.tp", 2, "--parallelism.loss_parallel", "true"),
     "parallelism.loss_parallel: not for model.name = 'qwen3_vl' (a vision-language model)"),
])
def test_hp_train_check_refuses_the_vl_layouts_with_one_line(vl_data, args, needle):
    """The rule the ranks apply too (``models/vl_layout.py``), refused before any launch: exit 2, one line."""
    out = _hp_train(*vl_data, *args, "--check")
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert out.returncode == 2 and len(lines) == 1 and needle in lines[0], out.stderr
    assert "Traceback" not in out.stdout + out.stderr


def test_vl_encoder_ranks_is_refused_for_a_text_model():
    cfg = load_config(None, parse_overrides(["--job.nproc", "2", "--parallelism.dp_shard", "1", "--parallelism.pp",
                                             "2", "--parallelism.vl_encoder_ranks", "2"]))
    with pytest.raises(ConfigError, match=r"parallelism.vl_encoder_ranks: only for a vision-language model"):
        validate_job(cfg)
    with pytest.raises(ConfigError, match=r"parallelism.vl_encoder_ranks: expected a value >= 1, got 0"):
        load_config(None, parse_overrides(["--parallelism.vl_encoder_ranks", "0"]))


def test_vl_encoder_is_refused_for_a_text_model():
    cfg = load_config(None, parse_overrides(["--job.nproc", "2", "--parallelism.dp_shard", "1", "--parallelism.pp",
                                             "2", "--parallelism.vl_encoder", "mpipe"]))
    with pytest.raises(ConfigError, match=r"parallelism.vl_encoder: only for a vision-language model \(model.name = "
                                          r"'llama3'"):
        validate_job(cfg)


@pytest.mark.parametrize("args", [PP2, PP2 + ("--parallelism.pp_schedule", "GPipe"),
                                  PP2 + ("--parallelism.vl_encoder", "mpipe"),
                                  ("--job.nproc", 4, "--parallelism.pp", 2, "--parallelism.dp_shard", 2,
                                   "--parallelism.vl_encoder", "mpipe"),
                                  ("--model.name", "qwen3_vl_moe") + PP2 + ("--parallelism.vl_encoder", "mpipe"),
                                  # TP inside the stages (once refused)
                                  ("--job.nproc", 4, "--parallelism.pp", 2, "--parallelism.dp_shard", 1,
                                   "--parallelism.tp", 2),
                                  ("--model.name", "qwen3_vl_moe", "--job.nproc", 4, "--parallelism.pp", 2,
                                   "--parallelism.dp_shard", 2, "--parallelism.ep", 2),
                                  ("--model.name", "qwen3_5_vl") + PP2 + MPIPE,
                                  ("--model.name", "qwen3_5_moe_vl", "--model.flavor", "debug_moe") + PP2,
                                  ("--model.flavor", "debug_untied") + PP3 + MPIPE + ("--parallelism.vl_encoder_ranks",
                                                                                      2)])
def test_vision_pipelines_pass(vl_data, args):
    facts = validate_job(_cfg(vl_data, *args))
    assert facts.degrees["pp"] >= 2


def test_explain_pipeline_shows_the_encoder_placement_and_the_timeline(vl_data):
    from hyper_parallel.trainer.cli import explain_pipeline
    cfg = _cfg(vl_data, *PP2, "--parallelism.vl_encoder", "mpipe", "--parallelism.pp_microbatches", 4)
    text = explain_pipeline(cfg, 2, 3)
    lines = text.splitlines()
    assert lines[:3] == ["stage 0: vision encoder + embedding", "stage 1: decoder layers 0-2 + norm + head",
                         "Mpipe schedule: 2 ranks, 2 stages, 4 microbatches"]
    # the encoder runs every forward ahead: F0 F1 F2 F3 before its first backward
    assert lines[3].split()[2:6] == ["F0", "F1", "F2", "F3"], lines[3]
    cfg = _cfg(vl_data, *PP2, "--parallelism.pp_schedule", "GPipe")
    lines = explain_pipeline(cfg, 2, 3).splitlines()
    assert lines[:3] == ["stage 0: vision encoder + embedding + decoder layers 0-1",
                         "stage 1: decoder layer 2 + norm + head", "GPipe schedule: 2 ranks, 2 stages, 2 microbatches"]
    cfg = _cfg(vl_data, "--model.flavor", "debug_untied", *PP3, *MPIPE, "--parallelism.vl_encoder_ranks", 2)
    lines = explain_pipeline(cfg, 3, 3).splitlines()
    assert lines[:3] == ["stage 0: vision encoder + embedding (data parallel on pipeline ranks 0-1; stage s > 0 on "
                         "rank s + 1)", "stage 1: decoder layers 0-2 + norm + head",
                         "Mpipe schedule: 2 ranks, 2 stages, 2 microbatches"], lines
    with pytest.raises(ConfigError, match="--explain-schedule: parallelism.pp = 1: no pipeline to explain"):
        explain_pipeline(_cfg(vl_data), 1, 3)


def test_hp_train_explain_schedule(vl_data):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    base = [sys.executable, "-m", "hyper_parallel.trainer.cli", "--config", VL_DEMO, *vl_data, "--explain-schedule"]
    out = subprocess.run(base + [str(a) for a in PP2] + ["--parallelism.vl_encoder", "mpipe"], capture_output=True,
                         text=True, env=env, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("stage 0: vision encoder + embedding\n") and "Mpipe schedule" in out.stdout
    out = subprocess.run(base, capture_output=True, text=True, env=env, timeout=120, check=False)
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert out.returncode == 2 and len(lines) == 1 and "parallelism.pp = 1: no pipeline to explain" in lines[0], out


def test_the_demo_one_process_comparison_of_an_mpipe_run_validates(vl_data):
    """hp-train's demo phase re-runs the first steps on one process: its parallelism must drop the Mpipe keys."""
    from hyper_parallel.trainer.api import derived_config
    from hyper_parallel.trainer.cli import ONE_PROCESS_PARALLELISM
    cfg = _cfg(vl_data, *PP2, "--parallelism.vl_encoder", "mpipe", "--parallelism.vl_encoder_ahead", 2)
    one = derived_config(cfg, parallelism=dict(ONE_PROCESS_PARALLELISM), job={"nproc": 1})
    assert validate_job(one).degrees["pp"] == 1
    with pytest.raises(ConfigError, match="vl_encoder = 'mpipe' needs parallelism.pp >= 2"):
        validate_job(derived_config(cfg, parallelism={"pp": 1, "dp_shard": -1}, job={"nproc": 1}))


@pytest.mark.parametrize("model", ["qwen3_vl_moe", "qwen3_5_moe_vl"])
def test_vl_moe_hsdp_with_ep_passes(vl_data, model):
    flavor = "debug_moe" if model == "qwen3_5_moe_vl" else "debug"
    facts = validate_job(_cfg(vl_data, "--model.name", model, "--model.flavor", flavor, "--job.nproc", 4,
                              "--parallelism.dp_replicate", 2, "--parallelism.dp_shard", 2, "--parallelism.ep", 2))
    assert (facts.degrees["dp_replicate"], facts.degrees["dp_shard"], facts.degrees["ep"]) == (2, 2, 2)
