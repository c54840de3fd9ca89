# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""End-to-end check with LlamaFactory itself (``make llamafactory-check``; run with the LlamaFactory venv's python).

Every run is ``llamafactory-cli train`` on a YAML written here: full SFT (``stage: sft``, ``finetuning_type:
full``) of a tiny Llama and a tiny Qwen3 (``make_assets.py``) on the alpaca- and sharegpt-format datasets of
``data/``, on CPU. The reference is LlamaFactory without ``use_hyper_parallel`` on one process; every
``use_hyper_parallel: true`` run on 2 ranks (``FORCE_TORCHRUN=1 NPROC_PER_NODE=2``; HSDP on 4) must match it:
per-step losses (LlamaFactory logs 4 digits) and gradient norms, and the exported weights. Also: resume from a
checkpoint of our run, and the exported folder loaded by ``transformers`` gives the reference's logits.

``python check.py WORK [--only NAME ...] [--list]``; exits 1 with a table of what differs, 0 when all match.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
STEPS = 6
GLOBAL_BATCH = 8
ACCUM = 2
LOSS_TOL = 2e-4      # LlamaFactory / transformers log losses rounded to 4 digits
NORM_RTOL = 1e-4     # fp32 reduction order
WEIGHT_TOL = 5e-5    # max |w - w_ref| after 6 AdamW steps at lr 1e-3, fp32

# name -> (model, ranks, hyper_parallel_args or None (no use_hyper_parallel), reference run, extra YAML keys)
RUNS = {
    "llama_ref": ("llama", 1, None, None, {"save_steps": 3}),
    "llama_fsdp": ("llama", 2, {}, "llama_ref", {"save_steps": 3}),
    "llama_resume": ("llama", 2, {}, "llama_ref", {"resume_from_checkpoint": "{work}/llama_fsdp/checkpoint-3"}),
    "llama_tp2_selective": ("llama", 2, {"tp_size": 2, "activation_mode": "selective-op"}, "llama_ref", {}),
    "llama_fsdp_swap": ("llama", 2, {"activation_mode": "swap", "activation": {"swap": {
        "target": "disk", "dir": "{work}/swap", "min_bytes": 1}}}, "llama_ref", {}),
    "llama_fsdp_full_recompute": ("llama", 2, {"activation_mode": "full"}, "llama_ref", {}),
    "llama_hsdp": ("llama", 4, {"dp_replicate_size": 2, "dp_shard_size": 2}, "llama_ref", {}),
    "qwen3_ref": ("qwen3", 1, None, None, {}),
    "qwen3_fsdp": ("qwen3", 2, {}, "qwen3_ref", {}),
    "qwen3_tp2": ("qwen3", 2, {"tp_size": 2}, "qwen3_ref", {}),
}


def _yaml(work, name, model, ranks, hp, extra):
    dp = ranks // (hp or {}).get("tp_size", 1)
    cfg = {
        "model_name_or_path": os.path.join(work, "models", model), "stage": "sft", "do_train": True,
        "finetuning_type": "full", "dataset": "alpaca_tiny,sharegpt_tiny", "dataset_dir": os.path.join(HERE, "data"),
        "template": "default", "cutoff_len": 64, "overwrite_cache": True, "preprocessing_num_workers": 1,
        "output_dir": os.path.join(work, name), "logging_steps": 1,
        "save_strategy": "steps" if "save_steps" in extra else "no",
        "per_device_train_batch_size": GLOBAL_BATCH // ACCUM // dp, "gradient_accumulation_steps": ACCUM,
        "learning_rate": 1.0e-3, "max_steps": STEPS, "lr_scheduler_type": "cosine", "warmup_steps": 1,
        "max_grad_norm": 1.0, "bf16": False, "fp16": False, "report_to": "none", "seed": 42,
        "disable_gradient_checkpointing": True, "dataloader_num_workers": 0, "plot_loss": False,
        "ddp_timeout": 600,
    }
    cfg.update({k: (v.format(work=work) if isinstance(v, str) else v) for k, v in extra.items()})
    if hp is not None:
        path = os.path.join(work, f"{name}.hp.json")
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(json.loads(json.dumps(hp).replace("{work}", work)), fh, indent=1)
        cfg.update({"use_hyper_parallel": True, "hyper_parallel_args": path})
    path = os.path.join(work, f"{name}.yaml")
    with open(path, "w", encoding="utf-8") as fh:
        for key, value in cfg.items():
            fh.write(f"{key}: {json.dumps(value)}\n")
    return path


def lf_env(ranks: int) -> Dict[str, str]:
    """The environment of a ``llamafactory-cli train`` run: the torchaudio stub, torchrun on PATH, the ranks."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(HERE, "stub"), ROOT, env.get("PYTHONPATH", "")])
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    env.update({"OMP_NUM_THREADS": "1", "DISABLE_VERSION_CHECK": "1", "TOKENIZERS_PARALLELISM": "false",
                "HF_HUB_OFFLINE": "1", "WANDB_DISABLED": "true", "TRANSFORMERS_VERBOSITY": "error"})
    env.pop("FORCE_TORCHRUN", None)
    if ranks > 1:
        env.update({"FORCE_TORCHRUN": "1", "NPROC_PER_NODE": str(ranks)})
    return env


def train(work: str, name: str, timeout: float = 900) -> float:
    """Run one ``llamafactory-cli train``; returns the wall time (s). Raises with the log's tail on failure."""
    model, ranks, hp, _, extra = RUNS[name]
    path = _yaml(work, name, model, ranks, hp, extra)
    log = os.path.join(work, f"{name}.log")
    shutil.rmtree(os.path.join(work, name), ignore_errors=True)  # a fresh output_dir (no auto-resume)
    cli = os.path.join(os.path.dirname(sys.executable), "llamafactory-cli")
    start = time.perf_counter()
    with open(log, "w", encoding="utf-8") as fh:
        proc = subprocess.run([cli, "train", path], env=lf_env(ranks), stdout=fh, stderr=subprocess.STDOUT,
                              timeout=timeout, check=False, cwd=work)
    took = time.perf_counter() - start
    if proc.returncode:
        with open(log, encoding="utf-8") as fh:
            tail = fh.read()[-4000:]
        raise RuntimeError(f"{name}: llamafactory-cli train exited {proc.returncode}; log {log}:\n{tail}")
    return took


def history(work: str, name: str) -> Tuple[List[float], List[float]]:
    """Per-step (loss, grad_norm) from the run's ``trainer_state.json``."""
    with open(os.path.join(work, name, "trainer_state.json"), encoding="utf-8") as fh:
        logs = [h for h in json.load(fh)["log_history"] if "loss" in h]
    return [h["loss"] for h in logs], [h["grad_norm"] for h in logs]


def weights(folder: str) -> Dict[str, Any]:
    """The exported safetensors of a run (one file or an index)."""
    from safetensors.torch import load_file
    out = {}
    for fname in sorted(os.listdir(folder)):
        if fname.endswith(".safetensors"):
            out.update(load_file(os.path.join(folder, fname)))
    return out


def compare(work: str, name: str) -> Tuple[float, float, float]:
    """Differences of ``name`` against its reference: (max |loss diff|, max rel grad-norm diff, max |w diff|)."""
    ref = RUNS[name][3]
    (la, na), (lb, nb) = history(work, name), history(work, ref)
    if len(la) != STEPS or len(lb) != STEPS:
        raise RuntimeError(f"{name}: expected {STEPS} logged steps, got {len(la)} (reference {len(lb)})")
    dl = max(abs(a - b) for a, b in zip(la, lb))
    dn = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(na, nb))
    wa, wb = weights(os.path.join(work, name)), weights(os.path.join(work, ref))
    tied = wa.get("lm_head.weight")  # an export written before tied duplicates were dropped: must equal the embedding
    if "lm_head.weight" not in wb and tied is not None and bool((tied == wa["model.embed_tokens.weight"]).all()):
        del wa["lm_head.weight"]
    if sorted(wa) != sorted(wb):
        raise RuntimeError(f"{name}: exported keys differ from {ref}: {sorted(set(wa) ^ set(wb))[:6]}")
    dw = max(float((value.float() - wb[k].float()).abs().max()) for k, value in wa.items())
    return dl, dn, dw


def check_export_loads(work: str, name: str) -> Tuple[str, float]:
    """``AutoModelForCausalLM.from_pretrained`` on our export: its logits equal the reference export's."""
    import torch
    import transformers
    ref = RUNS[name][3]
    ours = transformers.AutoModelForCausalLM.from_pretrained(os.path.join(work, name)).eval()
    theirs = transformers.AutoModelForCausalLM.from_pretrained(os.path.join(work, ref)).eval()
    tok = transformers.AutoTokenizer.from_pretrained(os.path.join(work, name))
    ids = tok("Human: Compute two plus three.</s>\nAssistant:", return_tensors="pt").input_ids
    with torch.no_grad():
        diff = float((ours(ids).logits - theirs(ids).logits).abs().max())
    return type(ours).__name__, diff


def _needed(names: List[str]) -> List[str]:
    """``names`` with the runs they compare against (and resume from) first."""
    needed = []
    for n in names:
        for dep in (RUNS[n][3], "llama_fsdp" if n == "llama_resume" else None, n):
            if dep and dep not in needed:
                needed.append(dep)
    return needed


def report(work: str, names: List[str]) -> List[str]:
    """Print the comparison table; returns the names that differ."""
    failed = []
    print(f"\n{'run':28s} {'ranks':>5s} {'max|dloss|':>11s} {'max rel dgrad_norm':>19s} {'max|dw|':>10s}")
    for n in names:
        if RUNS[n][3] is None:
            continue
        dl, dn, dw = compare(work, n)
        ok = dl <= LOSS_TOL and dn <= NORM_RTOL and dw <= WEIGHT_TOL
        failed += [] if ok else [n]
        print(f"{n:28s} {RUNS[n][1]:5d} {dl:11.2e} {dn:19.2e} {dw:10.2e} {'ok' if ok else 'DIFFERS'}")
    if "llama_fsdp" in names:
        cls, diff = check_export_loads(work, "llama_fsdp")
        print(f"\nllama_fsdp export: transformers loads {cls}; max |logits - reference| = {diff:.2e}")
        if diff > 1e-4:
            failed.append("llama_fsdp export")
    return failed


def train_all(work: str, names: List[str], reuse: bool) -> None:
    """Train ``names`` in order (``reuse``: skip those whose outputs are complete)."""
    for n in names:
        if reuse and os.path.isfile(os.path.join(work, n, "train_results.json")):
            continue
        print(f"trained {n:28s} {train(work, n):6.1f} s", flush=True)


def main(argv: Optional[List[str]] = None) -> int:
    """Train what is asked, print the table; 1 when a run differs from its reference."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("work", help="work folder (models, outputs, logs)")
    parser.add_argument("--only", nargs="*", help="run these (with the references they need)")
    parser.add_argument("--no-train", action="store_true", help="compare existing outputs only")
    parser.add_argument("--reuse", action="store_true", help="do not train again runs that finished before")
    args = parser.parse_args(argv)
    work = os.path.abspath(args.work)
    os.makedirs(work, exist_ok=True)
    names = list(RUNS) if not args.only else args.only
    unknown = [n for n in names if n not in RUNS]
    if unknown:
        parser.error(f"--only: unknown run(s) {unknown} (known: {', '.join(RUNS)})")
    if not os.path.isdir(os.path.join(work, "models", "qwen3")):
        subprocess.run([sys.executable, os.path.join(HERE, "make_assets.py"), os.path.join(work, "models")],
                       check=True)
    start = time.perf_counter()
    train_all(work, [] if args.no_train else _needed(names), args.reuse)
    failed = report(work, names)
    checked = [n for n in names if RUNS[n][3] is not None]
    print(f"\n{len(checked) - len([f for f in failed if f in checked])} passed, {len(failed)} failed"
          + (f": {failed}" if failed else "") + f" ({time.perf_counter() - start:.0f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
