# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The MoE monitor callback's warnings and plot, the demo's balance check and the ``[moe]`` config section, on the
expert loads a real collapsed run recorded (``make demo`` before balancing held: debug_moe, bias rate 1e-3)."""
import io
import os

import pytest

from hyper_parallel.trainer.callbacks import MoeMonitorCallback
from hyper_parallel.trainer.cli import balance_check
from hyper_parallel.trainer.config import ConfigError, load_config

# steps 1, 5, 10, 15, 20, ... of the collapsed run (layer 1 of debug_moe; 1024 = every token of the step)
COLLAPSED = [[560, 405, 445, 638], [791, 151, 151, 955], [930, 91, 7, 1020], [0, 1024, 0, 1024],
             [5, 1024, 1019, 0], [231, 1024, 793, 0], [280, 1024, 744, 0], [52, 1024, 972, 0]]
BALANCED = [[512, 500, 530, 506], [540, 498, 520, 490], [505, 515, 500, 528]]


class _Backend:
    """The one backend method the callback reads, serving recorded loads."""

    def __init__(self, loads):
        self.loads = loads
        self.step = 0

    def moe_stats(self):
        load = self.loads[self.step]
        mean = sum(load) / len(load)
        return {"model.layers.1.mlp": {"load": list(load), "max_over_mean": max(load) / mean, "bias_norm": 0.0}}


class _Trainer:
    is_logging_rank = True

    def __init__(self, loads):
        from rich.console import Console
        self.backend = _Backend(loads)
        self.console = Console(file=io.StringIO())
        self.lines = []

    def log(self, message):
        self.lines.append(message)


def _drive(callback, loads):
    trainer = _Trainer(loads)
    records = []
    for i in range(len(loads)):
        trainer.backend.step = i
        metrics = {"step": i + 1}
        callback.on_step_end(trainer, i + 1, metrics)
        records.append(metrics)
    return trainer, records


def test_monitor_warns_once_naming_layer_and_expert(tmp_path):
    cb = MoeMonitorCallback(min_load=0.25, max_over_mean=1.5, steps=3, out_dir=str(tmp_path))
    trainer, records = _drive(cb, COLLAPSED)
    assert len(cb.warnings) == 2, cb.warnings  # once per kind, though both conditions persist
    starved = [w for w in cb.warnings if "starved" in w][0]
    overloaded = [w for w in cb.warnings if "overloaded" in w][0]
    # expert 3 gets 0 of the mean 512 at steps 5, 6, 7 (expert 2's 7 and 0 at steps 3-4 are only 2 steps)
    assert starved.startswith("MoE monitor: step 7: layer model.layers.1.mlp expert 3 starved") and "\n" not in starved
    # max/mean 1.87, 1.99, 2.00 at steps 2-4; at step 4 experts 1 and 3 take every token
    assert overloaded.startswith("MoE monitor: step 4: layer model.layers.1.mlp expert 1 overloaded")
    assert records[3]["moe_warning"] == [overloaded] and records[6]["moe_warning"] == [starved]
    assert "moe_warning" not in records[-1]
    assert records[0]["moe"]["model.layers.1.mlp"]["min_over_mean"] == pytest.approx(405 / 512)
    assert records[3]["moe_min_over_mean"] == 0.0 and records[3]["moe_max_over_mean"] == 2.0
    cb.on_train_end(trainer)
    assert os.path.getsize(tmp_path / "moe_load.png") > 0


def test_monitor_stays_quiet_on_balanced_loads():
    cb = MoeMonitorCallback(steps=2)
    _drive(cb, BALANCED)
    assert cb.warnings == []


def test_monitor_rejects_bad_thresholds():
    with pytest.raises(ValueError, match="min_load"):
        MoeMonitorCallback(min_load=1.5)


def _history(loads):
    out = []
    for i, load in enumerate(loads):
        out.append({"step": 5 * i + 1, "moe": {"layer": {"load": load}}})
    return out


def test_balance_check_fails_on_the_collapsed_run_and_passes_a_balanced_one():
    bad = balance_check(_history(COLLAPSED), 15, 1.3, 0.25)
    assert not bad["layer"]["ok"] and bad["layer"]["max_over_mean"] == 2.0 and bad["layer"]["min_over_mean"] == 0.0
    good = balance_check(_history(BALANCED), 1, 1.3, 0.25)
    assert good["layer"]["ok"] and good["layer"]["max_over_mean"] == pytest.approx(540 / 512)
    assert balance_check(_history(COLLAPSED), 1000, 1.3, 0.25) == {}


def test_moe_section_overrides_and_errors(tmp_path):
    cfg = load_config(None, [("moe.load_balance", "expert_bias+aux_loss"), ("moe.aux_loss_coeff", 1e-4),
                             ("moe.capacity_factor", 0)])
    assert cfg.moe.overrides() == {"load_balance": "expert_bias+aux_loss", "aux_loss_coeff": 1e-4,
                                   "capacity_factor": None}
    assert load_config(None).moe.overrides() == {}
    assert load_config(None, [("moe.load_balance", "none")]).moe.overrides() == {"load_balance": None}
    with pytest.raises(ConfigError, match="moe.load_balance"):
        load_config(None, [("moe.load_balance", "switch")])
    with pytest.raises(ConfigError, match="moe.warn_min_load"):
        load_config(None, [("moe.warn_min_load", 2)])
    with pytest.raises(ConfigError, match="demo.balance_from"):
        load_config(None, [("demo.balance_from", -1)])
