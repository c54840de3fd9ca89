# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``hp-train`` with ``[job] backend = "mindspore"``: what the MindSpore path refuses, and the cluster launch.

``hp-train --config FILE`` started by hand validates the config and then starts the MindSpore cluster itself
with MindSpore's dynamic-cluster variables (what ``msrun`` does): one scheduler process (``MS_ROLE=MS_SCHED``)
and ``job.nproc`` workers (``MS_ROLE=MS_WORKER``, ``MS_NODE_ID`` = rank) on 127.0.0.1 and a free port; each
worker runs ``hp-train`` again (it sees ``MS_ROLE`` and trains). Rank 0 prints the progress; a failing
rank ends the others. ``job.nproc = 1`` trains in this process without a cluster. Inside a MindSpore cluster
(``MS_ROLE`` set, e.g. by ``msrun``) ``hp-train`` trains directly: ``msrun --worker_num 4 --local_worker_num 4
--master_port 8241 --join True $(which hp-train) --config configs/mindspore_tp_fsdp.toml``. No MindSpore import
at module level.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import traceback
from typing import Callable, List, Optional, Sequence

from hyper_parallel.trainer.config import ConfigError, JobConfig

__all__ = ["check_mindspore_config", "run_mindspore", "launch_cluster", "run_worker"]

_SCHED_CODE = "from mindspore.communication import init; init()"
#: set in the workers :func:`launch_cluster` starts (it ends the cluster itself)
_OWN_LAUNCH = "HP_TRAIN_MS_CLUSTER"
#: after one worker fails, how long the others get to finish before they are ended
_GRACE_S = 10.0


#: the pipeline schedules the MindSpore trainer runs (full backward; the zero-bubble I/W split needs torch)
MINDSPORE_SCHEDULES = ("GPipe", "1F1B", "Interleaved1F1B", "LoopedBFS")


def _schedule_name(name: str) -> str:
    from hyper_parallel.pipeline.schedules import canonical_schedule_name  # pylint: disable=C0415  # pure module
    try:
        return canonical_schedule_name(name)
    except ValueError:
        return name


def _refuse(cfg: JobConfig, key: str, why: str) -> ConfigError:
    return ConfigError(f"{cfg.source}: {key}: {why} (job.backend = 'mindspore'; the torch backend has it)")


def _check_parallelism(cfg: JobConfig) -> None:
    """The degrees the MindSpore trainer refuses: split-backward pipeline schedules, PP with CP or TP, overlap_b_f,
    asynchronous CP, expert parallel other than ``ep = dp_shard`` without TP."""
    par = cfg.parallelism
    if par.ep != 1 and (par.ep != par.dp_shard or par.tp != 1 or par.cp != 1 or par.dp_replicate != 1):
        raise _refuse(cfg, "parallelism.ep", f"expert parallel on MindSpore takes all of dp_shard (ep = dp_shard = "
                      f"{par.dp_shard}) with tp = cp = dp_replicate = 1: the experts' FSDP over the ranks EP leaves "
                      "(efsdp) and EP from TP / CP ranks are not implemented there")
    if par.pp != 1 and _schedule_name(par.pp_schedule) not in MINDSPORE_SCHEDULES:
        raise _refuse(cfg, "parallelism.pp_schedule", f"{par.pp_schedule!r} splits the backward (I/W); MindSpore "
                      f"stages run {', '.join(MINDSPORE_SCHEDULES)}")
    if par.pp_overlap_b_f:
        raise _refuse(cfg, "parallelism.pp_overlap_b_f", "two compute threads need torch stages; set it to false")
    if par.pp != 1 and (par.cp != 1 or par.tp != 1):
        raise _refuse(cfg, "parallelism.pp", "pipeline parallel together with CP or TP is not supported on MindSpore "
                      "(PP x FSDP is); set cp and tp to 1")
    if par.cp != 1 and par.cp_async:
        raise _refuse(cfg, "parallelism.cp_async", "MindSpore's CPU collectives are synchronous, nothing to overlap; "
                      "set it to false")


#: models whose attention the MindSpore CP attention cannot run, and why
CP_REFUSED = {"deepseek_v3": "multi-head latent attention has value heads narrower than its query/key heads and a "
                             "softmax scale other than head_dim ** -0.5, which the MindSpore CP attention (ring / "
                             "all-gather / Ulysses over equal q/k/v head sizes) does not take"}


def check_mindspore_config(cfg: JobConfig) -> None:
    """Refuse, naming the key, what the MindSpore trainer path cannot do: expert parallel other than ``ep =
    dp_shard`` (tp = cp = dp_replicate = 1), split-backward pipeline schedules, PP with CP or TP, CP of DeepSeek-V3
    (MLA), HSDP x TP, bf16, compile with MoE layers or
    with PP / CP (or with TP x FSDP, MLA or [activation] under TP), the activation modes MindSpore lacks
    (auto, swap_ops; swap under compile), fault injection, models without a MindSpore implementation."""
    par, tr = cfg.parallelism, cfg.training
    _check_parallelism(cfg)
    if par.dp_replicate != 1 and par.tp != 1:
        raise _refuse(cfg, "parallelism.dp_replicate", "HSDP together with TP is not supported by MindSpore "
                      "fully_shard; set it to 1")
    _check_model(cfg)
    if tr.mixed_precision != "fp32":
        raise _refuse(cfg, "training.mixed_precision", f"{tr.mixed_precision!r} is not supported (MindSpore's CPU "
                      "kernels have no bf16 matmul); use 'fp32'")
    if tr.compile and (par.pp != 1 or par.cp != 1):
        raise _refuse(cfg, "training.compile", "mindspore.jit layers are not combined with PP or CP on MindSpore "
                      "(the CP attention hook and the pipeline stages run in PyNative); set it to false")
    if tr.compile and par.tp != 1:
        _check_compiled_tp(cfg)
    _check_activation(cfg)
    if cfg.fault.kill_at_step:
        raise _refuse(cfg, "fault.kill_at_step", "the killed-rank restart runs under torchrun only; set it to 0")


def _refuse_compiled_tp(cfg: JobConfig, key: str, why: str) -> ConfigError:
    """As :func:`_refuse`, without its torch remark (the torch backend does not compile TP at all)."""
    return ConfigError(f"{cfg.source}: {key}: {why} (job.backend = 'mindspore')")


def _check_compiled_tp(cfg: JobConfig) -> None:
    """``training.compile`` with TP runs each rank's step as one graph over its local shards
    (``hyper_parallel.tp._mindspore.compiled``): Llama attention and dense MLPs, no FSDP, no [activation]."""
    par, refuse = cfg.parallelism, _refuse_compiled_tp
    dp_shard = par.dp_shard if par.dp_shard != -1 else cfg.job.nproc // max(1, par.dp_replicate * par.tp)
    if dp_shard != 1:
        raise refuse(cfg, "training.compile", f"with TP on MindSpore the graph runs on this rank's TP shards, the "
                     f"compiled FSDP step on an unsharded twin of the whole model; TP x FSDP (dp_shard = "
                     f"{dp_shard}) is not compiled: set dp_shard = 1 or compile = false")
    if cfg.model.name == "deepseek_v3":
        raise refuse(cfg, "training.compile", "the compiled TP step covers Llama attention (Llama 3, Qwen3); "
                     "'deepseek_v3' (MLA) under TP runs in PyNative: set tp = 1 or compile = false")
    if cfg.activation:
        from hyper_parallel.activation.config import parse_activation_config  # pylint: disable=C0415  # pure
        act = parse_activation_config(cfg.activation)
        if act.mode != "none" or act.overrides:
            raise refuse(cfg, "activation.mode", f"{act.mode!r} with compile and TP on MindSpore: the compiled TP "
                         "step's local twin of the layers does not recompute; remove the [activation] section")


#: the ``[activation]`` modes the MindSpore trainer applies (``hyper_parallel.activation._mindspore``)
ACTIVATION_MODES = ("none", "full", "selective-op", "every-k", "swap")


def _check_activation(cfg: JobConfig) -> None:
    """``[activation]`` on MindSpore: none / full / selective-op / every-k / swap (and per-layer overrides);
    ``auto`` and ``swap_ops`` are torch-only; swap moves saved tensors through ``saved_tensors_hooks``, which a
    compiled graph does not call; recompute under FSDP (a recomputed cell would run on the parameter shards
    ``fully_shard`` restored after the forward) and selective recompute under TP (checked: not equal to one
    process) are refused."""
    if not cfg.activation:
        return
    from hyper_parallel.activation.config import parse_activation_config  # pylint: disable=C0415  # pure module
    act = parse_activation_config(cfg.activation)
    if act.mode not in ACTIVATION_MODES:
        raise _refuse(cfg, "activation.mode", f"{act.mode!r} needs the torch profiler; MindSpore applies "
                      f"{', '.join(ACTIVATION_MODES)}")
    if act.swap_ops:
        raise _refuse(cfg, "activation.swap_ops", "per-op swap needs per-op interception (torch); MindSpore decides "
                      "per block; remove it")
    modes = {act.mode, *(mode for _, mode in act.overrides)}
    if act.mode == "every-k":
        modes.add(act.every_k_policy)
    if "swap" in modes and cfg.training.compile:
        raise _refuse(cfg, "activation.mode", "swap moves saved activations through saved_tensors_hooks, which a "
                      "mindspore.jit graph does not call; set training.compile = false or use full / selective-op")
    par = cfg.parallelism
    dp_shard = par.dp_shard if par.dp_shard != -1 else cfg.job.nproc // max(
        1, par.dp_replicate * par.tp * par.cp * par.pp)
    if modes & {"full", "selective-op"} and dp_shard > 1:
        raise _refuse(cfg, "activation.mode", f"recompute with FSDP (parallelism.dp_shard = {dp_shard}): a "
                      "recomputed MindSpore cell runs again in backward on the parameter shards fully_shard restored "
                      "after the forward; use it with dp_replicate, TP (full) or PP, or mode = 'swap'")
    if "selective-op" in modes and par.tp > 1:
        raise _refuse(cfg, "activation.mode", "selective recompute with TP (its sequence-parallel norms recompute "
                      "under their gradient all-reduce) differs from one process by up to 7e-5 here; use 'full'")


def _check_model(cfg: JobConfig) -> None:
    """The model has a MindSpore implementation (``hyper_parallel.models.registry``); what its plan refuses: CP of
    MLA, TP of MoE layers without sequence parallel, compile with MoE layers."""
    from hyper_parallel.models.registry import _BUILTIN_BACKENDS  # pylint: disable=import-outside-toplevel
    name = "llama3" if cfg.model.name == "llama" else cfg.model.name
    have = sorted(n for n, b in _BUILTIN_BACKENDS if b == "mindspore")
    if name not in have:
        raise _refuse(cfg, "model.name", f"{cfg.model.name!r} has no MindSpore implementation; use one of {have}")
    par = cfg.parallelism
    moe = name in ("qwen3_moe", "deepseek_v3") or "moe" in cfg.model.flavor
    if par.cp != 1 and name in CP_REFUSED:
        raise _refuse(cfg, "parallelism.cp", f"context parallel of {name!r}: {CP_REFUSED[name]}; set it to 1")
    if par.tp != 1 and moe and not par.sequence_parallel:
        raise _refuse(cfg, "parallelism.sequence_parallel", f"TP of {name!r} ({cfg.model.flavor!r}) routes each "
                      "rank's sequence shard through the MoE blocks; set it to true")
    if cfg.training.compile and moe:
        raise _refuse(cfg, "training.compile", f"{name!r} ({cfg.model.flavor!r}) has MoE layers, whose routing reads "
                      "the expert choices on the host, which mindspore.jit cannot compile; set it to false")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(role: str, port: int, world: int, rank: Optional[int]) -> dict:
    env = dict(os.environ)
    threads = max(1, (os.cpu_count() or 1) // max(1, world))
    env.update({"MS_ROLE": role, "MS_SCHED_HOST": "127.0.0.1", "MS_SCHED_PORT": str(port),
                "MS_WORKER_NUM": str(world), "HYPER_PARALLEL_BACKEND": "mindspore",
                "GLOG_v": env.get("GLOG_v", "3"), "OMP_NUM_THREADS": env.get("OMP_NUM_THREADS", str(threads))})
    if rank is not None:
        env.update({"MS_NODE_ID": str(rank), "RANK_ID": str(rank), _OWN_LAUNCH: "1"})
    return env


def end_process_groups(procs: Sequence[subprocess.Popen]) -> None:
    """Kill each still-running process's whole process group, then reap every process."""
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
    for p in procs:
        p.wait()


def _wait_workers(workers: List[subprocess.Popen]) -> int:
    """The first non-zero exit code (the others are ended ``_GRACE_S`` after it), else 0."""
    failed_at: Optional[float] = None
    code = 0
    while True:
        codes = [w.poll() for w in workers]
        if all(c is not None for c in codes):
            return code or next((c for c in codes if c), 0)
        bad = [c for c in codes if c]
        if bad and failed_at is None:
            failed_at, code = time.monotonic(), bad[0]
        if failed_at is not None and time.monotonic() - failed_at > _GRACE_S:
            end_process_groups(workers)
            return code
        time.sleep(0.2)


def launch_cluster(command: Sequence[str], nproc: int) -> int:
    """Start the scheduler and ``nproc`` workers each running ``command`` (``hp-train ARGS``); returns the job's
    exit code."""
    port = _free_port()
    procs: List[subprocess.Popen] = []
    try:
        procs.append(subprocess.Popen(  # pylint: disable=consider-using-with
            [sys.executable, "-c", _SCHED_CODE], env=_env("MS_SCHED", port, nproc, None), stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True))
        for rank in range(nproc):
            procs.append(subprocess.Popen(  # pylint: disable=consider-using-with
                list(command),
                env=_env("MS_WORKER", port, nproc, rank), start_new_session=True))
        return _wait_workers(procs[1:])
    except KeyboardInterrupt:
        return 130
    finally:
        end_process_groups(procs)


def run_mindspore(cfg: JobConfig, command: Sequence[str], run: Callable[..., int], max_restarts: int = 0) -> int:
    """``hp-train``'s MindSpore path: train here (under a launcher, or ``job.nproc = 1``) with ``run(cfg,
    distributed=...)``, or start the cluster whose workers run ``command`` (this hp-train command line)."""
    check_mindspore_config(cfg)
    if max_restarts:
        raise ConfigError(f"{cfg.source}: --max-restarts: restarts are torchrun's; not available with "
                          "job.backend = 'mindspore'")
    if os.environ.get("MS_ROLE") == "MS_SCHED":  # msrun runs the script in its scheduler process too
        from mindspore.communication import init  # pylint: disable=import-outside-toplevel
        init()
        return 0
    if os.environ.get("MS_ROLE") == "MS_WORKER":
        return run_worker(cfg, run)
    if cfg.job.threads > 0:  # [job] threads: the workers' OpenMP threads (MindSpore reads the environment)
        os.environ["OMP_NUM_THREADS"] = str(cfg.job.threads)
    if cfg.job.nproc == 1:
        os.environ.setdefault("HYPER_PARALLEL_BACKEND", "mindspore")
        return run(cfg, distributed=False)
    sys.stdout.flush()
    return launch_cluster(command, cfg.job.nproc)


def run_worker(cfg: JobConfig, run: Callable[..., int]) -> int:
    """A cluster worker: ``run(cfg)``; a bad value is reported as hp-train reports it (exit code 2). In the
    cluster :func:`launch_cluster` started, or after a failure, the worker leaves without MindSpore's cluster
    teardown (it can hang once a peer has gone); under ``msrun`` a successful worker leaves the cluster
    (``release``) and returns, so msrun's scheduler sees every node finish."""
    try:
        code = run(cfg, distributed=True)
    except ValueError as exc:
        print(f"hp-train: error: {exc}", file=sys.stderr)
        code = 2
    except BaseException:  # pylint: disable=broad-except  # reported, then the process leaves
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    if code == 0 and os.environ.get(_OWN_LAUNCH) != "1":
        from mindspore.communication import release  # pylint: disable=import-outside-toplevel
        release()
        return code
    os._exit(code)  # pylint: disable=protected-access
