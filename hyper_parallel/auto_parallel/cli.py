# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``hp-auto-parallel``: rank parallel plans for a model on a cluster, write a trainer config, calibrate.

    hp-auto-parallel --model llama3 --flavor small --devices 8 --memory 80GiB --top 5 --write-config out.toml
    hp-auto-parallel --model qwen3-30b-a3b --devices 64 --cluster h100 --global-batch 512 --seq-len 4096
    hp-auto-parallel calibrate --out cluster.json

``--model`` is a registered model (``hyper_parallel.models.list_models()``, with ``--flavor``) or a
published shape (``hyper_parallel.auto_parallel.PUBLISHED_SHAPES``). Bad input exits with code 2 and
a message; "no plan fits" exits with code 1 and names the smallest memory any plan needs.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

import click

from hyper_parallel.auto_parallel.cluster import CLUSTER_PRESETS, GIB, ClusterSpec
from hyper_parallel.auto_parallel.config_writer import to_toml, trainer_config
from hyper_parallel.auto_parallel.plan import TrainConfig
from hyper_parallel.auto_parallel.planner import NoPlanFitsError, SearchResult, search
from hyper_parallel.auto_parallel.shape import PUBLISHED_SHAPES, ModelShape, model_shape

__all__ = ["main", "resolve_model"]


def resolve_model(name: str, flavor: Optional[str]) -> ModelShape:
    """The :class:`ModelShape` of a published shape or of a registered model's flavor."""
    if name in PUBLISHED_SHAPES:
        return PUBLISHED_SHAPES[name]
    from hyper_parallel.models import get_model_spec, list_models  # pylint: disable=import-outside-toplevel
    try:
        spec = get_model_spec(name)
    except KeyError:
        raise click.BadParameter(f"unknown model {name!r}; registered models: {list_models()}, published shapes: "
                                 f"{sorted(PUBLISHED_SHAPES)}", param_hint="--model") from None
    if flavor is None:
        raise click.BadParameter(f"model {name!r} needs --flavor (one of {sorted(spec.flavors)})",
                                 param_hint="--flavor")
    if flavor not in spec.flavors:
        raise click.BadParameter(f"model {name!r} has no flavor {flavor!r}; known flavors: {sorted(spec.flavors)}",
                                 param_hint="--flavor")
    return model_shape(spec.flavors[flavor], name=f"{name}:{flavor}")


def _constraints(items: Tuple[str, ...]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not value:
            raise click.BadParameter(f"{item!r}: expected KEY=VALUE such as tp=8, pp=1 or schedule=1F1B,GPipe",
                                     param_hint="--constraint")
        parts = [int(v) if v.isdigit() else v for v in value.split(",")]
        out[key.strip()] = parts if len(parts) > 1 else parts[0]
    return out


def _cluster(preset: str, cluster_file: Optional[str], devices: int, memory: Optional[str]) -> ClusterSpec:
    if cluster_file:
        base = ClusterSpec.from_json(cluster_file)
    elif preset in CLUSTER_PRESETS:
        base = CLUSTER_PRESETS[preset]
    else:
        raise click.BadParameter(f"unknown cluster {preset!r}; presets: {sorted(CLUSTER_PRESETS)}",
                                 param_hint="--cluster")
    try:
        return base.with_devices(devices, memory)
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint="--memory") from None


def _table(result: SearchResult, shape: ModelShape, cluster: ClusterSpec, seconds: float):
    from rich.table import Table  # pylint: disable=import-outside-toplevel
    table = Table(title=f"{shape.name} on {cluster.num_devices} x {cluster.name} "
                        f"({cluster.device_memory / GIB:.1f} GiB): {len(result)} plans fit of {result.evaluated} "
                        f"({seconds:.1f} s)")
    for col in ("#", "plan", "peak GiB", "params", "grads", "optim", "activations", "buffers+tmp", "step s", "bubble",
                "peak at"):
        table.add_column(col, justify="left" if col in ("plan", "peak at") else "right")
    for r in result:
        c = r.memory.components
        table.add_row(str(r.rank), r.plan.label(), f"{r.memory.gib():.3f}",
                      *(f"{c.get(k, 0) / GIB:.3f}" for k in ("params", "grads", "optimizer", "activations")),
                      f"{(c.get('fsdp_buffers', 0) + c.get('temporaries', 0)) / GIB:.3f}", f"{r.time.step_s:.4g}",
                      f"{100 * r.time.bubble_fraction:.1f}%", r.memory.phase)
    return table


@click.group(invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--model", help="registered model (llama3 ...) or published shape (qwen3-30b-a3b ...)")
@click.option("--flavor", default=None, help="flavor of a registered model (debug, small ...)")
@click.option("--devices", type=click.IntRange(min=1), default=8, show_default=True)
@click.option("--memory", default=None, help="memory per device, e.g. 80GiB (default: the cluster's)")
@click.option("--cluster", "preset", default="h100", show_default=True, help=f"preset: {sorted(CLUSTER_PRESETS)}")
@click.option("--cluster-file", type=click.Path(exists=True, dir_okay=False), help="ClusterSpec JSON (calibrate)")
@click.option("--global-batch", type=click.IntRange(min=1), default=8, show_default=True, help="sequences per step")
@click.option("--seq-len", type=click.IntRange(min=1), default=2048, show_default=True)
@click.option("--optimizer", type=click.Choice(["adamw", "muon", "sgd"]), default="adamw", show_default=True)
@click.option("--bf16/--fp32", default=False, help="bf16 activations (fp32 master weights and grads)")
@click.option("--constraint", "-c", multiple=True, help="KEY=VALUE[,VALUE...], e.g. tp=8, pp=1, activation=none")
@click.option("--top", type=click.IntRange(min=1), default=5, show_default=True)
@click.option("--write-config", type=click.Path(dir_okay=False), help="write the best plan as a trainer TOML")
@click.pass_context
def main(ctx: click.Context, model: Optional[str], flavor: Optional[str], devices: int, memory: Optional[str],
         preset: str, cluster_file: Optional[str], global_batch: int, seq_len: int, optimizer: str, bf16: bool,
         constraint: Tuple[str, ...], top: int, write_config: Optional[str]) -> None:
    """Rank parallel plans by estimated step time; show memory per component and why others were rejected."""
    # pylint: disable=too-many-arguments,too-many-locals
    if ctx.invoked_subcommand is not None:
        return
    if not model:
        raise click.UsageError("--model is required (or use the 'calibrate' command)")
    from rich.console import Console  # pylint: disable=import-outside-toplevel
    shape = resolve_model(model, flavor)
    cluster = _cluster(preset, cluster_file, devices, memory)
    train = TrainConfig(global_batch, seq_len, optimizer=optimizer, compute_bytes=2 if bf16 else 4)
    t0 = time.perf_counter()
    try:
        result = search(shape, cluster, global_batch, seq_len, _constraints(constraint), train=train)
    except NoPlanFitsError as err:
        raise click.ClickException(str(err)) from None
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint="--constraint") from None
    seconds = time.perf_counter() - t0
    shown = SearchResult(result[:top], result.rejected, result.evaluated)
    console = Console(width=160)
    console.print(_table(shown, shape, cluster, seconds))
    console.print(f"rejected {len(result.rejected)} plans: " +
                  ", ".join(f"{n} {reason}" for reason, n in result.rejection_summary()))
    for plan, reason in _examples(result):
        console.print(f"  e.g. {plan.label()}: {reason}")
    if write_config:
        _write(write_config, shape, result[0], train, cluster)
        console.print(f"wrote {write_config} ({result[0].plan.label()})")


def _write(path: str, shape: ModelShape, best, train: TrainConfig, cluster: ClusterSpec) -> None:
    import dataclasses  # pylint: disable=import-outside-toplevel
    name, _, flav = shape.name.partition(":")
    plan, memory, step = best.plan, best.memory, best.time
    if plan.pp > 1:  # the stage split balanced on the estimated part times, re-estimated with it
        from hyper_parallel.auto_parallel.balance import balanced_layers_per_stage  # pylint: disable=C0415
        from hyper_parallel.auto_parallel.memory import estimate_memory  # pylint: disable=import-outside-toplevel
        from hyper_parallel.auto_parallel.time_model import estimate_step_time  # pylint: disable=C0415
        plan = dataclasses.replace(plan, layers_per_stage=tuple(balanced_layers_per_stage(shape, plan, train,
                                                                                           cluster)))
        memory, step = estimate_memory(shape, plan, train), estimate_step_time(shape, plan, train, cluster)
    header = [f"written by hp-auto-parallel: {plan.label()} on {cluster.num_devices} x {cluster.name}",
              f"estimated peak memory per device {memory.gib():.4f} GiB (at {memory.phase}), "
              f"step {step.step_s:.4g} s, pipeline bubble {100 * step.bubble_fraction:.1f} %"]
    if plan.pp > 1:
        header.append(f"decoder layers per stage (balanced on estimated times): {list(plan.layers_per_stage)}")
    tables = trainer_config(name, flav or "default", plan, train)
    Path(path).write_text(to_toml(tables, header="\n".join(header)), encoding="utf-8")


def _examples(result: SearchResult):
    seen, out = set(), []
    for plan, reason in result.rejected:
        kind = reason.split(":")[0]
        if kind not in seen:
            seen.add(kind)
            out.append((plan, reason))
    return out


@main.command()
@click.option("--out", type=click.Path(dir_okay=False), default="cluster.json", show_default=True)
@click.option("--ranks", type=click.IntRange(min=2), default=2, show_default=True, help="gloo ranks for the links")
def calibrate(out: str, ranks: int) -> None:
    """Measure this machine (matmul FLOP/s, op dispatch cost, gloo all-reduce) and write a ClusterSpec JSON."""
    from hyper_parallel.auto_parallel._torch.calibrate import calibrate as run  # pylint: disable=import-outside-toplevel
    spec = run(ranks)
    spec.to_json(out)
    click.echo(f"wrote {out}: {spec.peak_flops / 1e9:.1f} GFLOP/s per rank, {spec.op_overhead * 1e6:.1f} us/op, "
               f"gloo {spec.intra_node_bw / 1e9:.2f} GB/s, latency {spec.latency * 1e6:.0f} us")
