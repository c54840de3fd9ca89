# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``hp-train --config FILE [--section.key VALUE ...]``: one command for every layout.

Started without a launcher, it validates the config and re-launches itself under
``torchrun --standalone --nproc_per_node <job.nproc>`` (``--max-restarts N`` passes through for fault
tolerance); with ``--nnodes N --rdzv-endpoint HOST:PORT [--node-rank R]`` it is one node's torchrun agent of a
c10d rendezvous (``job.nproc`` ranks in all, ``job.nproc / N`` per node). Started by an outside launcher
(torchrun, srun with one task per rank, msrun) it trains directly; the banner says which launcher it detected
(:mod:`hyper_parallel.trainer.launcher`). A bad config exits with status 2 and one message naming the key and
the file. ``--tour`` runs the feature tour (``examples/demo.py``: redistribute, TP, FSDP, pipeline, MoE, CP,
checkpoint sections). ``--explain-schedule`` validates the config and prints its pipeline: what every stage holds
(for a vision-language model where its vision encoder runs, ``parallelism.vl_encoder``) and the schedule's
simulated timeline (:func:`~hyper_parallel.pipeline.explain_schedule`, unit costs).
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import time
from typing import Any, Dict, List, Optional, Sequence

from hyper_parallel._version import __version__
from hyper_parallel.checkpoint.format import CheckpointError
from hyper_parallel.trainer.config import ConfigError, JobConfig, load_config, parse_overrides
from hyper_parallel.trainer.launcher import detect_launcher, srun_rank_env, torchrun_command
from hyper_parallel.trainer.validate import validate_job

__all__ = ["main", "launch_command", "config_reference", "balance_check", "explain_pipeline"]

EXIT_CONFIG = 2
#: the torchrun entry of a one-node launch: ``torch.distributed.run`` that skips the interpreter teardown on success
FAST_TORCHRUN = "hyper_parallel.trainer._torch.torchrun"


def config_reference() -> str:
    """Every config section and key with its type and default, generated from the dataclasses of
    :mod:`hyper_parallel.trainer.config` (the epilog of ``hp-train --help``)."""
    import dataclasses  # pylint: disable=import-outside-toplevel
    import typing  # pylint: disable=import-outside-toplevel
    lines = ["config sections and keys (TOML [section] key = value, or --section.key VALUE):"]
    hints = typing.get_type_hints(JobConfig)
    for section in dataclasses.fields(JobConfig):
        if section.name == "source":
            continue
        cls = hints[section.name]
        if not dataclasses.is_dataclass(cls):
            lines.append(f"  [{section.name}]  free-form table: {_FREE[section.name]}")
            continue
        lines.append(f"  [{section.name}]")
        types = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore
            lines.append(f"    {f.name:<22} {_toml_type(types[f.name]):<10} default {_toml_value(default)}")
    return "\n".join(lines)


_FREE = {"optimizer": "the keys of hyper_parallel.optim.config.OptimConfig (name, lr, betas, eps, warmup_steps, "
                      "decay, ...)",
         "activation": "the block of hyper_parallel.activation.apply_activation_policy (mode = none | full | "
                       "selective-op | every-k | swap | auto, ...)"}


def _toml_type(tp: Any) -> str:
    import typing  # pylint: disable=import-outside-toplevel
    args = typing.get_args(tp)
    if args:
        return f"list[{_toml_type(args[0])}]"
    return {int: "int", float: "float", bool: "bool", str: "string"}.get(tp, str(tp))


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    return repr(value)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hp-train", description="Train a model as a TOML config says; overrides "
                                "as --section.key VALUE (e.g. --training.steps 10).", epilog=config_reference(),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", help="the TOML file (configs/*.toml)")
    p.add_argument("--max-restarts", type=int, default=0,
                   help="torchrun --max-restarts when hp-train launches itself (fault tolerance)")
    p.add_argument("--tour", action="store_true", help="run the feature tour (examples/demo.py) on 2 ranks")
    p.add_argument("--check", action="store_true", help="validate everything that needs no rank (model, data, "
                   "degrees vs job.nproc, batch, pipeline, heads, refused combinations), print the config, exit")
    p.add_argument("--explain-schedule", action="store_true", help="validate, then print the pipeline of the config "
                   "(what each stage holds, the vision encoder's placement for a VL model) and the schedule's "
                   "simulated timeline, exit")
    p.add_argument("--nnodes", type=int, default=1, help="launch as one node of N (torchrun c10d rendezvous); "
                   "job.nproc is the world size")
    p.add_argument("--node-rank", type=int, default=None, help="this node's rank with --nnodes (else assigned by "
                   "the rendezvous)")
    p.add_argument("--rdzv-endpoint", default=None, help="HOST:PORT of the c10d rendezvous with --nnodes")
    p.add_argument("--rdzv-id", default="hp-train", help="the rendezvous id with --nnodes (same on every node)")
    p.add_argument("--version", action="version", version=f"hp-train {__version__}")
    return p


_LAUNCH_FLAGS = ("--nnodes", "--node-rank", "--rdzv-endpoint", "--rdzv-id", "--max-restarts")


def _strip_launch_flags(argv: Sequence[str]) -> List[str]:
    """``argv`` without the options that only the launching hp-train reads (the ranks get the rest)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in _LAUNCH_FLAGS:
            skip = "=" not in arg
            continue
        out.append(arg)
    return out


def launch_command(cfg: JobConfig, argv: Sequence[str], max_restarts: int = 0, args: Any = None) -> List[str]:
    """The torchrun command line that runs ``hp-train argv`` on ``job.nproc`` ranks (one node, or this node of
    ``args.nnodes`` with a c10d rendezvous at ``args.rdzv_endpoint``)."""
    if cfg.job.backend != "torch":
        raise ConfigError(f"{cfg.source}: job.backend = {cfg.job.backend!r}: start hp-train under that "
                          f"backend's launcher (msrun for MindSpore); hp-train launches torchrun only")
    nnodes = getattr(args, "nnodes", 1) or 1
    try:
        return torchrun_command(sys.executable, cfg.job.nproc, ["-m", __spec__.name if __spec__ else __name__,
                                                                *_strip_launch_flags(argv)], nnodes=nnodes,
                                node_rank=getattr(args, "node_rank", None),
                                rdzv_endpoint=getattr(args, "rdzv_endpoint", None),
                                rdzv_id=getattr(args, "rdzv_id", "hp-train"), max_restarts=max_restarts,
                                module=FAST_TORCHRUN if nnodes == 1 else "torch.distributed.run")
    except ValueError as exc:
        raise ConfigError(f"{cfg.source}: {exc}") from None


def _tour() -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    for root in (os.getcwd(), os.path.dirname(os.path.dirname(here))):
        script = os.path.join(root, "examples", "demo.py")
        if os.path.isfile(script):
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", script]
            os.execv(sys.executable, cmd)
    print("hp-train --tour: examples/demo.py not found (run from the repository root)", file=sys.stderr)
    return EXIT_CONFIG


def _table(console: Any, title: str, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    from rich.table import Table  # pylint: disable=import-outside-toplevel
    table = Table(title=title)
    for h in header:
        table.add_column(h)
    for r in rows:
        table.add_row(*[str(c) for c in r])
    console.print(table)


def _resume_phase(trainer: Any, losses: Dict[int, float]) -> bool:
    from hyper_parallel.trainer.api import derived_config  # pylint: disable=import-outside-toplevel
    from hyper_parallel.trainer.callbacks import CheckpointCallback  # pylint: disable=import-outside-toplevel
    cfg, demo = trainer.config, trainer.config.demo
    trainer_cls = type(trainer)  # LLMTrainer or VLTrainer
    end = demo.resume_from + demo.resume_steps
    sub = derived_config(cfg, training={"steps": end},
                         job={"out_dir": os.path.join(cfg.job.out_dir, "resume"), "name": f"{cfg.job.name} resumed"},
                         checkpoint={"folder": cfg.checkpoint_folder, "resume": True},
                         metrics={"plot": False, "eval_every": 0, "profile_steps": []})
    again = trainer_cls(sub, console=trainer.console)
    again.setup()
    again.callbacks = [cb for cb in again.callbacks if not isinstance(cb, CheckpointCallback)]
    trainer.log(f"\n[bold]resume[/bold]: a new trainer loads the checkpoint of step {demo.resume_from} and trains "
                f"steps {demo.resume_from + 1}..{end} again")
    rerun = again.train(resume=True, resume_step=demo.resume_from)
    rows, same = [], True
    for m in rerun:
        first = losses[m["step"]]
        same &= first == m["loss"]
        rows.append((m["step"], f"{first:.7f}", f"{m['loss']:.7f}", "bit-exact" if first == m["loss"] else "DIFFERS"))
    if trainer.is_logging_rank:
        _table(trainer.console, "resumed run vs uninterrupted run", ("step", "uninterrupted", "resumed", ""), rows)
    return same


#: the ``[parallelism]`` of the demo's one-process comparison (every degree 1, the encoder placement's default)
ONE_PROCESS_PARALLELISM = {"dp_replicate": 1, "dp_shard": -1, "cp": 1, "tp": 1, "pp": 1, "ep": 1,
                           "vl_encoder": "stage0", "vl_encoder_ahead": 0, "vl_encoder_ranks": 1}


def _one_process_phase(trainer: Any, losses: Dict[int, float]) -> bool:
    from hyper_parallel.trainer.api import derived_config  # pylint: disable=import-outside-toplevel
    cfg, steps = trainer.config, trainer.config.demo.compare_steps
    trainer_cls = type(trainer)  # LLMTrainer or VLTrainer
    ok = True
    if trainer.is_logging_rank:
        sub = derived_config(cfg, training={"steps": steps},
                             parallelism=dict(ONE_PROCESS_PARALLELISM),
                             job={"out_dir": os.path.join(cfg.job.out_dir, "one_process")},
                             checkpoint={"enable": False},
                             metrics={"progress": False, "plot": False, "jsonl": False, "eval_every": 0,
                                      "profile_steps": [], "moe_monitor": False})
        trainer.log(f"\n[bold]one process[/bold]: the same model, data and first {steps} steps without any "
                    f"parallelism")
        single = trainer_cls(sub, distributed=False, console=trainer.console)
        steps_run = single.train(resume=False)
        rows = []
        for m in steps_run:
            dist_loss = losses[m["step"]]
            diff = abs(dist_loss - m["loss"])
            ok &= diff <= 1e-4 * max(1.0, abs(m["loss"]))
            rows.append((m["step"], f"{dist_loss:.6f}", f"{m['loss']:.6f}", f"{diff:.1e}"))
        _table(trainer.console, f"{trainer.backend.world_size} ranks vs one process",
               ("step", f"{cfg.job.name} ({trainer.backend.world_size} ranks)", "1 process", "|diff|"), rows)
    trainer.backend.barrier()
    return ok


def balance_check(history: Sequence[Dict[str, Any]], start: int, max_over_mean: float,
                  min_load: float) -> Dict[str, Dict[str, Any]]:
    """Per MoE layer, over the steps ``>= start`` of ``history`` (the trainer's metrics): the worst max/mean, the
    lowest min/mean, and ``ok`` (max/mean never above ``max_over_mean``, no expert ever under ``min_load`` x the
    mean). Empty when no step has MoE loads."""
    out: Dict[str, Dict[str, Any]] = {}
    for m in history:
        if m["step"] < start:
            continue
        for name, layer in m.get("moe", {}).items():
            load = layer["load"]
            mean = sum(load) / max(1, len(load))
            row = out.setdefault(name, {"max_over_mean": 0.0, "min_over_mean": float("inf"), "steps": 0})
            row["max_over_mean"] = max(row["max_over_mean"], max(load) / mean if mean else float("inf"))
            row["min_over_mean"] = min(row["min_over_mean"], min(load) / mean if mean else 0.0)
            row["steps"] += 1
    for row in out.values():
        row["ok"] = row["max_over_mean"] <= max_over_mean and row["min_over_mean"] >= min_load
    return out


def _balance_phase(trainer: Any, history: Sequence[Dict[str, Any]]) -> bool:
    demo = trainer.config.demo
    if history[-1]["step"] < demo.balance_from:  # a shortened run (tests, --training.steps) says nothing of balance
        trainer.log(f"balance check: skipped (the run stopped at step {history[-1]['step']}, the check starts at "
                    f"step {demo.balance_from})")
        return True
    rows = balance_check(history, demo.balance_from, demo.balance_max_over_mean, demo.balance_min_load)
    if not rows:
        trainer.log(f"[red]balance check: no MoE loads in the metrics from step {demo.balance_from}[/red]")
        return False
    if trainer.is_logging_rank:
        _table(trainer.console, f"expert load, steps {demo.balance_from}..{history[-1]['step']} (check: max/mean <= "
               f"{demo.balance_max_over_mean:g}, min/mean >= {demo.balance_min_load:g})",
               ("layer", "worst max/mean", "lowest min/mean", ""),
               [(n, f"{r['max_over_mean']:.3f}", f"{r['min_over_mean']:.3f}", "balanced" if r["ok"] else "IMBALANCED")
                for n, r in rows.items()])
    return all(r["ok"] for r in rows.values())


def _demo_phases(trainer: Any, history: Sequence[Dict[str, Any]]) -> bool:
    demo = trainer.config.demo
    if not history or not (demo.resume_steps or demo.compare_steps or demo.balance_from):
        return True
    losses = {m["step"]: m["loss"] for m in history}
    ok = True
    if demo.balance_from:
        ok = _balance_phase(trainer, history) and ok
    if demo.resume_steps:
        ok = _resume_phase(trainer, losses) and ok
    if demo.compare_steps:
        ok = _one_process_phase(trainer, losses) and ok
    trainer.log("demo checks passed" if ok else "[red]DEMO CHECK FAILED[/red]")
    return ok


def run(cfg: JobConfig, distributed: bool = True) -> int:
    """Train as ``cfg`` says (inside a launched job), then the demo phases; returns the exit status."""
    from hyper_parallel.trainer.vl import trainer_class  # pylint: disable=import-outside-toplevel
    trainer = trainer_class(cfg)(cfg, distributed=distributed)  # VLTrainer for a vision-language model
    start = time.perf_counter()
    try:
        trainer.setup()
        dims = trainer.backend.dims
        trainer.log(f"[bold]hp-train[/bold] {__version__} {cfg.job.name}: {cfg.model.name}/{cfg.model.flavor} on "
                    f"{trainer.backend.world_size} ranks, mesh {dict(dims.mesh_dims())} (ep {dims.ep}), vocab "
                    f"{trainer.dataset.vocab_size}, {trainer.dataset.num_train} training sequences of "
                    f"{cfg.training.seq_len} tokens; {detect_launcher(os.environ).describe()}; "
                    f"{getattr(trainer.backend, 'threads', 1)} intra-op threads per rank")
        from hyper_parallel.trainer.finetune import banner_lines  # pylint: disable=import-outside-toplevel
        for line in banner_lines(trainer):
            trainer.log(line)
        history = trainer.train()
        if history:
            tps = sum(m["tokens"] for m in history) / sum(m["step_s"] for m in history)
            trainer.log(f"steps {history[0]['step']}..{history[-1]['step']}: loss {history[0]['loss']:.4f} -> "
                        f"{history[-1]['loss']:.4f}, {tps:,.0f} tokens/s, {time.perf_counter() - start:.1f} s")
        code = 0 if _demo_phases(trainer, history) else 1
    except BaseException:
        trainer.close(failed=True)  # no closing barrier: the other ranks may be blocked elsewhere
        raise
    trainer.close()
    return code


def _preflight_resume(cfg: JobConfig) -> None:
    """Before any rank starts: a pinned ``checkpoint.load_step`` that is missing or damaged (manifest, sizes,
    header checksums: what needs no tensor read) exits 2 with one line; a damaged latest checkpoint is
    announced (the ranks skip it for the previous complete one)."""
    if not (cfg.checkpoint.enable and cfg.checkpoint.resume) or not os.path.isdir(cfg.checkpoint_folder):
        return
    from hyper_parallel.checkpoint.manifest import read_metadata  # pylint: disable=import-outside-toplevel
    from hyper_parallel.checkpoint.publish import list_published_steps  # pylint: disable=import-outside-toplevel
    from hyper_parallel.checkpoint.retention import step_dir_name  # pylint: disable=import-outside-toplevel
    steps = list_published_steps(cfg.checkpoint_folder)
    pinned = cfg.checkpoint.load_step
    if pinned and pinned not in steps:
        raise ConfigError(f"{cfg.source}: checkpoint.load_step = {pinned}: no complete checkpoint of that step in "
                          f"{cfg.checkpoint_folder} (complete: {steps or 'none'})")
    for step in ([pinned] if pinned else list(reversed(steps))):
        try:
            read_metadata(os.path.join(cfg.checkpoint_folder, step_dir_name(step)))
            return
        except CheckpointError as exc:
            if pinned:
                raise ConfigError(f"{cfg.source}: checkpoint.load_step = {pinned}: {exc}") from None
            print(f"hp-train: warning: skipping the damaged checkpoint of step {step}: {exc}", file=sys.stderr)


def _self_launch(cfg: JobConfig, argv: Sequence[str], args: Any) -> None:
    """Check the checkpoint to resume and exec torchrun (one node, or this node of ``--nnodes``); does not
    return (the config was validated by ``validate_job``)."""
    _preflight_resume(cfg)
    cmd = launch_command(cfg, argv, args.max_restarts, args)
    if args.nnodes > 1:  # a fresh bootstrap store per rendezvous round (a replaced node must not read stale keys)
        os.environ.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")
    print(f"hp-train: launcher: none; starting {' '.join(cmd[1:4])} ... on {cfg.job.nproc // args.nnodes} local "
          f"ranks" + (f" (node of {args.nnodes})" if args.nnodes > 1 else ""), flush=True)
    if shutil.which(cmd[0]) is None and not os.path.isfile(cmd[0]):
        raise ConfigError(f"cannot find the Python interpreter {cmd[0]} to launch torchrun")
    os.execv(cmd[0], cmd)


def _stage_lines(cfg: JobConfig, pp: int, layers: int) -> List[str]:
    """What every stage of the pipeline holds (a decoder-only model: TorchTitan's split, stage per rank)."""
    from hyper_parallel.trainer.vl_config import is_vision_model  # pylint: disable=import-outside-toplevel
    par = cfg.parallelism
    split = list(par.pp_layers_per_stage) or None
    if is_vision_model(cfg.model.name):
        from hyper_parallel.models.qwen3_vl.stages import stage_layers  # pylint: disable=import-outside-toplevel
        group = par.vl_encoder_ranks if par.vl_encoder == "mpipe" else 1
        per = stage_layers(layers, pp - group + 1, par.vl_encoder, split)
        first = "vision encoder + embedding" + ("" if par.vl_encoder == "mpipe" else " + ")
        if group > 1:
            first += f" (data parallel on pipeline ranks 0-{group - 1}; stage s > 0 on rank s + {group - 1})"
    else:
        from hyper_parallel.pipeline.split import check_layers_per_stage, split_layers  # noqa  # pylint: disable=C0415
        from hyper_parallel.trainer.config import pipeline_stages  # pylint: disable=import-outside-toplevel
        n = pipeline_stages(par, pp)
        per = check_layers_per_stage(split, layers, n) if split else split_layers(layers, n)
        first = "embedding + "
    out = []
    for s, ids in enumerate(per):
        parts = [first.rstrip(" +")] if s == 0 else []
        parts += [f"decoder layers {ids[0]}-{ids[-1]}" if len(ids) > 1 else f"decoder layer {ids[0]}"] if ids else []
        parts += ["norm + head"] if s == len(per) - 1 else []
        out.append(f"stage {s}: " + " + ".join(parts))
    return out


def explain_pipeline(cfg: JobConfig, pp: int, layers: int) -> str:
    """``hp-train --explain-schedule``: the stages of ``cfg``'s pipeline (``pp`` ranks, a model of ``layers`` decoder
    layers) and the simulated timeline of one schedule pass (``parallelism.pp_microbatches`` microbatches; Mpipe
    when ``parallelism.vl_encoder = 'mpipe'``). A ``ConfigError`` without a pipeline."""
    from hyper_parallel.pipeline import explain_schedule, generate_schedule  # pylint: disable=C0415
    from hyper_parallel.pipeline.schedules import mpipe_schedule  # pylint: disable=import-outside-toplevel
    par = cfg.parallelism
    if pp < 2:
        raise ConfigError(f"{cfg.source}: --explain-schedule: parallelism.pp = {pp}: no pipeline to explain; set "
                          f"parallelism.pp >= 2")
    if par.vl_encoder == "mpipe":
        sched = mpipe_schedule(pp - par.vl_encoder_ranks + 1, par.pp_microbatches, par.vl_encoder_ahead or None)
    else:
        sched = generate_schedule(par.pp_schedule, pp, par.pp_microbatches)
    return "\n".join(_stage_lines(cfg, pp, layers) + [explain_schedule(sched)])


def _print_check(cfg: JobConfig, facts: Any, explain: bool) -> None:
    """``--check``: the config as JSON; ``--explain-schedule``: :func:`explain_pipeline`."""
    if explain:
        print(explain_pipeline(cfg, facts.degrees["pp"], facts.model.num_hidden_layers))
        return
    import json  # pylint: disable=import-outside-toplevel
    from hyper_parallel.trainer.config import config_to_dict  # pylint: disable=import-outside-toplevel
    print(json.dumps(config_to_dict(cfg), indent=2))


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``hp-train``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args, rest = _parser().parse_known_args(argv)
    if args.tour:
        return _tour()
    if not args.config and not rest:
        _parser().print_usage(sys.stderr)
        print("hp-train: error: give --config FILE (see configs/)", file=sys.stderr)
        return EXIT_CONFIG
    try:
        cfg = load_config(args.config, parse_overrides(rest))
        launcher = detect_launcher(os.environ)
        facts = validate_job(cfg, launcher.world_size if launcher.outside else None)
        if any((args.check, args.explain_schedule)):
            _print_check(cfg, facts, args.explain_schedule)
            return 0
        if cfg.job.backend == "mindspore":  # MindSpore cluster launch: hyper_parallel/trainer/_mindspore/launch.py
            from hyper_parallel.trainer._mindspore.launch import run_mindspore  # noqa  # pylint: disable=C0415
            return run_mindspore(cfg, [sys.executable, "-m", "hyper_parallel.trainer.cli", *argv], run,
                                 args.max_restarts)
        if launcher.name == "srun":  # one srun task per rank, no torchrun: the env:// variables from Slurm's
            os.environ.update(srun_rank_env(os.environ))
        elif not launcher.outside:
            _self_launch(cfg, argv, args)
        import faulthandler  # pylint: disable=import-outside-toplevel
        faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1 <pid>` prints every stack
        return run(cfg)
    except ConfigError as exc:
        print(f"hp-train: error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except ValueError as exc:  # raised while building the run from a valid-looking config
        if os.environ.get("RANK", "0") == "0":
            print(f"hp-train: error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except CheckpointError as exc:  # a checkpoint that cannot be resumed (pinned and damaged, or all damaged)
        if os.environ.get("RANK", "0") == "0":
            print(f"hp-train: error: checkpoint.load_step / resume: {exc}", file=sys.stderr)
        return EXIT_CONFIG


def exit_rank(code: int) -> None:
    """End a launched rank with ``code`` once :func:`main` returned: the ``atexit`` handlers run and the streams
    are flushed, then ``os._exit`` skips the interpreter's teardown of torch, gloo and every imported module
    (7-10 s of each launch on a loaded CPU, and the place where gloo's threads could abort a rank with
    "terminate called without an active exception"). The process group is already destroyed and the
    checkpoints written by then (``LLMTrainer.close``). A process that is not a launched torch rank (no
    ``RANK`` in its environment, or MindSpore loaded) exits normally."""
    if "RANK" not in os.environ or "mindspore" in sys.modules:
        sys.exit(code)
    import atexit  # pylint: disable=import-outside-toplevel
    import logging  # pylint: disable=import-outside-toplevel
    atexit._run_exitfuncs()  # pylint: disable=protected-access  # what a normal exit runs first
    logging.shutdown()
    from hyper_parallel.trainer.process_exit import flush_and_exit  # pylint: disable=import-outside-toplevel
    flush_and_exit(code)



if __name__ == "__main__":
    exit_rank(main())
