# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The composition matrix: every parallelism combination of ``hyper_parallel/trainer/composition.yaml`` through
``hp-train``, against one process.

    python -m hyper_parallel.devtools.composition list                 # the combinations, legal or why refused
    python -m hyper_parallel.devtools.composition run [-k GLOB] [--pairwise] [--in-process] [--out FILE]
                                                      [--timeout S] [--jobs N]
    python -m hyper_parallel.devtools.composition merge RUN.json       # an hp-train run into the results
    python -m hyper_parallel.devtools.composition pairwise [--budget S]  # the CI subset (tests/st/torch)
    python -m hyper_parallel.devtools.composition doc [--check]         # docs/parallelism.md from table + results

Legality is decided by the one config validation (:func:`hyper_parallel.trainer.validate.validate_job`, what
``hp-train --check`` runs); there is no second list of illegal combinations. Each legal combination runs
``steps`` steps through ``hp-train`` (a real torchrun launch); its per-step losses and its final parameters (read
from the checkpoint it writes at the last step) are compared with one process (``hp-train`` on one rank, every
degree 1, no activation policy or compile) of the same model, data and precision; the one-process reference runs
once per (model, precision, micro-batch count) within a run. A model of the table's ``per_micro_batch`` list (MoE
auxiliary loss, taken per micro-batch) is compared with one process accumulating gradients over the same
micro-batches (``grad_accum`` = the combination's ``grad_accum`` x ``pp_microbatches`` under PP); every other
model with one process without accumulation. Each illegal combination must be refused
by ``hp-train --check`` with exit 2 and one line naming both conflicting settings. Results go to a JSON file
(default ``docs/parallelism_results.json``), from which ``doc`` renders ``docs/parallelism.md``.

Pure logic (table, expansion, pairwise cover, rendering) imports no framework; ``run`` starts processes.
"""
from __future__ import annotations

import argparse
import datetime
import fnmatch
import hashlib
import itertools
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

import yaml

__all__ = ["Combination", "MatrixRunner", "check_refusal", "TABLE_PATH", "load_table", "expand", "judge", "pairs_of",
           "pairwise_cover", "render_doc", "run_matrix", "main", "RESULTS_PATH", "DOC_PATH", "train_in_process",
           "run_in_process", "run_matrix_in_process", "micro_batch_count", "reference_micro_batches",
           "reference_overrides", "reference_label", "full_parameters", "merge_runs", "row_runner",
           "pairwise_combinations", "HP_TRAIN", "IN_PROCESS", "CHECK",
           "ensure_vl_data"]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TABLE_PATH = os.path.join(ROOT, "hyper_parallel", "trainer", "composition.yaml")
RESULTS_PATH = os.path.join(ROOT, "docs", "parallelism_results.json")
DOC_PATH = os.path.join(ROOT, "docs", "parallelism.md")
DEGREES = ("dp_replicate", "dp_shard", "cp", "tp", "pp")
#: dimensions that only mean something while another is active (``pp_schedule`` needs ``pp > 1``)
ACTIVE_WHEN = {"pp_schedule": "pp", "pp_microbatches": "pp", "pp_layers_per_stage": "pp", "pp_overlap_b_f": "pp",
               "vl_encoder": "pp", "vl_encoder_ranks": "pp",
               "cp_method": "cp", "cp_load_balance": "cp", "sequence_parallel": "tp", "loss_parallel": "tp"}
_ROW_KEYS = ("model", "note", "ranks8")
#: what verified a result row (its ``runner``): one ``hp-train`` launch (torchrun, parameters read back from the
#: checkpoint), the in-process pools (``LLMTrainer`` in reused gloo workers), or ``hp-train --check`` (a refusal)
HP_TRAIN, IN_PROCESS, CHECK = "hp-train", "in-process", "hp-train --check"


@dataclass(frozen=True)
class Combination:
    """One expanded row: ``dims`` are the non-default dimension values that run (after an 8-rank shape's
    halving); ``overrides`` the ``--section.key value`` pairs (model, base and dimensions)."""

    cid: str
    model: str
    dims: Tuple[Tuple[str, Any], ...]
    overrides: Tuple[Tuple[str, Any], ...]
    nproc: int
    scaled_from: str = ""
    note: str = ""

    @property
    def dim_map(self) -> Dict[str, Any]:
        """``dims`` as a dict."""
        return dict(self.dims)


# ---------------------------------------------------------------------------------------------- the table
def load_table(path: Optional[str] = None) -> Dict[str, Any]:
    """The table (``composition.yaml``); a ``ValueError`` naming the entry when it is malformed."""
    path = path or TABLE_PATH
    with open(path, encoding="utf-8") as fh:
        table = yaml.safe_load(fh)
    for key in ("steps", "tolerance", "base", "models", "dimensions", "rows"):
        if key not in table:
            raise ValueError(f"{path}: missing top-level key {key!r}")
    for name, dim in table["dimensions"].items():
        if "default" not in dim or "values" not in dim:
            raise ValueError(f"{path}: dimensions.{name}: needs 'values' and 'default'")
        if not _has_value(dim["values"], dim["default"]):
            raise ValueError(f"{path}: dimensions.{name}: default {dim['default']!r} is not one of its values")
    for i, row in enumerate(table["rows"]):
        unknown = set(row) - set(table["dimensions"]) - set(_ROW_KEYS)
        if unknown or row.get("model") is None:
            raise ValueError(f"{path}: rows[{i}] {row}: unknown dimension(s) {sorted(unknown)} or no model")
    return table


def table_digest(path: Optional[str] = None) -> str:
    """SHA-256 (16 hex digits) of the table file: results name the table they were run from."""
    with open(path or TABLE_PATH, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()[:16]


def _has_value(values: Any, value: Any) -> bool:
    """Whether ``value`` is one of ``values`` (a list, or a mapping of named values), type included."""
    return any(v == value and type(v) is type(value) for v in values)


def _dim_overrides(dim: Mapping[str, Any], value: Any) -> List[Tuple[str, Any]]:
    if isinstance(dim["values"], Mapping):
        return list(dim["values"][value].items())
    if value is None:
        return []
    return [(dim["key"], value)]


def _cid(model: str, dims: Mapping[str, Any]) -> str:
    parts = [model]
    for name, value in dims.items():
        text = json.dumps(value, separators=(",", "")) if isinstance(value, list) else _text(value)
        parts.append(f"{name}={text}")
    return " ".join(parts)


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _halve(dims: Dict[str, Any], degree: str) -> str:
    full = dict(dims)
    dims[degree] = dims[degree] // 2
    shape = " x ".join(f"{n} {full[n]}" for n in DEGREES if full.get(n, 1) > 1)
    return f"8-rank shape {shape}, run at 4 ranks with {degree} halved"


def _combination(table: Mapping[str, Any], model: str, chosen: Dict[str, Any], row: Mapping[str, Any]
                 ) -> Combination:
    dims_table = table["dimensions"]
    scaled = _halve(chosen, row["ranks8"]) if row.get("ranks8") else ""
    dims = {n: v for n, v in chosen.items() if v != dims_table[n]["default"] or type(v) is not type(
        dims_table[n]["default"])}
    dims = {n: dims[n] for n in dims_table if n in dims}  # table order
    overrides = list(table["models"][model].items()) + list(table["base"].items())
    for name in dims_table:
        value = chosen.get(name, dims_table[name]["default"])
        overrides += _dim_overrides(dims_table[name], value)
    nproc = math.prod(chosen.get(n, dims_table[n]["default"]) for n in DEGREES)
    cid = _cid(model, dims) + (f" (8-rank shape, {row['ranks8']} halved)" if scaled else "")
    return Combination(cid, model, tuple(dims.items()), tuple(overrides), nproc, scaled,
                       str(row.get("note", "")))


def expand(table: Mapping[str, Any]) -> List[Combination]:
    """Every combination of the table's rows (list values expand as a cross product), in row order, without
    repeats (the first row that names a combination keeps it)."""
    out: List[Combination] = []
    seen: Set[str] = set()
    for row in table["rows"]:
        names = [n for n in row if n not in _ROW_KEYS]
        models = row["model"] if isinstance(row["model"], list) else [row["model"]]
        choices = [row[n] if isinstance(row[n], list) and n != "pp_layers_per_stage" or (
            n == "pp_layers_per_stage" and row[n] and isinstance(row[n][0], list)) else [row[n]] for n in names]
        for model in models:
            for values in itertools.product(*choices):
                combo = _combination(table, model, dict(zip(names, values)), row)
                if combo.cid not in seen:
                    seen.add(combo.cid)
                    out.append(combo)
    return out


def all_dims(table: Mapping[str, Any], combo: Combination) -> Dict[str, Any]:
    """Every dimension's value in ``combo`` (defaults filled in), plus ``model``; dimensions that are not active
    (``pp_schedule`` without ``pp``) are left out."""
    dims_table = table["dimensions"]
    chosen = combo.dim_map
    out: Dict[str, Any] = {"model": combo.model}
    for name, dim in dims_table.items():
        gate = ACTIVE_WHEN.get(name)
        if gate and chosen.get(gate, dims_table[gate]["default"]) <= 1:
            continue
        out[name] = chosen.get(name, dim["default"])
    return out


# ---------------------------------------------------------------------------------------------- legality
def job_config(combo: Combination, extra: Sequence[Tuple[str, Any]] = ()) -> Any:
    """The trainer config of ``combo`` (``job.nproc`` set), with ``extra`` overrides last."""
    from hyper_parallel.trainer.config import load_config  # pylint: disable=import-outside-toplevel
    return load_config(None, list(combo.overrides) + [("job.nproc", combo.nproc)] + list(extra))


def judge(combo: Combination) -> Tuple[bool, str]:
    """``(True, "")`` when the one validation accepts ``combo``, else ``(False, its one-line reason)``."""
    from hyper_parallel.trainer.config import ConfigError  # pylint: disable=import-outside-toplevel
    from hyper_parallel.trainer.validate import validate_job  # pylint: disable=import-outside-toplevel
    try:
        validate_job(job_config(combo))
    except ConfigError as exc:
        return False, str(exc)
    return True, ""


def cli_args(overrides: Iterable[Tuple[str, Any]]) -> List[str]:
    """``--section.key VALUE`` arguments (values written as TOML literals)."""
    out: List[str] = []
    for key, value in overrides:
        out += [f"--{key}", _literal(value)]
    return out


def _literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    return repr(value)


# ---------------------------------------------------------------------------------------------- running
def _hp_train() -> List[str]:
    return [sys.executable, "-m", "hyper_parallel.trainer.cli"]


def _one_line(text: str) -> str:
    """The most telling line of a failed run's output (the error, not the traceback frames)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and "ChildFailedError" not in ln
             and "torch/distributed/elastic" not in ln]
    for marker in ("hp-train: error:", "Error:", "Error", "error", "Traceback"):
        hits = [ln for ln in lines if marker in ln and not ln.startswith("File ")]
        if hits:
            return hits[-1][:400] if marker != "Traceback" else lines[-1][:400]
    return (lines[-1] if lines else "no output")[:400]


def _kill_tree(pid: int) -> None:
    """SIGTERM the session ``pid`` leads (torchrun forwards it to its workers), then SIGKILL what is left of
    it and of its descendants (torchrun starts its workers in sessions of their own)."""
    try:
        import psutil  # pylint: disable=import-outside-toplevel
        tree = psutil.Process(pid).children(recursive=True)
    except Exception:  # pylint: disable=broad-except  # psutil missing or the process already gone
        tree = []
    try:
        os.killpg(pid, signal.SIGTERM)
        time.sleep(5)
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    for child in tree:
        try:
            child.kill()
        except Exception:  # pylint: disable=broad-except  # already exited
            pass


def _run(cmd: List[str], timeout: float, cwd: str) -> Tuple[int, str, float]:
    """Run ``cmd`` in its own session; on timeout kill that session (only the processes it started)."""
    start = time.perf_counter()
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          start_new_session=True, env=env) as proc:
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_tree(proc.pid)
            out, _ = proc.communicate()
            return 124, (out or "") + f"\ntimed out after {timeout:.0f} s", time.perf_counter() - start
    return proc.returncode, out or "", time.perf_counter() - start


def _read_losses(out_dir: str) -> List[float]:
    path = os.path.join(out_dir, "metrics.jsonl")
    if not os.path.isfile(path):
        return []
    with open(path, encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    return [float(r["loss"]) for r in rows if "loss" in r and "step" in r and "eval_loss" not in r]


def _read_params(ckpt_root: str, steps: int) -> Dict[str, Any]:
    """The model's full parameters from the checkpoint of step ``steps`` (resharded while read)."""
    from hyper_parallel.checkpoint._torch.convert import read_full  # pylint: disable=import-outside-toplevel
    from hyper_parallel.checkpoint.api import CheckpointManager  # pylint: disable=import-outside-toplevel
    path = CheckpointManager(ckpt_root).checkpoint_path(steps)
    model = read_full(path)["model"]
    return {k: v for k, v in model.items() if hasattr(v, "shape")}


def _run_overrides(nproc: int, out_dir: str, steps: int, cache: str) -> List[Tuple[str, Any]]:
    """What every matrix run adds to its combination: ``steps`` steps, metrics and one final checkpoint under
    ``out_dir``, the shared data cache."""
    return [("job.nproc", nproc), ("job.out_dir", out_dir), ("training.steps", steps), ("data.cache_dir", cache),
            ("checkpoint.enable", True), ("checkpoint.interval", steps), ("checkpoint.async_mode", "disabled"),
            ("checkpoint.keep_latest_k", 1), ("checkpoint.resume", False), ("checkpoint.overwrite", True),
            ("checkpoint.folder", os.path.join(out_dir, "ckpt"))]


def ensure_vl_data(combos: Sequence[Combination], base: str = ".") -> List[str]:
    """Write the generated image-caption set and processor folder (``examples/vl/make_vl_data.py``: 96 images,
    seed 0) where a vision-language combination of ``combos`` reads them and they do not exist yet (relative
    paths against ``base``); returns the folders written. A run from a fresh clone needs no ``make vl-demo``."""
    written = []
    for combo in combos:
        over = dict(combo.overrides)
        processor, paths = str(over.get("data.processor", "")), list(over.get("data.paths") or [])
        if not processor.startswith("hf:") or len(paths) != 1:
            continue
        captions = os.path.join(base, paths[0])
        folder = os.path.dirname(os.path.dirname(captions))
        if os.path.exists(captions) or os.path.abspath(os.path.join(base, processor[3:])) != os.path.abspath(
                os.path.join(folder, "processor")):
            continue
        from hyper_parallel.trainer.vl_data import draw_caption_set  # pylint: disable=import-outside-toplevel
        from hyper_parallel.trainer.vl_sft import make_vl_processor, vl_texts  # pylint: disable=C0415
        written_captions = draw_caption_set(os.path.join(folder, "set"), n=96, seed=0)
        make_vl_processor(os.path.join(folder, "processor"), vl_texts(written_captions))
        written.append(folder)
    return written


def _train(overrides: Sequence[Tuple[str, Any]], nproc: int, out_dir: str, steps: int, cache: str, cwd: str,
           timeout: float) -> Dict[str, Any]:
    """One ``hp-train`` run of ``steps`` steps writing its metrics and a final checkpoint under ``out_dir``."""
    run = _run_overrides(nproc, out_dir, steps, cache)
    shutil.rmtree(out_dir, ignore_errors=True)  # metrics.jsonl appends: start clean
    rc, out, seconds = _run(_hp_train() + cli_args(list(overrides) + run), timeout, cwd)
    result: Dict[str, Any] = {"rc": rc, "seconds": round(seconds, 1), "losses": _read_losses(out_dir)}
    if rc != 0:
        result["error"] = _one_line(out)
        return result
    try:
        result["params"] = _read_params(os.path.join(out_dir, "ckpt"), steps)
    except Exception as exc:  # pylint: disable=broad-except  # reported, not raised: the matrix goes on
        result["rc"], result["error"] = 1, f"reading the final checkpoint: {exc}"
    return result


def micro_batch_count(table: Mapping[str, Any], combo: Combination) -> int:
    """How many micro-batches a step of ``combo`` has: ``grad_accum`` x ``pp_microbatches`` under a pipeline."""
    dims = all_dims(table, combo)
    return int(dims.get("grad_accum", 1)) * (int(dims.get("pp_microbatches", 1)) if dims.get("pp", 1) > 1 else 1)


def reference_micro_batches(table: Mapping[str, Any], combo: Combination) -> int:
    """``grad_accum`` of ``combo``'s one-process reference: its micro-batch count (:func:`micro_batch_count`) for
    a model of the table's ``per_micro_batch`` list (its MoE auxiliary loss is taken per micro-batch, like the
    main loss under gradient accumulation, and the trainer hands every layout the same global micro-batches),
    else 1 (the model's training does not depend on how a step is cut: checked against one whole batch)."""
    return micro_batch_count(table, combo) if combo.model in table.get("per_micro_batch", ()) else 1


def reference_overrides(table: Mapping[str, Any], combo: Combination) -> List[Tuple[str, Any]]:
    """The one-process run ``combo`` is compared with: the same model, base and precision, ``grad_accum`` of
    :func:`reference_micro_batches`; every other dimension at its default (no parallelism, activation policy or
    compile)."""
    keep = {"mixed_precision"}
    chosen = {n: v for n, v in combo.dims if n in keep}
    micro = reference_micro_batches(table, combo)
    if micro > 1:
        chosen["grad_accum"] = micro
    return list(_combination(table, combo.model, chosen, {}).overrides)


def reference_label(table: Mapping[str, Any], combo: Combination) -> str:
    """How the one-process reference of ``combo`` runs, in words (recorded with each result)."""
    micro = reference_micro_batches(table, combo)
    return "one process" + (f", grad_accum={micro}" if micro > 1 else "")


def compare(run: Mapping[str, Any], ref: Mapping[str, Any], tol: float) -> Dict[str, Any]:
    """Relative errors of the losses (per step) and the final parameters (per tensor: max |a-b| / max |b|).

    The vision towers' split attention projections (``blocks.<i>.attn.q_proj`` / ``k_proj`` / ``v_proj``) are
    measured as the one Hugging Face checkpoint tensor they form, the fused ``attn.qkv``
    (:func:`~hyper_parallel.models.qwen3_vl.state_dict_adapter.vision_qkv_to_hf`; every element still compared):
    a key bias barely leaves its zero start (softmax is shift-invariant, only the rotary positions give its
    gradient a part, ~1e-7 after three steps), so on its own its ``max |b|`` turns last-bit noise into a 1e-4
    "error" that the fused tensor, as every run before the split measured it, puts on the scale of the whole
    projection."""
    import torch  # pylint: disable=import-outside-toplevel
    from hyper_parallel.models.qwen3_vl.state_dict_adapter import vision_qkv_to_hf  # pylint: disable=C0415
    losses, ref_losses = run["losses"], ref["losses"]
    if len(losses) != len(ref_losses) or not losses:
        return {"status": "fail", "reason": f"{len(losses)} losses vs {len(ref_losses)} of one process"}
    loss_err = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(losses, ref_losses))
    params, ref_params = run["params"], ref["params"]
    if set(params) != set(ref_params):
        diff = sorted(set(params) ^ set(ref_params))[:3]
        return {"status": "fail", "loss_rel_err": loss_err, "reason": f"parameter names differ: {diff}"}
    params, ref_params = vision_qkv_to_hf(params), vision_qkv_to_hf(ref_params)
    worst, worst_name = 0.0, ""
    for name, b in ref_params.items():
        a = params[name].to(torch.float64)
        b = b.to(torch.float64)
        err = float((a - b).abs().max() / b.abs().max().clamp(min=1e-12)) if b.numel() else 0.0
        if err > worst:
            worst, worst_name = err, name
    ok = loss_err <= tol and worst <= tol
    return {"status": "pass" if ok else "fail", "loss_rel_err": loss_err, "param_rel_err": worst,
            "worst_param": worst_name, "losses": losses, "ref_losses": ref_losses}


#: a bf16 layout whose parameters differ from one bf16 process by more than the bf16 tolerance still passes when it
#: is no further from the fp32 result than this factor times one bf16 process is (the layout adds no error of its
#: own: bf16 rounding alone moves a near-zero bias by its whole size, see docs/parallelism.md)
BF16_NOISE_FACTOR = 1.5


def fp32_reference_overrides(table: Mapping[str, Any], combo: Combination) -> List[Tuple[str, Any]]:
    """:func:`reference_overrides` of ``combo`` in fp32 (the exact result a bf16 layout is measured against)."""
    key = table["dimensions"]["mixed_precision"]["key"]
    return [(k, "fp32" if k == key else v) for k, v in reference_overrides(table, combo)]


def bf16_noise_verdict(run: Mapping[str, Any], ref: Mapping[str, Any], ref32: Mapping[str, Any],
                       verdict: Mapping[str, Any], tol: float) -> Dict[str, Any]:
    """A failing bf16 ``verdict`` (``run`` vs the one-process bf16 ``ref``) judged against the one-process fp32
    ``ref32``: pass when every loss is within ``tol`` of ``ref`` and ``run``'s worst parameter error vs fp32 is at most
    :data:`BF16_NOISE_FACTOR` times ``ref``'s own (both recorded); otherwise ``verdict`` unchanged."""
    if verdict.get("status") != "fail" or "loss_rel_err" not in verdict or verdict["loss_rel_err"] > tol:
        return dict(verdict)
    run_err = compare(run, ref32, tol).get("param_rel_err")
    one_err = compare(ref, ref32, tol).get("param_rel_err")
    if run_err is None or one_err is None:
        return dict(verdict)
    out = dict(verdict, bf16_vs_fp32=run_err, one_process_bf16_vs_fp32=one_err)
    if run_err <= BF16_NOISE_FACTOR * one_err:
        out.update(status="pass", note_verdict=f"bf16 noise: {run_err:.1e} from fp32 vs one bf16 process's "
                                               f"{one_err:.1e}")
    return out


def check_refusal(combo: Combination, cwd: str, timeout: float = 120) -> Dict[str, Any]:
    """``hp-train --check`` on an illegal combination: it must exit 2 with one line naming both settings."""
    rc, out, seconds = _run(_hp_train() + ["--check"] + cli_args(list(combo.overrides) + [("job.nproc", combo.nproc)]),
                            timeout, cwd)
    lines = [ln for ln in out.splitlines() if ln.strip()]
    ok = rc == 2 and len(lines) == 1 and lines[0].startswith("hp-train: error:")
    return {"status": "refused" if ok else "fail", "check_rc": rc, "check_output": "\n".join(lines[:5])[:600],
            "seconds": round(seconds, 1)}


@dataclass
class MatrixRunner:
    """Runs combinations of ``table`` under ``workdir`` (one cached one-process reference per model and
    precision); :meth:`legal` runs and compares one combination."""

    table: Mapping[str, Any]
    workdir: str
    timeout: float
    cwd: str
    refs: Dict[Tuple, Any] = field(default_factory=dict)
    lock: Any = field(default_factory=threading.Lock)

    def reference(self, combo: Combination) -> Dict[str, Any]:
        """The cached one-process run for ``combo``'s model and precision."""
        over = reference_overrides(self.table, combo)
        key = tuple((k, json.dumps(v)) for k, v in over)
        with self.lock:  # one reference run per key, even with several jobs
            return self._reference(key, over)

    def _reference(self, key: Tuple, over: List[Tuple[str, Any]]) -> Dict[str, Any]:
        if key not in self.refs:
            slug = hashlib.sha256(repr(key).encode()).hexdigest()[:10]
            self.refs[key] = _train(over, 1, os.path.join(self.workdir, f"ref-{slug}"), self.table["steps"],
                                    os.path.join(self.workdir, "data"), self.cwd, self.timeout)
            self.refs[key]["slug"] = slug
        return self.refs[key]

    def legal(self, combo: Combination) -> Dict[str, Any]:
        """Run ``combo`` and compare it with its reference."""
        ref = self.reference(combo)
        slug = hashlib.sha256(combo.cid.encode()).hexdigest()[:10]
        run = _train(combo.overrides, combo.nproc, os.path.join(self.workdir, slug), self.table["steps"],
                     os.path.join(self.workdir, "data"), self.cwd, self.timeout)
        out: Dict[str, Any] = {"seconds": run["seconds"], "reference": ref.get("slug")}
        if ref["rc"] != 0:
            return dict(out, status="error", reason=f"one-process reference failed: {ref.get('error')}")
        if run["rc"] != 0:
            return dict(out, status="error", reason=run.get("error", ""), losses=run["losses"])
        tol = self.table["tolerance"][combo.dim_map.get("mixed_precision", "fp32")]
        verdict = compare(run, ref, tol)
        if verdict["status"] == "fail" and combo.dim_map.get("mixed_precision") == "bf16":
            over32 = fp32_reference_overrides(self.table, combo)
            with self.lock:
                ref32 = self._reference(tuple((k, json.dumps(v)) for k, v in over32), over32)
            if ref32["rc"] == 0:
                verdict = bf16_noise_verdict(run, ref, ref32, verdict, tol)
        return dict(out, **verdict, tolerance=tol)


def full_parameters(model: Any, distributed: bool) -> Dict[str, Any]:
    """Every parameter of ``model`` (a module, or this rank's pipeline stage modules) as a full CPU tensor, by
    name (tied copies under both names), merged over the ranks on rank 0 (collective when ``distributed``)."""
    import torch.distributed as dist  # pylint: disable=import-outside-toplevel
    local: Dict[str, Any] = {}
    for part in model if isinstance(model, list) else [model]:
        for name, p in part.named_parameters(remove_duplicate=False):
            full = p.full_tensor() if hasattr(p, "full_tensor") else p
            local[name] = full.detach().to("cpu").clone()
    if not distributed:
        return local
    every: List[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(every, local)
    merged: Dict[str, Any] = {}
    for part in every:
        for name, tensor in part.items():
            merged.setdefault(name, tensor)
    return merged


def train_in_process(overrides: Sequence[Tuple[str, Any]], nproc: int, out_dir: str, steps: int,
                     cache: str) -> Dict[str, Any]:
    """The run of :func:`_train` inside this process (``LLMTrainer``, or ``VLTrainer`` for a vision-language
    model; no launch, no checkpoint): ``nproc == 1``
    trains on this process alone (no collective), else every rank of the already initialised process group (of
    ``nproc`` ranks) calls it. Returns the per-step losses and the final full parameters (every rank)."""
    from hyper_parallel.trainer.config import load_config  # pylint: disable=import-outside-toplevel
    from hyper_parallel.trainer.vl import trainer_class  # pylint: disable=import-outside-toplevel
    distributed = nproc > 1
    run = [(k, v) for k, v in _run_overrides(nproc, out_dir, steps, cache) if not k.startswith("checkpoint.")]
    run += [("checkpoint.enable", False), ("metrics.jsonl", False)]
    start = time.perf_counter()
    cfg = load_config(None, list(overrides) + run)
    trainer = trainer_class(cfg)(cfg, distributed=distributed)  # VLTrainer for a vision-language model
    try:
        history = trainer.train()
        params = full_parameters(trainer.backend.model, distributed)
    finally:
        trainer.close()
    return {"rc": 0, "seconds": round(time.perf_counter() - start, 1),
            "losses": [float(m["loss"]) for m in history], "params": params}


def run_in_process(table: Mapping[str, Any], combos: Sequence[Combination], workdir: str, cache: str,
                   log: Any = print) -> List[Dict[str, Any]]:
    """Run each of ``combos`` (legal, all of one world size: this process group's, or 1) in this process group
    (:func:`train_in_process`) and compare it with one process (run on rank 0, once per model and precision).
    Every rank must call it with the same ``combos``; rank 0 returns one record per combination (``id``,
    ``status``, the errors), the other ranks an empty list. The CI subset of the matrix runs this way: no launch
    per combination."""
    import torch.distributed as dist  # pylint: disable=import-outside-toplevel
    rank0 = not dist.is_initialized() or dist.get_rank() == 0
    if rank0:
        ensure_vl_data(combos)
    if dist.is_initialized():
        dist.barrier()
    refs: Dict[str, Dict[str, Any]] = {}
    out: List[Dict[str, Any]] = []
    for combo in combos:
        slug = hashlib.sha256(combo.cid.encode()).hexdigest()[:10]
        if not rank0:
            if combo.nproc > 1:
                train_in_process(combo.overrides, combo.nproc, os.path.join(workdir, slug), table["steps"], cache)
            continue
        run = train_in_process(combo.overrides, combo.nproc, os.path.join(workdir, slug), table["steps"], cache)
        over = reference_overrides(table, combo)
        key = json.dumps(over, sort_keys=True, default=str)
        if key not in refs:
            refs[key] = train_in_process(over, 1, os.path.join(workdir, f"ref-{len(refs)}"), table["steps"], cache)
        tol = table["tolerance"][combo.dim_map.get("mixed_precision", "fp32")]
        rec = dict(compare(run, refs[key], tol), id=combo.cid, seconds=run["seconds"], nproc=combo.nproc)
        log(f"{rec['status']:>8} {rec['seconds']:6.1f}s  [{combo.nproc}] {combo.cid}  loss "
            f"{rec.get('loss_rel_err', float('nan')):.1e} param {rec.get('param_rel_err', float('nan')):.1e}")
        out.append(rec)
    return out


def _pool_case(overrides: Sequence[Tuple[str, Any]], nproc: int, out_dir: str, steps: int,
               cache: str) -> Dict[str, Any]:
    """One combination on every rank of a worker pool (:func:`run_matrix_in_process`); rank 0's result only."""
    import torch.distributed as dist  # pylint: disable=import-outside-toplevel
    run = train_in_process(overrides, nproc, out_dir, steps, cache)
    return run if dist.get_rank() == 0 else {}


def run_matrix_in_process(combos: Sequence[Combination], table: Mapping[str, Any], *, workdir: str,
                          timeout: float = 300, log: Any = print, partial: Optional[str] = None) -> Dict[str, Any]:
    """:func:`run_matrix` without a launch per combination: each legal combination trains in a pool of reused gloo
    worker processes of its world size (``hyper_parallel.testing.get_pool``; ``LLMTrainer``, the code ``hp-train``
    runs on each rank; final parameters gathered in memory, no checkpoint), the one-process references in this
    process; illegal ones go through ``hp-train --check`` as in :func:`run_matrix`. A failing combination is
    recorded (the pool restarts) and the matrix goes on. The document says ``"runner": "in-process"``."""
    from hyper_parallel.testing.multiprocess import MultiRankError, get_pool  # noqa  # pylint: disable=C0415
    started = time.time()
    refs: Dict[str, Dict[str, Any]] = {}
    records: List[Dict[str, Any]] = []
    cache = os.path.join(workdir, "data")
    ensure_vl_data(combos)
    for combo in sorted(combos, key=lambda c: c.nproc):
        legal, reason = judge(combo)
        rec = _record(table, combo, legal, reason)
        rec["runner"] = IN_PROCESS if legal else CHECK
        slug = hashlib.sha256(combo.cid.encode()).hexdigest()[:10]
        try:
            if not legal:
                rec.update(check_refusal(combo, ROOT))
            else:
                over = reference_overrides(table, combo)
                key = json.dumps(over, sort_keys=True, default=str)
                if key not in refs:
                    refs[key] = train_in_process(over, 1, os.path.join(workdir, f"ref-{len(refs)}"), table["steps"],
                                                 cache)
                args = (combo.overrides, combo.nproc, os.path.join(workdir, slug), table["steps"], cache)
                run = (train_in_process(*args) if combo.nproc == 1
                       else get_pool(combo.nproc).run(_pool_case, args, timeout=timeout, case=combo.cid)[0])
                tol = table["tolerance"][combo.dim_map.get("mixed_precision", "fp32")]
                verdict = compare(run, refs[key], tol)
                if verdict["status"] == "fail" and combo.dim_map.get("mixed_precision") == "bf16":
                    over32 = fp32_reference_overrides(table, combo)
                    key32 = json.dumps(over32, sort_keys=True, default=str)
                    if key32 not in refs:
                        refs[key32] = train_in_process(over32, 1, os.path.join(workdir, f"ref-{len(refs)}"),
                                                       table["steps"], cache)
                    verdict = bf16_noise_verdict(run, refs[key], refs[key32], verdict, tol)
                rec.update(verdict, seconds=run["seconds"], tolerance=tol)
        except MultiRankError as exc:
            rec.update(status="error", reason=str(exc).strip().splitlines()[-1][:400])
        except Exception as exc:  # pylint: disable=broad-except  # one broken combination must not stop the matrix
            rec.update(status="error", reason=f"runner: {type(exc).__name__}: {exc}"[:400])
        rec.pop("losses", None)
        rec.pop("ref_losses", None)
        log(f"{rec['status']:>8} {rec.get('seconds', 0):6.1f}s  [{combo.nproc}] {combo.cid}"
            + (f"  loss {rec['loss_rel_err']:.1e} param {rec.get('param_rel_err', 0.0):.1e}" if "loss_rel_err" in rec
               else f"  {rec.get('reason', '')}" if rec["status"] != "refused" else ""))
        records.append(rec)
        doc = {"generated": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "table_digest": table_digest(), "steps": table["steps"], "tolerance": table["tolerance"],
               "runner": "in-process", "wall_s": round(time.time() - started, 1), "load_avg": os.getloadavg(),
               "combinations": records}
        if partial:
            _write_json(partial, doc)
    order = {c.cid: i for i, c in enumerate(combos)}
    records.sort(key=lambda r: order[r["id"]])
    return doc


def _record(table: Mapping[str, Any], combo: Combination, legal: bool, reason: str) -> Dict[str, Any]:
    return {"id": combo.cid, "model": combo.model, "dims": combo.dim_map, "all_dims": all_dims(table, combo),
            "nproc": combo.nproc, "scaled_from": combo.scaled_from, "note": combo.note, "legal": legal,
            "refusal": reason, "reference_run": reference_label(table, combo)}


def _run_one(runner: MatrixRunner, combo: Combination, log: Any) -> Dict[str, Any]:
    legal, reason = judge(combo)
    rec = _record(runner.table, combo, legal, reason)
    rec["runner"] = HP_TRAIN if legal else CHECK
    try:
        rec.update(runner.legal(combo) if legal else check_refusal(combo, runner.cwd))
    except Exception as exc:  # pylint: disable=broad-except  # one broken combination must not stop the matrix
        rec.update(status="error", reason=f"runner: {type(exc).__name__}: {exc}")
    err = "" if rec["status"] in ("pass", "refused") else f"  {rec.get('reason', '')}"
    if "loss_rel_err" in rec:
        err = f"  loss {rec['loss_rel_err']:.1e} param {rec.get('param_rel_err', float('nan')):.1e}" + err
    log(f"{rec['status']:>8} {rec.get('seconds', 0):6.1f}s  [{combo.nproc}] {combo.cid}{err}")
    return rec


def run_matrix(combos: Sequence[Combination], table: Mapping[str, Any], *, workdir: str, timeout: float = 300,
               jobs: int = 1, log: Any = print, partial: Optional[str] = None) -> Dict[str, Any]:
    """Run (legal) or check the refusal of (illegal) every combination; returns the results document (also
    written to ``partial`` after each combination, so an interrupted matrix keeps what it ran)."""
    runner = MatrixRunner(table, workdir, timeout, ROOT)
    ensure_vl_data(combos, ROOT)
    started = time.time()
    legal_first = sorted(combos, key=lambda c: c.nproc)
    if legal_first:  # the data cache (tokenizer, tokens) is written once, by the first reference
        runner.reference(legal_first[0])
    records: List[Dict[str, Any]] = []

    def document() -> Dict[str, Any]:
        return {"generated": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "table_digest": table_digest(), "steps": table["steps"], "tolerance": table["tolerance"],
                "runner": HP_TRAIN, "wall_s": round(time.time() - started, 1), "load_avg": os.getloadavg(),
                "combinations": records}

    def one(combo: Combination) -> None:
        rec = _run_one(runner, combo, log)
        with runner.lock:
            records.append(rec)
            if partial:
                _write_json(partial, document())

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        list(pool.map(one, combos))
    order = {c.cid: i for i, c in enumerate(combos)}
    records.sort(key=lambda r: order[r["id"]])
    return document()


def _write_json(path: str, doc: Mapping[str, Any]) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1, sort_keys=True)
        fh.write("\n")
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------------- pairwise
def pairs_of(dims: Mapping[str, Any]) -> Set[Tuple[Tuple[str, str], Tuple[str, str]]]:
    """Every unordered pair of ``(dimension, value)`` of one combination."""
    items = sorted((n, json.dumps(v)) for n, v in dims.items())
    return set(itertools.combinations(items, 2))


def pairwise_cover(records: Sequence[Mapping[str, Any]], budget_s: Optional[float] = None,
                   ref_cost_s: float = 0.0) -> Dict[str, Any]:
    """Greedy pairwise cover over the passing combinations of ``records`` (results): pick the combination that
    covers the most uncovered pairs per second of run time (its ``seconds``, plus ``ref_cost_s`` when it needs a
    one-process reference not yet run: a new ``reference``) until every pair the passing combinations hold is
    covered, or until ``budget_s`` is spent. Returns the ids, their cost and the coverage reached."""
    passing = [r for r in records if r.get("status") == "pass"]
    target: Set[Any] = set()
    for r in passing:
        target |= pairs_of(r["all_dims"])
    covered: Set[Any] = set()
    refs: Set[Any] = set()
    chosen: List[str] = []
    cost = 0.0
    pool = list(passing)

    def price(r: Mapping[str, Any]) -> float:
        return float(r.get("seconds", 1.0)) + (ref_cost_s if r.get("reference") not in refs else 0.0)

    while pool and covered != target:
        best = max(pool, key=lambda r: len(pairs_of(r["all_dims"]) - covered) / max(1.0, price(r)))
        gain = pairs_of(best["all_dims"]) - covered
        if not gain:
            break
        pool.remove(best)
        if budget_s is not None and cost + price(best) > budget_s:
            continue
        chosen.append(best["id"])
        covered |= gain
        cost += price(best)
        refs.add(best.get("reference"))
    all_pairs: Set[Any] = set()
    for r in records:
        if r.get("legal"):
            all_pairs |= pairs_of(r["all_dims"])
    return {"ids": chosen, "cost_s": round(cost, 1), "pairs_covered": len(covered), "pairs_passing": len(target),
            "pairs_legal": len(all_pairs)}


# ---------------------------------------------------------------------------------------------- the doc
_MARK = {"pass": "✓", "fail": "✗", "error": "✗", "refused": "refused"}
_IN_PROCESS = ("in reused gloo worker processes (`run --in-process`: `LLMTrainer`, or `VLTrainer` for a "
               "vision-language model, the trainer `hp-train` runs on each rank, without a torchrun launch per "
               "layout; final parameters gathered in memory)")


def _short_reason(text: str) -> str:
    """A refusal without the config source prefix (``<defaults> + command line: ``), table-safe."""
    for prefix in ("<defaults> + command line: ", "<defaults>: "):
        if text.startswith(prefix):
            text = text[len(prefix):]
    return text.replace("|", "/")


def row_runner(rec: Mapping[str, Any], results: Optional[Mapping[str, Any]] = None) -> str:
    """What verified result row ``rec``: ``"hp-train"`` (a launch through ``hp-train``: the row's own run, or one
    merged in by ``merge``), ``"in-process"`` (the reused worker pools), or ``"hp-train --check"`` (a refusal);
    a row without ``runner`` takes its document's (older results: hp-train unless the document says otherwise)."""
    if rec.get("status") == "refused":
        return CHECK
    runner = str(rec.get("runner") or (results or {}).get("runner") or HP_TRAIN)
    return HP_TRAIN if runner.startswith(HP_TRAIN) else runner


def _cell(rec: Optional[Mapping[str, Any]], results: Optional[Mapping[str, Any]] = None) -> str:
    if rec is None:
        return "not run"
    status = rec.get("status", "not run")
    if status == "pass":
        return "✓ hp" if row_runner(rec, results) == HP_TRAIN else "✓"
    if status == "refused":
        return "refused"
    if status == "fail" and "loss_rel_err" in rec:
        return f"✗ {max(rec['loss_rel_err'], rec.get('param_rel_err', 0.0)):.1e}"
    return "✗ error"


def _layout(combo: Combination) -> str:
    text = " ".join(f"{n}={json.dumps(v) if isinstance(v, list) else _text(v)}" for n, v in combo.dims)
    text = text or "one rank (defaults)"
    return text + (" (8-rank shape, halved)" if combo.scaled_from else "")


def render_doc(table: Mapping[str, Any], results: Optional[Mapping[str, Any]]) -> str:
    """``docs/parallelism.md``: the support matrix (layouts x models) from the table and the results, the
    refusals and the failures with their error magnitudes."""
    combos = expand(table)
    recs = {r["id"]: r for r in (results or {}).get("combinations", [])}
    models = list(table["models"])
    layouts: Dict[str, Dict[str, Any]] = {}
    for c in combos:
        layouts.setdefault(_layout(c), {"nproc": c.nproc, "scaled": c.scaled_from, "cells": {}})["cells"][c.model] = c
    lines = _doc_header(table, results, combos, recs)
    lines += ["| layout | ranks | " + " | ".join(models) + " |", "|---|---|" + "---|" * len(models)]
    for layout, row in layouts.items():
        ranks = f"{row['nproc']}" + (" (8→4)" if row["scaled"] else "")
        cells = [(_cell(recs.get(row["cells"][m].cid), results) if m in row["cells"] else "") for m in models]
        lines.append(f"| {layout} | {ranks} | " + " | ".join(cells) + " |")
    lines += _doc_refusals(combos, recs) + _doc_failures(combos, recs) + _doc_bf16_noise(combos, recs)
    lines += _doc_scaled(combos)
    lines += _doc_benchmark((results or {}).get("benchmark"))
    return "\n".join(lines) + "\n"


def _doc_benchmark(bench: Optional[Mapping[str, Any]]) -> List[str]:
    """The step-time ratios of ``benchmarks/composition.py`` (the results' ``benchmark`` entry: ``when``,
    ``load``, ``setup`` and ``rows`` of ``[layout, ours, torch, ours / torch]`` as it printed them)."""
    if not bench:
        return []
    lines = ["", "## Step time against torch's own APIs", "",
             f"`{bench['command']}` ({bench['when']}, load average {bench['load']}; {bench['setup']}): our "
             "`LLMTrainer` step against the same model, batches and clipping on torch's FSDP2 / TP / pipelining / "
             "CP APIs, interleaved rounds, median step time; below 1.0 we are faster.", "",
             "| layout | ours | torch | ours / torch |", "|---|---|---|---|"]
    return lines + ["| " + " | ".join(str(c).replace("|", "/") for c in row) + " |" for row in bench["rows"]]


def _doc_header(table: Mapping[str, Any], results: Optional[Mapping[str, Any]], combos: Sequence[Combination],
                recs: Mapping[str, Any]) -> List[str]:
    counts: Dict[str, int] = {}
    for c in combos:
        status = recs.get(c.cid, {}).get("status", "not run")
        counts[status] = counts.get(status, 0) + 1
    tol = table["tolerance"]
    when = (results or {}).get("generated", "never")
    summary = ", ".join(f"{counts[k]} {k}" for k in sorted(counts))
    runners: Dict[str, int] = {}
    for c in combos:
        if c.cid in recs and recs[c.cid].get("status") != "refused":
            runners[row_runner(recs[c.cid], results)] = runners.get(row_runner(recs[c.cid], results), 0) + 1
    merged = (results or {}).get("hp_train_merged")
    by_runner = (f"Rows run: {runners.get(HP_TRAIN, 0)} through `hp-train` (`✓ hp`: one `hp-train` launch per "
                 "layout -- torchrun; MindSpore: its cluster --, final parameters read back from its checkpoint), "
                 f"{runners.get(IN_PROCESS, 0)} in-process only (`✓`)"
                 + (f"; hp-train results merged {merged['when']} (load {merged['load']})" if merged else "")
                 + ". A row run both ways shows the `hp-train` verdict; the two must agree (`merge` reports any "
                 "row where they do not).")
    return ["# Parallelism support matrix", "",
            "<!-- generated by `python -m hyper_parallel.devtools.composition doc` from "
            "hyper_parallel/trainer/composition.yaml and docs/parallelism_results.json; do not edit -->", "",
            f"Every layout of `hyper_parallel/trainer/composition.yaml` trained {table['steps']} steps "
            + (_IN_PROCESS if (results or {}).get("runner") == "in-process" else
               "through `hp-train` (torchrun, gloo, CPU)")
            + " against one process of the same model and data (" + _reference_words(table) + "): ✓ = every step's "
            f"loss and every final parameter within {tol['fp32']:g} relative (fp32; bf16: {tol['bf16']:g}), ✗ = "
            "not (the worst relative error shown; `✗ error` = the run failed, see below), refused = "
            "`hp-train --check` refuses it before launch (reason below). Empty: not in the table. A model whose "
            "table entry sets `job.backend` (the `*_mindspore` columns) runs on that backend (MindSpore: the cluster "
            "`hp-train` starts, mccl on CPU) against one process of the same backend.", "",
            f"{len(combos)} combinations: {summary} (results of {when}). Rerun: `make matrix` (whole table) then "
            "`python -m hyper_parallel.devtools.composition doc`.", "", by_runner, ""]


def _reference_words(table: Mapping[str, Any]) -> str:
    models = ", ".join(f"`{m}`" for m in table.get("per_micro_batch", ()))
    if not models:
        return "the whole batch in one pass"
    return (f"for {models}, whose MoE auxiliary loss is taken per micro-batch, one process accumulating gradients over "
            "the same micro-batches, `grad_accum` = the layout's `grad_accum` x `pp_microbatches` under PP, see "
            "docs/moe.md; for every other model the whole batch in one pass")


def _doc_refusals(combos: Sequence[Combination], recs: Mapping[str, Any]) -> List[str]:
    from hyper_parallel.trainer.validate import REFUSALS  # pylint: disable=import-outside-toplevel
    lines = ["", "## Refused combinations", "",
             "The one validation (`hyper_parallel.trainer.validate`, run by `hp-train --check` and before every "
             "launch) refuses these; each rule is one entry of `REFUSALS`:", "",
             "| settings | why |", "|---|---|"]
    lines += [f"| `{r.first}` x `{r.second}` | {r.why} |" for r in REFUSALS]
    refused = [(c, recs[c.cid]) for c in combos if recs.get(c.cid, {}).get("status") == "refused"]
    if refused:
        lines += ["", "Refused layouts of the table:", ""]
        lines += [f"- `{c.cid}`: {_short_reason(r['refusal'])}" for c, r in refused]
    return lines


def _doc_failures(combos: Sequence[Combination], recs: Mapping[str, Any]) -> List[str]:
    bad = [(c, recs[c.cid]) for c in combos if recs.get(c.cid, {}).get("status") in ("fail", "error")]
    lines = ["", "## Known failures", ""]
    if not bad:
        return lines + ["None."]
    lines += ["| combination | ranks | loss rel. error | param rel. error | what |", "|---|---|---|---|---|"]
    for c, r in bad:
        loss = f"{r['loss_rel_err']:.1e}" if "loss_rel_err" in r else ""
        par = f"{r['param_rel_err']:.1e}" if "param_rel_err" in r else ""
        worst = r.get("worst_param", "")
        what = r.get("reason") or (f"worst: `{worst}`" if worst else "") or r.get("check_output", "")
        lines.append(f"| `{c.cid}` | {c.nproc} | {loss} | {par} | {str(what).replace('|', '/')[:300]} |")
    return lines


def _doc_bf16_noise(combos: Sequence[Combination], recs: Mapping[str, Any]) -> List[str]:
    """The bf16 rows that pass by :func:`bf16_noise_verdict` (outside the bf16 tolerance of one bf16 process, but no
    further from fp32 than it)."""
    noisy = [(c, recs[c.cid]) for c in combos if recs.get(c.cid, {}).get("note_verdict")]
    if not noisy:
        return []
    lines = ["", "## bf16 rows judged against fp32", "",
             f"These bf16 layouts differ from one bf16 process by more than the bf16 tolerance, but are no further "
             f"from one fp32 process than {BF16_NOISE_FACTOR:g} x one bf16 process is: the layout adds no error of "
             "its own (bf16 rounding flips the updates of near-zero parameters, e.g. fresh LayerNorm biases; "
             "`benchmarks/vl_bf16.py`).", "",
             "| combination | ranks | vs one bf16 process | vs fp32 | one bf16 process vs fp32 |",
             "|---|---|---|---|---|"]
    lines += [f"| `{c.cid}` | {c.nproc} | {r['param_rel_err']:.1e} | {r['bf16_vs_fp32']:.1e} | "
              f"{r['one_process_bf16_vs_fp32']:.1e} |" for c, r in noisy]
    return lines


def _doc_scaled(combos: Sequence[Combination]) -> List[str]:
    scaled = [c for c in combos if c.scaled_from]
    if not scaled:
        return []
    return ["", "## 8-rank shapes run at 4 ranks", ""] + [f"- `{c.cid}`: {c.scaled_from}" for c in scaled]


# ---------------------------------------------------------------------------------------------- CLI
def _select(combos: Sequence[Combination], patterns: Sequence[str]) -> List[Combination]:
    if not patterns:
        return list(combos)
    return [c for c in combos if any(fnmatch.fnmatchcase(c.cid, p) for p in patterns)]


def _load_results(path: str) -> Optional[Dict[str, Any]]:
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def _merge(old: Optional[Mapping[str, Any]], new: Dict[str, Any]) -> Dict[str, Any]:
    """``new`` results with the records of ``old`` for the combinations ``new`` did not run (a partial rerun)."""
    if not old:
        return new
    if "benchmark" in old and "benchmark" not in new:  # a matrix run does not measure it: keep the last table
        new["benchmark"] = old["benchmark"]
    ran = {r["id"] for r in new["combinations"]}
    new["combinations"] = [r for r in old.get("combinations", []) if r["id"] not in ran] + new["combinations"]
    return new


_VERDICT = ("status", "loss_rel_err", "param_rel_err", "worst_param", "reason", "seconds", "tolerance", "refusal",
            "check_rc", "check_output", "bf16_vs_fp32", "one_process_bf16_vs_fp32", "note_verdict")


def merge_runs(results: Dict[str, Any], run: Mapping[str, Any]) -> Dict[str, Any]:
    """Merge the records of ``run`` (an ``hp-train`` run of some combinations: ``run`` without ``--in-process``)
    into ``results`` in place. A row both hold gets the hp-train verdict (``status``, errors, ``runner:
    "hp-train"``, the run's fields under ``hp_train``; its in-process ``seconds`` stay, so the CI subset that
    :func:`pairwise_cover` picks from them does not change); a row only ``run`` holds is added. Returns the
    report: how many ran, by status, and the ``discrepancies`` (rows whose status differs between the runners:
    a bug)."""
    by_id = {r["id"]: r for r in results["combinations"]}
    report: Dict[str, Any] = {"ran": 0, "discrepancies": []}
    for new in run["combinations"]:
        report["ran"] += 1
        report[new["status"]] = report.get(new["status"], 0) + 1
        verdict = {k: new[k] for k in _VERDICT if k in new}
        old = by_id.get(new["id"])
        if old is None:
            results["combinations"].append(dict(new, runner=new.get("runner", HP_TRAIN), hp_train=verdict))
            continue
        if old.get("status") != new["status"]:
            report["discrepancies"].append(f"{new['id']}: in-process {old.get('status')} vs hp-train {new['status']}"
                                           f" ({new.get('reason') or new.get('loss_rel_err', '')})")
            old["in_process_status"] = old.get("status")
        for key in ("loss_rel_err", "param_rel_err", "worst_param", "reason", "bf16_vs_fp32",
                    "one_process_bf16_vs_fp32", "note_verdict"):
            old.pop(key, None)
        old.update({k: v for k, v in verdict.items() if k != "seconds"}, hp_train=verdict,
                   runner=CHECK if new["status"] == "refused" else HP_TRAIN)
    results["hp_train_merged"] = {"when": run.get("generated", ""), "wall_s": run.get("wall_s"),
                                  "load": " ".join(f"{x:.0f}" for x in run.get("load_avg", []))}
    return report


def _cmd_merge(args: argparse.Namespace) -> int:
    results, run = _load_results(args.results), _load_results(args.run)
    if results is None or run is None:
        print(f"composition merge: no results at {args.results if results is None else args.run}", file=sys.stderr)
        return 2
    report = merge_runs(results, run)
    _write_json(args.results, results)
    print(json.dumps(report, indent=1))
    return 1 if report["discrepancies"] else 0


def _cmd_list(args: argparse.Namespace) -> int:
    table = load_table(args.table)
    combos = _select(expand(table), args.k)
    legal = 0
    for c in combos:
        ok, reason = judge(c)
        legal += ok
        print(f"{'legal  ' if ok else 'ILLEGAL'} [{c.nproc}] {c.cid}" + ("" if ok else f"  -- {_short_reason(reason)}"))
    print(f"{len(combos)} combinations: {legal} legal, {len(combos) - legal} illegal")
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    table = load_table(args.table)
    combos = _select(expand(table), args.k)
    if args.pairwise:
        combos = pairwise_combinations(table, combos, _load_results(args.results) or {"combinations": []})
    if not combos:
        print(f"composition run: -k {args.k} matches no combination (see `composition list`)", file=sys.stderr)
        return 2
    workdir = args.workdir or tempfile.mkdtemp(prefix="hp-matrix-")
    print(f"{len(combos)} combinations, workdir {workdir}, timeout {args.timeout:.0f} s per combination", flush=True)
    if args.in_process:
        results = run_matrix_in_process(combos, table, workdir=workdir, timeout=args.timeout,
                                        log=lambda m: print(m, flush=True), partial=args.out + ".partial")
    else:
        results = run_matrix(combos, table, workdir=workdir, timeout=args.timeout, jobs=args.jobs,
                             log=lambda m: print(m, flush=True), partial=args.out + ".partial")
    if args.k or args.pairwise:
        results = _merge(_load_results(args.out), results)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    _write_json(args.out, results)
    counts: Dict[str, int] = {}
    for r in results["combinations"]:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    print(f"results -> {args.out}: {counts} in {results['wall_s']:.0f} s")
    return 0 if not set(counts) - {"pass", "refused"} else 1


def pairwise_combinations(table: Mapping[str, Any], combos: Sequence[Combination],
                          results: Mapping[str, Any]) -> List[Combination]:
    """The combinations of the CI subset among ``combos``: the complete :func:`pairwise_cover` of the passing torch
    rows of ``results`` (what ``tests/st/torch/test_composition.py`` runs in-process), in cover order."""
    torch_rows = [r for r in results["combinations"]
                  if table["models"].get(r.get("model"), {}).get("job.backend", "torch") == "torch"]
    by_id = {c.cid: c for c in combos}
    return [by_id[cid] for cid in pairwise_cover(torch_rows)["ids"] if cid in by_id]


def _cmd_pairwise(args: argparse.Namespace) -> int:
    results = _load_results(args.results)
    if results is None:
        print(f"composition pairwise: no results at {args.results}; run the matrix first", file=sys.stderr)
        return 2
    full = pairwise_cover(results["combinations"], ref_cost_s=args.ref_cost)
    fit = pairwise_cover(results["combinations"], budget_s=args.budget, ref_cost_s=args.ref_cost)
    print(json.dumps({"full": dict(full, n=len(full["ids"])),
                      "within_budget": dict(fit, n=len(fit["ids"]), budget_s=args.budget)}, indent=1))
    return 0


def _cmd_doc(args: argparse.Namespace) -> int:
    text = render_doc(load_table(args.table), _load_results(args.results))
    if args.check:
        current = ""
        if os.path.isfile(args.doc):
            with open(args.doc, encoding="utf-8") as fh:
                current = fh.read()
        if current != text:
            print(f"{args.doc} is stale: run python -m hyper_parallel.devtools.composition doc", file=sys.stderr)
            return 1
        return 0
    with open(args.doc, "w", encoding="utf-8") as fh:
        fh.write(text)
    print(f"wrote {args.doc}")
    return 0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m hyper_parallel.devtools.composition", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--table", default=TABLE_PATH, help="the combination table (YAML)")
    sub = p.add_subparsers(dest="cmd", required=True)
    ls = sub.add_parser("list", help="every combination, legal or why refused (no process started)")
    ls.add_argument("-k", action="append", default=[],
                    help="only combinations whose id matches this glob ('llama3 tp=2*')")
    run = sub.add_parser("run", help="run the matrix")
    run.add_argument("-k", action="append", default=[],
                     help="only combinations whose id matches this glob (repeatable)")
    run.add_argument("--out", default=RESULTS_PATH, help="results JSON (a -k run merges into it)")
    run.add_argument("--workdir", default="", help="run folders and the data cache (default: a new temp dir)")
    run.add_argument("--timeout", type=float, default=300.0, help="seconds per combination")
    run.add_argument("--jobs", type=int, default=1, help="combinations run at once")
    run.add_argument("--pairwise", action="store_true",
                     help="only the CI subset: the pairwise cover of the passing rows of --results")
    run.add_argument("--results", default=RESULTS_PATH, help="the results --pairwise picks the cover from")
    run.add_argument("--in-process", action="store_true",
                     help="train each combination in reused gloo worker pools (LLMTrainer, no torchrun launch and no "
                          "checkpoint round trip: ~10x faster) instead of one hp-train launch each")
    pw = sub.add_parser("pairwise", help="the pairwise-covering subset of the passing combinations")
    pw.add_argument("--results", default=RESULTS_PATH)
    pw.add_argument("--budget", type=float, default=90.0,
                    help="seconds of run time (as the results measured them) the subset may cost")
    pw.add_argument("--ref-cost", type=float, default=60.0, help="seconds one one-process reference costs")
    merge = sub.add_parser("merge", help="merge an hp-train run's results (run --out FILE) into the results: "
                                         "each row it ran shows its hp-train verdict; exit 1 when a row differs "
                                         "from its in-process result")
    merge.add_argument("run", help="the results JSON of the hp-train run")
    merge.add_argument("--results", default=RESULTS_PATH)
    doc = sub.add_parser("doc", help="render docs/parallelism.md from the table and the results")
    doc.add_argument("--results", default=RESULTS_PATH)
    doc.add_argument("--doc", default=DOC_PATH)
    doc.add_argument("--check", action="store_true", help="exit 1 when the doc is not current")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point (see the module docstring)."""
    args = _parser().parse_args(argv)
    try:
        return {"list": _cmd_list, "run": _cmd_run, "pairwise": _cmd_pairwise, "merge": _cmd_merge,
                "doc": _cmd_doc}[args.cmd](args)
    except (ValueError, OSError) as exc:
        print(f"composition: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
