# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Step time of the same model (llama3 ``debug``) and batch on MindSpore and torch, plain and ours.

    python benchmarks/backends.py [--rounds 2] [--steps 5] [--seq 64] [--batch 8] [--no-profile] [--rows A,B]
    python benchmarks/backends.py --pair [--config FILE]   # hp-train MindSpore vs torch on one config
    python benchmarks/backends.py --paired-fsdp [--steps 16] [--no-compile]   # 2 ranks FSDP vs plain jit, ~1 min
    python benchmarks/backends.py --paired-dp [--steps 24] [--block 4] [--runs 3]  # 2 ranks, data parallel, in turn

The table (default) has, per round, interleaved so machine noise hits every row alike:

* ``plain-ms-pynative``: the MindSpore Llama (``models/llama3/_mindspore``) in one process, PyNative,
  ``value_and_grad`` + ``nn.AdamWeightDecay``, no hyper_parallel layer at all;
* ``plain-ms-jit``: the same step (forward, backward, optimizer) under ``mindspore.jit`` (graph mode); with
  ``plain-ms-pynative`` the "plain fastest" of the ratios (the faster of the two). Plain has no gradient
  clipping, no LR schedule, no metrics and ``nn.AdamWeightDecay`` (no bias correction); ours clips by the
  global norm (one host copy), schedules the LR and bias-corrects (the same fused kernel);
* ``plain-torch``: the torch Llama, eager, ``torch.optim.AdamW``;
* ``ours-ms-1`` / ``ours-torch-1``: ``hp-train`` with that backend on 1 rank; ``ours-ms-2`` / ``ours-torch-2``:
  on 2 ranks with FSDP (``dp_shard = 2``): each rank computes half the batch; ``-jit``: ``training.compile``
  (MindSpore: the whole forward and backward under one ``mindspore.jit`` graph, then the fused AdamW kernels);
  ``ours-ms-2-dp-jit``: 2 ranks, ``dp_replicate = 2`` (``replicate``; compiled, its buckets are all-reduced
  after the graph) with that jit; ``ours-ms-2-msdefault``: ``ours-ms-2``
  with MindSpore's default runtime settings (asynchronous launch, 5 dispatch and 25 kernel threads);
* ``plain-ms-*-half``: the plain MindSpore rows at half the batch (the per-rank work of the 2-rank runs).

Every process has one intra-op thread (``OMP_NUM_THREADS=1``, ``job.threads = 1``, ``torch.set_num_threads(1)``)
and the MindSpore runtime settings of :func:`hyper_parallel.platform.mindspore.runtime.configure` (what the
trainer applies; ``--ms-runtime default`` measures MindSpore's defaults instead). A row's step time is the
median over its steps without the first (compilation / warm-up); the table gives the median over rounds.
``--paired-fsdp``: one launch of 2 MindSpore ranks, each running plain jit on its half of the batch and ours
(FSDP, ``training.compile``, or PyNative with ``--no-compile``) step by step in turn, then a cProfile of two of
our steps split into phases (:data:`PHASES`). For the table, unless ``--no-profile``: one more run of each of
``ours-ms-1-jit`` and ``ours-ms-2`` (those among ``--rows``) with ``metrics.profile_steps`` (cProfile, see
``trainer/_mindspore/profile.py``), and the breakdown of rank 0's step by layer with its top functions. The load
average is printed before and after.

``--paired-dp``: ``--runs`` launches of 2 MindSpore ranks; in each, plain MindSpore data parallel (``jit`` of
forward + backward, then ``nn.DistributedGradReducer`` and ``nn.AdamWeightDecay``; ``--plain-dp jit-whole``: all
in one graph; ``jit-gather``: ``jit`` plus the per-step parameter all-gather a sharded layout adds, see
:func:`_plain_param_gather`) and ours (``LLMTrainer``, ``dp_replicate = 2``, or ``--ours fsdp``: ``dp_shard = 2``;
``training.compile``) run in turn by blocks of ``--block`` steps in the same processes (see
:func:`paired_dp_rank`); ratio = ours / plain fastest per block, and ours / each plain variant.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

ROOT = Path(__file__).resolve().parents[1]
VOCAB = 1024
#: the plain MindSpore data-parallel variants of ``--paired-dp`` (see :func:`_plain_ms_dp_step`)
PLAIN_DP = ("jit", "jit-whole", "jit-gather")


def launch_env(name: str, args: Dict[str, object]) -> Dict[str, str]:
    """The environment of a benchmark's MindSpore launch: its arguments as JSON under ``name``, the repository on
    ``PYTHONPATH`` (the ranks import ``benchmarks.*``) and one OpenMP thread per rank."""
    return {name: json.dumps(args), "OMP_NUM_THREADS": "1",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")]))}


def _env(ms_runtime: str) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MS_ROLE")}
    env["OMP_NUM_THREADS"] = "1"
    env["HP_MS_RUNTIME"] = ms_runtime
    return env


def _hp_train(backend: str, nproc: int, out: Path, args: argparse.Namespace, *extra: str,
              dp: str = "dp_shard", ms_runtime: str = "") -> Dict[str, float]:
    other = "dp_replicate" if dp == "dp_shard" else "dp_shard"
    cmd = [sys.executable, "-m", "hyper_parallel.trainer.cli", "--config", args.config, "--job.backend", backend,
           "--job.out_dir", str(out), "--job.nproc", str(nproc), "--job.threads", "1", "--parallelism.tp", "1",
           f"--parallelism.{dp}", str(nproc), f"--parallelism.{other}", "1", "--training.steps", str(args.steps),
           "--training.seq_len", str(args.seq), "--training.global_batch", str(args.batch),
           "--metrics.progress", "false", "--metrics.plot", "false", "--checkpoint.enable", "false", *extra]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=_env(ms_runtime or args.ms_runtime), capture_output=True, text=True,
                          check=False, timeout=args.timeout)
    wall = time.perf_counter() - start
    if proc.returncode:
        raise SystemExit(f"{backend} x{nproc} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n"
                         f"{proc.stderr[-3000:]}")
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    steps = [r["step_s"] for r in records[1:]] or [r["step_s"] for r in records]
    return {"step_s": statistics.median(steps), "wall_s": wall, "loss": records[-1]["loss"]}


def _plain(kind: str, batch: int, args: argparse.Namespace) -> Dict[str, float]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", kind, "--batch", str(batch), "--seq",
           str(args.seq), "--steps", str(args.steps)]
    proc = subprocess.run(cmd, cwd=ROOT, env=_env(args.ms_runtime), capture_output=True, text=True, check=False,
                          timeout=args.timeout)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode or not lines:
        raise SystemExit(f"{kind} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1])


# ---------------------------------------------------------------------------------------------- plain workers
def _batches(batch: int, seq: int, steps: int):
    import numpy as np  # pylint: disable=import-outside-toplevel
    rng = np.random.default_rng(0)
    return [rng.integers(0, VOCAB, (batch, seq + 1)).astype(np.int32) for _ in range(steps)]


def _model_config():
    from hyper_parallel.trainer.models import build_model_config  # pylint: disable=import-outside-toplevel
    return build_model_config("llama3", "debug", vocab_size=VOCAB, max_position_embeddings=128)


def _time_steps(step, batches) -> Dict[str, float]:
    times, loss = [], 0.0
    for b in batches:
        start = time.perf_counter()
        loss = step(b)
        times.append(time.perf_counter() - start)
    return {"step_s": statistics.median(times[1:]), "first_s": times[0], "loss": loss}


def plain_mindspore(jit: bool, batch: int, seq: int, steps: int) -> Dict[str, float]:
    """One process: the MindSpore Llama, ``value_and_grad`` + ``nn.AdamWeightDecay``, PyNative or ``jit``."""
    import mindspore as ms  # pylint: disable=import-outside-toplevel
    train = _plain_ms_step(jit, seq)
    return _time_steps(lambda b: float(train(ms.Tensor(b[:, :-1]), ms.Tensor(b[:, 1:])).asnumpy()),
                       _batches(batch, seq, steps))


def _plain_ms_parts(seq: int):
    """The plain MindSpore pieces every plain row builds: the Llama's trainable parameters, ``nn.AdamWeightDecay``
    over them and ``value_and_grad`` of its cross-entropy loss, ``grad_fn(ids, labels) -> (loss, grads)``."""
    import mindspore as ms  # pylint: disable=import-outside-toplevel
    import numpy as np  # pylint: disable=import-outside-toplevel
    from hyper_parallel.models import get_model_spec  # pylint: disable=import-outside-toplevel
    from hyper_parallel.models.llama3._mindspore.model import cross_entropy  # pylint: disable=C0415
    model = get_model_spec("llama3", backend="mindspore").model_cls(_model_config(), seed=0)
    params = model.trainable_params()
    pos = ms.Tensor(np.arange(seq, dtype=np.int32))

    def loss_fn(ids, labels):
        logits = model(ids, pos)
        return cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))

    return params, ms.nn.AdamWeightDecay(params, 1e-3), ms.value_and_grad(loss_fn, None, params)


def _plain_ms_step(jit: bool, seq: int):
    """The plain MindSpore training step ``train(ids, labels) -> loss``, PyNative or under ``mindspore.jit``."""
    import mindspore as ms  # pylint: disable=import-outside-toplevel
    from hyper_parallel.platform.mindspore.runtime import configure  # pylint: disable=import-outside-toplevel
    configure()
    _, opt, grad_fn = _plain_ms_parts(seq)

    def train(ids, labels):
        loss, grads = grad_fn(ids, labels)
        opt(grads)
        return loss

    return ms.jit(train) if jit else train


def plain_torch(batch: int, seq: int, steps: int) -> Dict[str, float]:
    """One process: the torch Llama, eager, ``torch.optim.AdamW``."""
    import torch  # pylint: disable=import-outside-toplevel
    from hyper_parallel.models import get_model_spec  # pylint: disable=import-outside-toplevel
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = get_model_spec("llama3").model_cls(_model_config())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def train(b):
        t = torch.from_numpy(b).long()
        logits = model(t[:, :-1])
        logits = logits if isinstance(logits, torch.Tensor) else logits.logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), t[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        return float(loss)

    return _time_steps(train, _batches(batch, seq, steps))


def paired(config: str, batch: int, seq: int, steps: int) -> Dict[str, object]:
    """One process, step by step in turn: plain MindSpore's whole-step jit and ours (``LLMTrainer`` on MindSpore,
    1 rank, ``training.compile``), so both see the same machine load; the per-step times and their ratios."""
    import mindspore as ms  # pylint: disable=import-outside-toplevel
    from hyper_parallel.trainer.api import LLMTrainer  # pylint: disable=import-outside-toplevel
    from hyper_parallel.trainer.config import load_config  # pylint: disable=import-outside-toplevel
    plain = _plain_ms_step(True, seq)
    over = [("job.backend", "mindspore"), ("job.nproc", 1), ("job.threads", 1), ("parallelism.tp", 1),
            ("parallelism.dp_shard", 1), ("training.compile", True), ("training.seq_len", seq),
            ("training.global_batch", batch), ("training.steps", steps + 1), ("metrics.progress", False),
            ("metrics.plot", False), ("checkpoint.enable", False),
            ("job.out_dir", tempfile.mkdtemp(prefix="hp_bench_paired_"))]
    trainer = LLMTrainer(load_config(config, over), distributed=False)
    trainer.setup()
    times: Dict[str, List[float]] = {"plain-ms-jit": [], "ours-ms-1-jit": []}
    try:
        for i, b in enumerate(_batches(batch, seq, steps)):
            ids, labels = ms.Tensor(b[:, :-1]), ms.Tensor(b[:, 1:])
            start = time.perf_counter()
            float(plain(ids, labels).asnumpy())
            times["plain-ms-jit"].append(time.perf_counter() - start)
            times["ours-ms-1-jit"].append(trainer.train_step(i + 1)["step_s"])
    finally:
        trainer.close()
    ratios = [o / p for o, p in zip(times["ours-ms-1-jit"][1:], times["plain-ms-jit"][1:])]
    return {"times_ms": {k: [round(t * 1000, 1) for t in v] for k, v in times.items()},
            "median_ms": {k: round(statistics.median(v[1:]) * 1000, 1) for k, v in times.items()},
            "ratio_median": round(statistics.median(ratios), 3), "ratio_min": round(min(ratios), 3),
            "ratio_max": round(max(ratios), 3), "load": round(os.getloadavg()[0], 1)}


#: environment variable carrying :func:`paired_fsdp_worker` 's arguments (JSON) into the launched ranks
PAIRED_FSDP_ENV = "HP_BENCH_PAIRED_FSDP"


def paired_fsdp_worker() -> Dict[str, object]:
    """One of 2 MindSpore ranks (launched by :func:`paired_fsdp`), step by step in turn: plain MindSpore's
    whole-step jit on this rank's half of the batch (both ranks at once, after a barrier: the same contention),
    then ours (``LLMTrainer``, ``dp_shard = 2``, ``training.compile``: each rank computes the same half); then one
    more step of ours under cProfile (``trainer/_mindspore/profile.py``'s breakdown)."""
    import mindspore as ms  # pylint: disable=import-outside-toplevel
    from hyper_parallel.trainer._mindspore import profile  # pylint: disable=import-outside-toplevel
    from hyper_parallel.trainer.api import LLMTrainer  # pylint: disable=import-outside-toplevel
    from hyper_parallel.trainer.config import load_config  # pylint: disable=import-outside-toplevel
    a = json.loads(os.environ[PAIRED_FSDP_ENV])
    batch, seq, steps = a["batch"], a["seq"], a["steps"]
    over = [("job.backend", "mindspore"), ("job.nproc", 2), ("job.threads", 1), ("parallelism.tp", 1),
            ("parallelism.dp_shard", 2), ("parallelism.dp_replicate", 1), ("training.compile", a["compile"]),
            ("training.seq_len", seq), ("training.global_batch", batch), ("training.steps", steps + 3),
            ("metrics.progress", False), ("metrics.plot", False), ("checkpoint.enable", False),
            ("job.out_dir", tempfile.mkdtemp(prefix="hp_bench_paired_fsdp_"))]
    trainer = LLMTrainer(load_config(a["config"], over), distributed=True)
    trainer.setup()
    backend = trainer.backend
    plain = _plain_ms_step(True, seq)
    half = batch // 2
    ours = "ours-ms-2-fsdp-jit" if a["compile"] else "ours-ms-2-fsdp"
    times: Dict[str, List[float]] = {"plain-ms-jit-half": [], ours: []}
    try:
        for i, b in enumerate(_batches(batch, seq, steps)):
            mine = b[backend.rank * half:(backend.rank + 1) * half]
            ids, labels = ms.Tensor(mine[:, :-1]), ms.Tensor(mine[:, 1:])
            backend.barrier()
            start = time.perf_counter()
            float(plain(ids, labels).asnumpy())
            times["plain-ms-jit-half"].append(time.perf_counter() - start)
            backend.barrier()
            times[ours].append(trainer.train_step(i + 1)["step_s"])
        prof = profile.start()
        trainer.train_step(steps + 1)
        trainer.train_step(steps + 2)
        path = str(Path(trainer.config.job.out_dir) / f"profile-rank{backend.rank}.json")
        breakdown = profile.stop(prof, path)
        breakdown["phases_s"] = _phases(path[:-5] + ".pstats", 2)
    finally:
        trainer.close()
    ratios = [o / p for o, p in zip(times[ours][1:], times["plain-ms-jit-half"][1:])]
    return {"times_ms": {k: [round(t * 1000, 1) for t in v] for k, v in times.items()},
            "median_ms": {k: round(statistics.median(v[1:]) * 1000, 1) for k, v in times.items()},
            "ratio_median": round(statistics.median(ratios), 3), "ratio_min": round(min(ratios), 3),
            "ratio_max": round(max(ratios), 3), "load": round(os.getloadavg()[0], 1), "profile": breakdown}


#: the phases of our compiled FSDP step: (file suffix, function) -> name
PHASES = {("compiled.py", "gather"): "all-gather into the twin", ("compiled.py", "value_and_grad"): "graph launch",
          ("~", "<function Tensor.asnumpy"): "host waits (graph compute, loss copies)",
          ("compiled.py", "reduce"): "reduce-scatter + split", ("backend.py", "_clip"): "clip (global norm)",
          ("optimizers.py", "step"): "AdamW (fused kernels)", ("backend.py", "train_step"): "whole train_step"}


def _phases(pstats_path: str, steps: int) -> Dict[str, float]:
    """Inclusive seconds per step of :data:`PHASES` in a cProfile dump of ``steps`` steps."""
    import pstats  # pylint: disable=import-outside-toplevel
    stats = pstats.Stats(pstats_path).stats  # pylint: disable=no-member
    out = {}
    for (suffix, func), name in PHASES.items():
        total = sum(v[3] for f, v in stats.items() if f[0].endswith(suffix) and f[2].startswith(func))
        out[name] = round(total / steps, 4)
    return out


def paired_fsdp(args: argparse.Namespace) -> List[Dict[str, object]]:
    """``--paired-fsdp``: :func:`paired_fsdp_worker` on 2 MindSpore ranks; per rank its times and ratios."""
    from hyper_parallel.testing.mindspore_launch import launch  # pylint: disable=import-outside-toplevel
    env = launch_env(PAIRED_FSDP_ENV, {"batch": args.batch, "seq": args.seq, "steps": args.steps,
                                       "config": args.config, "compile": not args.no_compile})
    return launch("benchmarks.backends:paired_fsdp_worker", world_size=2, timeout=args.timeout, env=env)


def _plain_param_gather(params):
    """Plain MindSpore's FSDP communication on data-parallel ranks (``--plain-dp jit-gather``): one graph that
    concatenates the parameters, keeps this rank's 1/world slice, all-gathers the slices (``ops.AllGather``) and
    writes the gathered values back into the parameters -- the per-step parameter all-gather (and its copies) a
    sharded layout adds to data parallel, done with no hyper_parallel layer (the values written are the ones the
    parameters hold: training is plain data parallel's). Plain MindSpore has no sharded data parallel on CPU (its
    parallel optimizer is Ascend-only), so this is the same per-rank work as ours under FSDP."""
    import mindspore as ms  # pylint: disable=import-outside-toplevel
    from mindspore import mint, ops  # pylint: disable=import-outside-toplevel
    from mindspore.communication import get_group_size, get_rank  # pylint: disable=import-outside-toplevel
    world, rank = get_group_size(), get_rank()
    sizes = tuple(int(p.size) for p in params)
    shapes = tuple(tuple(p.shape) for p in params)
    total = sum(sizes)
    per = -(-total // world)
    weights = ms.ParameterTuple(params)
    gather = ops.AllGather()

    def run():
        flat = mint.cat([weights[i].reshape(-1) for i in range(len(sizes))], 0)
        if per * world != total:
            flat = mint.cat((flat, mint.zeros((per * world - total,), dtype=flat.dtype)), 0)
        full = gather(mint.narrow(flat, 0, rank * per, per))
        start = 0
        for i in range(len(sizes)):  # pylint: disable=consider-using-enumerate  # a loop mindspore.jit unrolls
            ops.assign(weights[i], mint.narrow(full, 0, start, sizes[i]).reshape(shapes[i]))
            start += sizes[i]
        return full

    return ms.jit(run)


def _plain_ms_dp_step(seq: int, whole: bool, gather: bool = False):
    """Plain MindSpore data parallel on this rank (no hyper_parallel layer): ``value_and_grad`` under
    ``mindspore.jit``, the gradients averaged by ``mindspore.nn.DistributedGradReducer`` (mccl all-reduces),
    ``nn.AdamWeightDecay``. ``whole``: the reducer and the optimizer inside the same jit graph as forward and
    backward (the whole step one graph); else the graph returns the gradients and the reducer and optimizer run
    after it in PyNative."""
    import mindspore as ms  # pylint: disable=import-outside-toplevel
    from mindspore.communication import GlobalComm, get_group_size  # pylint: disable=import-outside-toplevel
    params, opt, grad_fn = _plain_ms_parts(seq)
    reducer = ms.nn.DistributedGradReducer(params, mean=True, degree=get_group_size(),
                                           group=GlobalComm.WORLD_COMM_GROUP)

    def train(ids, labels):
        loss, grads = grad_fn(ids, labels)
        opt(reducer(grads))
        return loss

    if whole:
        return ms.jit(train), params
    compiled = ms.jit(grad_fn)
    gathered = _plain_param_gather(params) if gather else None

    def split(ids, labels):
        if gathered is not None:
            gathered()
        loss, grads = compiled(ids, labels)
        opt(reducer(grads))
        return loss

    return split, params


def _paired_dp_rows(plains, data, trainer, ours_params, block, ours_row="ours-ms-2-dp-jit"):
    """``{row: (run one block, the parameters its optimizer updates)}``."""
    def plain_block(fn):
        return lambda: [float(fn(ids, labels).asnumpy()) for ids, labels in data]

    rows = {k: (plain_block(fn), params) for k, (fn, params) in plains.items()}
    rows[ours_row] = (lambda: [trainer.train_step(trainer.step + 1) for _ in range(block)], ours_params)
    return rows


def _time_block(plat, run, params, prof=None) -> float:
    """Seconds of ``run()`` started at a barrier and ended when every parameter's update has run (``prof``: a
    ``cProfile.Profile`` enabled around it)."""
    plat.barrier()
    if prof is not None:
        prof.enable()
    start = time.perf_counter()
    run()
    _settle(params)
    seconds = time.perf_counter() - start
    if prof is not None:
        prof.disable()
    return seconds


def _settle(params) -> None:
    """Wait until the block's work has run: the loss's host copy returns while the rest of a compiled backward,
    the gradient all-reduces and the optimizer's updates may still run, which would bill them to the next row
    (measured: plain's graph alone timed right after a step took longer than the step). Reading every parameter
    waits for all of them (the same reads for every row)."""
    for p in params:
        p.asnumpy()


def paired_dp_rank() -> Dict[str, object]:
    """One rank of ``--paired-dp`` (run by ``hyper_parallel.testing.mindspore_launch``; arguments in
    ``HP_BENCH_ARGS``): plain MindSpore data parallel (:func:`_plain_ms_dp_step`) and ours (``LLMTrainer``,
    ``dp_replicate = 2``, ``training.compile``) in the same process, in turn by blocks of ``block`` consecutive
    steps (who goes first alternates), each block started at a barrier and ended when every parameter's update
    has run; this rank's seconds per step of each block."""
    import mindspore as ms  # pylint: disable=import-outside-toplevel
    from hyper_parallel.platform import get_platform  # pylint: disable=import-outside-toplevel
    from hyper_parallel.platform.mindspore.runtime import configure  # pylint: disable=import-outside-toplevel
    from hyper_parallel.trainer.api import LLMTrainer  # pylint: disable=import-outside-toplevel
    from hyper_parallel.trainer.config import load_config  # pylint: disable=import-outside-toplevel
    import hyper_parallel as hp  # pylint: disable=import-outside-toplevel
    args = json.loads(os.environ["HP_BENCH_ARGS"])
    batch, seq, block = args["batch"], args["seq"], args["block"]
    configure()  # the trainer's runtime settings, before plain's first op: both rows run under them
    ms.set_context(mode=ms.PYNATIVE_MODE)
    hp.init_process_group(platform="mindspore")
    plat = get_platform("mindspore")
    rank, world = plat.get_rank(), plat.get_world_size()
    plains = {f"plain-ms-dp-{kind}": _plain_ms_dp_step(seq, kind == "jit-whole", kind == "jit-gather")
              for kind in args["plain"]}
    blocks = max(2, args["steps"] // block)
    fsdp = args.get("ours") == "fsdp"  # --ours fsdp: ours is FSDP (dp_shard = world) + compile
    ours_row = "ours-ms-2-fsdp-jit" if fsdp else "ours-ms-2-dp-jit"
    over = [("job.backend", "mindspore"), ("job.nproc", world), ("job.threads", 1), ("parallelism.tp", 1),
            ("parallelism.dp_shard", world if fsdp else 1), ("parallelism.dp_replicate", 1 if fsdp else world),
            ("training.compile", True),
            ("training.seq_len", seq), ("training.global_batch", batch), ("training.steps", blocks * block),
            ("metrics.progress", False), ("metrics.plot", False), ("checkpoint.enable", False),
            ("job.out_dir", tempfile.mkdtemp(prefix="hp_bench_paired_dp_"))]
    trainer = LLMTrainer(load_config(args["config"], over), distributed=True)
    trainer.setup()
    ours_params = list(trainer.backend.optimizer.parameters)
    times: Dict[str, List[float]] = {**{k: [] for k in plains}, ours_row: []}
    per = batch // world
    data = [(ms.Tensor(b[rank * per:(rank + 1) * per, :-1]), ms.Tensor(b[rank * per:(rank + 1) * per, 1:]))
            for b in _batches(batch, seq, block)]
    profs = {}
    if args.get("profile"):  # --profile PATH: cProfile of every row from the second block on, PATH.<row>.rank<N>
        import cProfile  # pylint: disable=import-outside-toplevel
        profs = {name: cProfile.Profile() for name in times}
    rows = _paired_dp_rows(plains, data, trainer, ours_params, block, ours_row)
    try:
        for i in range(blocks):
            order = [*plains, ours_row]  # who goes first alternates
            for name in order if i % 2 == 0 else order[::-1]:
                profiled = profs.get(name) if i >= 1 else None
                times[name].append(_time_block(plat, *rows[name], profiled) / block)
    finally:
        trainer.close()
    for name, prof in profs.items():
        prof.dump_stats(f"{args['profile']}.{name}.rank{rank}")
    return {"rank": rank, "times": times, "load": os.getloadavg()[0]}


def paired_dp(args: argparse.Namespace) -> Dict[str, object]:
    """``--paired-dp``: ``--runs`` launches of 2 MindSpore ranks running :func:`paired_dp_rank`; per block the
    slower rank's time per step of each row; ours / plain fastest (the fastest ``--plain-dp`` variant of that
    block) per block, median over the blocks without the first (compilation), per run and over all runs."""
    bad = [k for k in args.plain_dp if k not in PLAIN_DP]
    if bad or not args.plain_dp:
        raise SystemExit(f"--plain-dp {','.join(args.plain_dp)!r}: expected some of {', '.join(PLAIN_DP)}")
    from hyper_parallel.testing.mindspore_launch import launch  # pylint: disable=import-outside-toplevel
    env = launch_env("HP_BENCH_ARGS", {"batch": args.batch, "seq": args.seq, "steps": args.steps,
                                       "block": args.block, "config": args.config, "profile": args.profile,
                                       "plain": args.plain_dp, "ours": args.ours})
    runs, all_ratios = [], {k: [] for k in ("fastest", *args.plain_dp)}
    for _ in range(args.runs):
        load = os.getloadavg()[0]
        res = launch("benchmarks.backends:paired_dp_rank", world_size=2, timeout=args.timeout, env=env)
        run, ratios = _paired_dp_run(res, f"ours-ms-2-{args.ours}-jit", args.plain_dp)
        for k, v in ratios.items():
            all_ratios[k] += v
        runs.append({**run, "load_before": round(load, 1), "load_after": round(os.getloadavg()[0], 1)})
        print(json.dumps(runs[-1]), flush=True)
    return {"runs": runs, "ratio_median_all": round(statistics.median(all_ratios["fastest"]), 3),
            "ratio_median_all_by_plain": {k: round(statistics.median(v), 3) for k, v in all_ratios.items()}}


def _paired_dp_run(res: List[Dict[str, object]], ours_row: str, plain_dp: List[str]):
    """One ``--paired-dp`` launch's summary from its ranks' results (per block the slower rank), and its per-block
    ratios of ours against the fastest plain of each block and against each plain variant."""
    n = len(res[0]["times"][ours_row])
    rows = {k: [max(r["times"][k][i] for r in res) for i in range(n)] for k in res[0]["times"]}
    plains = {"fastest": [min(v) for v in zip(*(rows[f"plain-ms-dp-{k}"] for k in plain_dp))],
              **{k: rows[f"plain-ms-dp-{k}"] for k in plain_dp}}
    ratios = {k: [o / p for o, p in zip(rows[ours_row][1:], v[1:])] for k, v in plains.items()}
    fastest = ratios["fastest"]
    return {"blocks_ms_per_step": {k: [round(x * 1000) for x in v] for k, v in rows.items()},
            "median_ms": {k: round(statistics.median(v[1:]) * 1000, 1) for k, v in rows.items()},
            "ratio_median": round(statistics.median(fastest), 3), "ratio_min": round(min(fastest), 3),
            "ratio_max": round(max(fastest), 3),
            "ratio_median_by_plain": {k: round(statistics.median(v), 3) for k, v in ratios.items()}}, ratios


def _worker(kind: str, args: argparse.Namespace) -> None:
    if kind == "plain-torch":
        out = plain_torch(args.batch, args.seq, args.steps)
    else:
        out = plain_mindspore(kind == "plain-ms-jit", args.batch, args.seq, args.steps)
    print(json.dumps(out), flush=True)


# ---------------------------------------------------------------------------------------------- the table
ROWS = ("plain-ms-pynative", "plain-ms-jit", "plain-torch", "ours-ms-1", "ours-ms-1-jit", "ours-torch-1",
        "ours-ms-2", "ours-ms-2-dp-jit", "ours-torch-2", "ours-ms-2-msdefault", "plain-ms-pynative-half",
        "plain-ms-jit-half")


def _selected(spec: str) -> List[str]:
    """``--rows``: comma-separated row names (``all``: every row), in the table's order."""
    if spec == "all":
        return list(ROWS)
    names = [n.strip() for n in spec.split(",") if n.strip()]
    bad = [n for n in names if n not in ROWS]
    if bad or not names:
        raise SystemExit(f"--rows {spec!r}: expected 'all' or comma-separated names from {', '.join(ROWS)}")
    return [n for n in ROWS if n in names]


def _row(name: str, tmp: Path, r: int, args: argparse.Namespace) -> Dict[str, float]:
    if name.startswith("ours-"):
        parts = name.split("-")
        backend = "mindspore" if parts[1] == "ms" else parts[1]
        extra = ("--training.compile", "true") if name.endswith("-jit") else ()
        return _hp_train(backend, int(parts[2]), tmp / f"{name}-{r}", args, *extra,
                         dp="dp_replicate" if "-dp-" in name else "dp_shard",
                         ms_runtime="default" if name.endswith("-msdefault") else "")
    half = name.endswith("-half")
    return _plain(name[:-5] if half else name, args.batch // 2 if half else args.batch, args)


#: the profiled runs: name -> (ranks, extra hp-train arguments)
PROFILED = {"ours-ms-1-jit": (1, ("--training.compile", "true")), "ours-ms-2": (2, ())}


def _profile(tmp: Path, name: str, args: argparse.Namespace) -> Dict[str, object]:
    out = tmp / f"profiled-{name}"
    step = max(2, args.steps - 1)
    nproc, extra = PROFILED[name]
    _hp_train("mindspore", nproc, out, args, *extra, "--metrics.profile_steps", f"[{step}]")
    traces = sorted((out / "profile").glob("trace-rank0-*.json"))
    return json.loads(traces[-1].read_text(encoding="utf-8"))


def _ratios(med: Dict[str, float]) -> Dict[str, float]:
    """The ratios whose rows were run."""
    med = dict(med)
    for suffix in ("", "-half"):
        have = [med[k + suffix] for k in ("plain-ms-pynative", "plain-ms-jit") if k + suffix in med]
        if have:
            med["fastest" + suffix] = min(have)
    pairs = {
        "plain-ms-pynative / plain-torch": ("plain-ms-pynative", "plain-torch"),
        "plain-ms-jit / plain-torch": ("plain-ms-jit", "plain-torch"),
        "plain-ms-pynative / plain-ms-jit": ("plain-ms-pynative", "plain-ms-jit"),
        "ours-ms-1 / plain-ms-pynative": ("ours-ms-1", "plain-ms-pynative"),
        "ours-ms-1-jit / plain-ms fastest": ("ours-ms-1-jit", "fastest"),
        "ours-ms-2 (FSDP) / plain-ms fastest, half batch": ("ours-ms-2", "fastest-half"),
        "ours-ms-2-dp-jit / plain-ms fastest, half batch": ("ours-ms-2-dp-jit", "fastest-half"),
        "ours-ms-1 / ours-torch-1": ("ours-ms-1", "ours-torch-1"),
        "ours-ms-1-jit / ours-torch-1": ("ours-ms-1-jit", "ours-torch-1"),
        "ours-ms-2 (FSDP) / ours-torch-2 (FSDP)": ("ours-ms-2", "ours-torch-2"),
        "ours-ms-2-dp-jit / ours-torch-2 (FSDP)": ("ours-ms-2-dp-jit", "ours-torch-2"),
        "ours-ms-2 MindSpore defaults / fast runtime": ("ours-ms-2-msdefault", "ours-ms-2"),
        "ours-torch-1 / plain-torch": ("ours-torch-1", "plain-torch"),
    }
    return {k: med[a] / med[b] for k, (a, b) in pairs.items() if a in med and b in med}


def _print_table(results: Dict[str, List[Dict[str, float]]], args: argparse.Namespace) -> Dict[str, float]:
    med = {k: statistics.median(x["step_s"] for x in v) for k, v in results.items()}
    print(f"== step time, llama3 debug, global batch {args.batch} x seq {args.seq}, {args.steps} steps x "
          f"{args.rounds} rounds, 1 thread per process, MindSpore runtime '{args.ms_runtime}' ==")
    for k in results:
        per = ", ".join(f"{x['step_s'] * 1000:.0f}" for x in results[k])
        print(f"{k:24s} median {med[k] * 1000:9.1f} ms   (rounds: {per})")
    ratios = _ratios(med)
    for k, v in ratios.items():
        print(f"ratio {k:50s} {v:6.2f}x")
    return ratios


def table(args: argparse.Namespace) -> None:
    """Interleaved rounds of every row; the ratios; the profile of ours on 2 ranks."""
    load_before = os.getloadavg()
    rows = _selected(args.rows)
    results: Dict[str, List[Dict[str, float]]] = {k: [] for k in rows}
    with tempfile.TemporaryDirectory(prefix="hp_bench_backends_") as tmp:
        for r in range(args.rounds):
            for name in rows:
                res = _row(name, Path(tmp), r, args)
                results[name].append(res)
                print(f"round {r + 1}/{args.rounds} {name:24s}: step {res['step_s'] * 1000:8.1f} ms  "
                      f"loss {res['loss']:.4f}", flush=True)
        _print_table(results, args)
        for name in [] if args.no_profile else [n for n in PROFILED if n in rows]:
            prof = _profile(Path(tmp), name, args)
            print(f"== where {name} spends rank 0's step (cProfile, {prof['total_s']:.2f} s profiled) ==")
            for cat, v in prof["categories"].items():
                print(f"{cat:18s} self {v['self_s']:7.3f} s ({v['self_s'] / prof['total_s']:5.1%})   "
                      f"inclusive {v['inclusive_s']:7.3f} s")
            for top in prof["top"][:12]:
                print(f"  {top['self_s']:7.3f} s self {top['calls']:6d} calls  {top['func'][-90:]}")
    load_after = os.getloadavg()
    print(f"load average before {load_before[0]:.1f}, after {load_after[0]:.1f} (1-min)")


def pair(args: argparse.Namespace) -> None:
    """hp-train on ``--config`` as written (its ranks and layout), MindSpore vs torch, interleaved."""
    results: Dict[str, List[Dict[str, float]]] = {"mindspore": [], "torch": []}
    with tempfile.TemporaryDirectory(prefix="hp_bench_backends_") as tmp:
        for r in range(args.rounds):
            for backend in ("mindspore", "torch"):
                cmd = [sys.executable, "-m", "hyper_parallel.trainer.cli", "--config", args.config,
                       "--job.backend", backend, "--job.out_dir", str(Path(tmp) / f"{backend}{r}"),
                       "--training.steps", str(args.steps), "--training.seq_len", str(args.seq),
                       "--training.global_batch", str(args.batch), "--metrics.progress", "false",
                       "--metrics.plot", "false", "--checkpoint.enable", "false"]
                proc = subprocess.run(cmd, cwd=ROOT, env=_env(args.ms_runtime), capture_output=True, text=True,
                                      check=False, timeout=args.timeout)
                if proc.returncode:
                    raise SystemExit(f"{backend} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
                lines = (Path(tmp) / f"{backend}{r}" / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
                steps = [json.loads(line)["step_s"] for line in lines][1:]
                results[backend].append(statistics.median(steps))
                print(f"round {r + 1} {backend:9s}: step {results[backend][-1] * 1000:8.1f} ms", flush=True)
    med = {b: statistics.median(v) for b, v in results.items()}
    print(f"{Path(args.config).name}: MindSpore {med['mindspore'] * 1000:.1f} ms, torch {med['torch'] * 1000:.1f} "
          f"ms per step: {med['mindspore'] / med['torch']:.2f}x; load {os.getloadavg()[0]:.1f}")


def main() -> None:
    """The table, ``--pair``, or one plain worker (``--worker``)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default=str(ROOT / "configs" / "mindspore_tp_fsdp.toml"))
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per run")
    p.add_argument("--ms-runtime", default="fast", choices=("fast", "default"),
                   help="MindSpore runtime settings (HP_MS_RUNTIME)")
    p.add_argument("--no-profile", action="store_true")
    p.add_argument("--rows", default="all", help="comma-separated rows of the table (default: all)")
    p.add_argument("--pair", action="store_true", help="hp-train on --config, MindSpore vs torch")
    p.add_argument("--worker", choices=("plain-ms-pynative", "plain-ms-jit", "plain-torch"), help=argparse.SUPPRESS)
    p.add_argument("--paired", action="store_true",
                   help="one process: plain whole-step jit and ours (1 rank, training.compile), step by step in turn")
    p.add_argument("--paired-fsdp", action="store_true",
                   help="2 MindSpore ranks: plain whole-step jit at half the batch on each rank and ours (FSDP, "
                        "training.compile), step by step in turn")
    p.add_argument("--no-compile", action="store_true", help="--paired-fsdp: ours in PyNative (the baseline)")
    p.add_argument("--paired-dp", action="store_true",
                   help="2 MindSpore ranks: plain data parallel (jit + DistributedGradReducer) and ours (dp_replicate "
                        "+ training.compile), step by step in turn in the same processes")
    p.add_argument("--runs", type=int, default=3, help="--paired-dp: launches")
    p.add_argument("--block", type=int, default=4, help="--paired-dp: consecutive steps of one row between switches")
    p.add_argument("--plain-dp", default="jit", type=lambda v: [x.strip() for x in v.split(",") if x.strip()],
                   help="--paired-dp: the plain variants, comma-separated: 'jit' (jit forward + backward, then "
                        "DistributedGradReducer and the optimizer; default), 'jit-whole' (all in one graph), "
                        "'jit-gather' (jit plus the parameter all-gather a sharded layout adds)")
    p.add_argument("--ours", default="dp", choices=("dp", "fsdp"),
                   help="--paired-dp: ours as data parallel (dp_replicate, default) or FSDP (dp_shard), with compile")
    p.add_argument("--profile", default="",
                   help="--paired-dp: cProfile each row (from its second block) to PATH.<row>.rank<N>")
    args = p.parse_args()
    if args.paired_fsdp:
        for rank, res in enumerate(paired_fsdp(args)):
            print(json.dumps({"rank": rank, **res}), flush=True)
    elif args.paired:
        print(json.dumps(paired(args.config, args.batch, args.seq, args.steps)), flush=True)
    elif args.paired_dp:
        print(json.dumps(paired_dp(args)), flush=True)
    elif args.worker:
        _worker(args.worker, args)
    elif args.pair:
        pair(args)
    else:
        table(args)


if __name__ == "__main__":
    main()
