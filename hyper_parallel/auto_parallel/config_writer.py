# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""A trainer config (TOML, ``hp-train --config FILE``) from a chosen plan (pure Python).

The tables are the ones ``hyper_parallel.trainer.config.parse_config`` reads: ``[job]`` (``nproc`` =
the plan's world size), ``[model]`` (name, flavor), ``[parallelism]`` (the ``ParallelDims`` degrees,
``pp_schedule``/``pp_microbatches``, ``sequence_parallel``), ``[training]`` (``global_batch``,
``seq_len``, ``steps``, ``mixed_precision``), ``[optimizer]`` and ``[activation]`` (the
``hyper_parallel.activation`` block). A plan with ``layers_per_stage`` writes it as
``parallelism.pp_layers_per_stage`` (decoder layers per pipeline stage, read by the trainer); the
estimates go in the header comments. The TOML is written by a small emitter for
flat tables of scalars and lists, which is all a trainer config holds.
"""
from __future__ import annotations

from typing import Any, Dict, Mapping

from hyper_parallel.auto_parallel.plan import ParallelPlan, TrainConfig

__all__ = ["trainer_config", "to_toml"]


def trainer_config(model: str, flavor: str, plan: ParallelPlan, train: TrainConfig, *, steps: int = 100,
                   name: str = "auto") -> Dict[str, Dict[str, Any]]:
    """The config tables for ``plan`` (``hyper_parallel.trainer`` format)."""
    par: Dict[str, Any] = {"dp_replicate": plan.dp_replicate, "dp_shard": plan.dp_shard, "tp": plan.tp,
                           "pp": plan.pp, "cp": plan.cp, "ep": plan.ep}
    if plan.tp > 1:
        par["sequence_parallel"] = plan.sequence_parallel
    if plan.pp > 1:
        par["pp_schedule"] = plan.schedule
        par["pp_microbatches"] = plan.microbatches
        if plan.layers_per_stage is not None:
            par["pp_layers_per_stage"] = list(plan.layers_per_stage)
    return {
        "job": {"name": name, "nproc": plan.world_size, "out_dir": f"runs/{name}"},
        "model": {"name": model, "flavor": flavor},
        "parallelism": par,
        "training": {"steps": steps, "global_batch": train.global_batch, "seq_len": train.seq_len,
                     "mixed_precision": "bf16" if train.compute_bytes == 2 else "fp32"},
        "optimizer": {"name": train.optimizer},
        "activation": {"mode": plan.activation},
    }


def _value(value: Any, where: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"')
        return f'"{escaped}"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v, where) for v in value) + "]"
    raise TypeError(f"to_toml({where}): unsupported value {value!r} (expected bool, int, float, str or a list)")


def to_toml(tables: Mapping[str, Mapping[str, Any]], header: str = "") -> str:
    """TOML text of ``{table: {key: scalar or list}}`` (``header`` lines become ``#`` comments)."""
    lines = [f"# {line}" if line else "#" for line in header.splitlines()]
    for name, table in tables.items():
        if lines:
            lines.append("")
        lines.append(f"[{name}]")
        for key, value in table.items():
            lines.append(f"{key} = {_value(value, f'{name}.{key}')}")
    return "\n".join(lines) + "\n"
