# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT (pure): what ``job.backend = "mindspore"`` refuses, each with an error naming the key, and hp-train's
exit code 2 for it (no launch)."""
import re

import pytest

from hyper_parallel.trainer.config import ConfigError, load_config

CONFIG = "configs/mindspore_tp_fsdp.toml"

REFUSED = [
    ("parallelism.pp_schedule", "ZBVZeroBubble", "splits the backward"),
    ("parallelism.pp", 2, "together with CP or TP"),
    ("parallelism.cp_async", True, "synchronous"),
    ("parallelism.ep", 2, "expert parallel on MindSpore takes all of dp_shard"),
    ("parallelism.dp_replicate", 2, "HSDP together with TP"),
    ("model.name", "qwen3_5", "no MindSpore implementation"),
    ("parallelism.cp", 2, "context parallel of 'deepseek_v3': multi-head latent attention"),
    ("parallelism.sequence_parallel", False, "TP of 'qwen3_moe'"),
    ("training.mixed_precision", "bf16", "bf16"),
    ("training.compile", True, "TP x FSDP (dp_shard = 2) is not compiled"),
    ("fault.kill_at_step", 2, "torchrun"),
]


@pytest.mark.parametrize("key,value,why", REFUSED)
def test_mindspore_refuses_naming_the_key(key, value, why):
    from hyper_parallel.trainer._mindspore.launch import check_mindspore_config
    overrides = [(key, value)]
    if key == "parallelism.dp_replicate":
        overrides.append(("parallelism.dp_shard", 1))
    if key == "parallelism.cp":  # the model, not the degree, is refused: MLA has no MindSpore CP
        overrides += [("model.name", "deepseek_v3"), ("parallelism.tp", 1)]
    if key == "parallelism.sequence_parallel":  # MoE blocks under TP route the sequence shards
        overrides.append(("model.name", "qwen3_moe"))
    if key == "parallelism.pp_schedule":
        overrides += [("parallelism.pp", 2), ("parallelism.tp", 1)]
    if key == "parallelism.cp_async":
        overrides += [("parallelism.cp", 2), ("parallelism.tp", 1)]
    cfg = load_config(CONFIG, overrides)
    with pytest.raises(ConfigError, match=re.escape(key) + ": .*" + re.escape(why)):
        check_mindspore_config(cfg)


def test_mindspore_refuses_compile_of_moe_layers():
    from hyper_parallel.trainer._mindspore.launch import check_mindspore_config
    cfg = load_config(CONFIG, [("model.name", "deepseek_v3"), ("parallelism.tp", 1), ("parallelism.dp_shard", 1),
                               ("job.nproc", 1), ("training.compile", True)])
    with pytest.raises(ConfigError, match="training.compile: 'deepseek_v3'.*MoE layers"):
        check_mindspore_config(cfg)
    check_mindspore_config(load_config(CONFIG, [("model.name", "qwen3"), ("parallelism.tp", 1),
                                                ("parallelism.dp_shard", 1), ("job.nproc", 1),
                                                ("training.compile", True)]))


def test_mindspore_compiles_fsdp_hsdp_and_tp_but_not_tp_x_fsdp():
    """``training.compile`` with FSDP (and HSDP) passes the check, and with TP alone (Llama 3, Qwen3; sequence and
    loss parallel or not); TP x FSDP (the config's tp = 2 x dp_shard = 2), TP of MLA and [activation] under
    compiled TP are refused, each naming the key."""
    from hyper_parallel.trainer._mindspore.launch import check_mindspore_config
    for degrees in ([("parallelism.dp_shard", 4)], [("parallelism.dp_shard", 2), ("parallelism.dp_replicate", 2)]):
        check_mindspore_config(load_config(CONFIG, [("parallelism.tp", 1), ("training.compile", True), *degrees]))
    tp_alone = [("training.compile", True), ("parallelism.dp_shard", 1), ("job.nproc", 2)]
    for extra in ([], [("model.name", "qwen3")], [("parallelism.sequence_parallel", False)],
                  [("parallelism.loss_parallel", True)]):
        check_mindspore_config(load_config(CONFIG, tp_alone + extra))
    check_mindspore_config(load_config(CONFIG, [("training.compile", True), ("parallelism.dp_shard", -1),
                                                ("job.nproc", 2)]))  # dp_shard -1 resolves to 1 here
    with pytest.raises(ConfigError, match=r"training.compile: .*TP x FSDP \(dp_shard = 2\)"):
        check_mindspore_config(load_config(CONFIG, [("training.compile", True)]))
    with pytest.raises(ConfigError, match=r"training.compile: .*'deepseek_v3'"):  # MoE layers, and MLA
        check_mindspore_config(load_config(CONFIG, tp_alone + [("model.name", "deepseek_v3")]))
    with pytest.raises(ConfigError, match=r"activation.mode: 'full' with compile and TP"):
        check_mindspore_config(load_config(CONFIG, tp_alone + [("activation.mode", "full")]))


def test_the_config_itself_passes_and_hp_train_exits_2_on_a_refused_key(capsys):
    from hyper_parallel.trainer._mindspore.launch import check_mindspore_config
    from hyper_parallel.trainer.cli import main
    cfg = load_config(CONFIG)
    check_mindspore_config(cfg)
    assert (cfg.job.backend, cfg.job.nproc, cfg.parallelism.dp_shard, cfg.parallelism.tp) == ("mindspore", 4, 2, 2)
    assert main(["--config", CONFIG, "--parallelism.pp", "2"]) == 2
    err = capsys.readouterr().err
    assert "parallelism.pp: pipeline parallel together with CP or TP" in err and "Traceback" not in err
    for key, value in (("parallelism.pp", 2), ("parallelism.cp", 2)):  # lifted: PP x FSDP and CP x FSDP pass
        check_mindspore_config(load_config(CONFIG, [(key, value), ("parallelism.tp", 1)]))
    for model in ("qwen3", "qwen3_moe", "deepseek_v3"):  # lifted: TP, PP and EP of the other MindSpore models
        check_mindspore_config(load_config(CONFIG, [("model.name", model)]))
        check_mindspore_config(load_config(CONFIG, [("model.name", model), ("parallelism.pp", 2),
                                                    ("parallelism.tp", 1)]))
    for model in ("qwen3_moe", "deepseek_v3"):
        check_mindspore_config(load_config(CONFIG, [("model.name", model), ("parallelism.tp", 1),
                                                    ("parallelism.ep", 2)]))
    check_mindspore_config(load_config(CONFIG, [("model.name", "qwen3_moe"), ("parallelism.cp", 2),
                                                ("parallelism.tp", 1)]))
    with pytest.raises(ConfigError, match="--max-restarts"):
        from hyper_parallel.trainer._mindspore.launch import run_mindspore
        run_mindspore(cfg, [], lambda *a, **k: 0, max_restarts=1)


def _dp_replicate(*extra):
    return [("parallelism.tp", 1), ("parallelism.dp_shard", 1), ("parallelism.dp_replicate", 4), *extra]


@pytest.mark.parametrize("overrides,key,why", [
    (_dp_replicate(("activation.mode", "auto"), ("activation.auto", {"budget_mib": 64})), "activation.mode",
     "'auto' needs the torch profiler"),
    (_dp_replicate(("activation.mode", "selective-op"), ("activation.swap_ops", ["aten.mm"])),
     "activation.swap_ops", "per-op swap"),
    (_dp_replicate(("activation.mode", "swap"), ("training.compile", True)), "activation.mode",
     "saved_tensors_hooks"),
    (_dp_replicate(("activation.mode", "every-k"), ("activation.every_k_policy", "full"),
                   ("parallelism.dp_replicate", 2), ("parallelism.dp_shard", 2)), "activation.mode",
     "recompute with FSDP (parallelism.dp_shard = 2)"),
    ([("parallelism.tp", 1), ("parallelism.dp_shard", -1), ("activation.mode", "full")], "activation.mode",
     "recompute with FSDP (parallelism.dp_shard = 4)"),
    ([("activation.mode", "selective-op"), ("parallelism.dp_shard", 1), ("job.nproc", 2)],
     "activation.mode", "selective recompute with TP"),
])
def test_mindspore_activation_refusals_name_the_key(overrides, key, why):
    from hyper_parallel.trainer._mindspore.launch import check_mindspore_config
    with pytest.raises(ConfigError, match=re.escape(f"{key}: ") + ".*" + re.escape(why)):
        check_mindspore_config(load_config(CONFIG, overrides))


def test_mindspore_activation_and_recompute_ahead_pass_where_applied():
    """[activation] is applied by the MindSpore trainer now (full / selective-op / every-k with replicate, full
    with TP, anything with PP, swap in PyNative); pp_recompute_ahead is a MindSpore key, refused on torch."""
    from hyper_parallel.trainer._mindspore.launch import check_mindspore_config
    from hyper_parallel.trainer.validate import validate_job
    for extra in ((("activation.mode", "selective-op"),), (("activation.mode", "full"), ("training.compile", True)),
                  (("activation.mode", "every-k"), ("activation.every_k", 2)), (("activation.mode", "swap"),)):
        check_mindspore_config(load_config(CONFIG, _dp_replicate(*extra)))
    check_mindspore_config(load_config(CONFIG, [("activation.mode", "full"), ("parallelism.dp_shard", 1),
                                                ("job.nproc", 2)]))  # TP 2, full
    pp = [("parallelism.tp", 1), ("parallelism.dp_shard", 1), ("parallelism.pp", 2), ("job.nproc", 2),
          ("parallelism.pp_recompute_ahead", True), ("activation.mode", "selective-op")]
    check_mindspore_config(load_config(CONFIG, pp))
    validate_job(load_config(CONFIG, pp))
    with pytest.raises(ConfigError, match="parallelism.pp_recompute_ahead: MindSpore pipeline stages only"):
        load_config(CONFIG, [*pp, ("job.backend", "torch")])
