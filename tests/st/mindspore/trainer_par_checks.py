# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The MindSpore trainer's pipeline and context parallel, inside one launch of MindSpore ranks: each case trains
the llama3 debug model for a few steps through ``LLMTrainer`` (``job.backend = "mindspore"``, the code
``hp-train`` runs) and is compared with the same config trained on one process (each rank trains that reference
itself, no process group): every step's loss and, at the end, every parameter this rank holds (FSDP shards
gathered), and the held-out loss after training."""
import os
import tempfile
from types import SimpleNamespace

import numpy as np

STEPS = 2
#: loss and parameters relative to one process (fp32; layouts sum partial products in different orders)
RTOL = 1e-5
BASE = {"job.backend": "mindspore", "model.name": "llama3", "model.flavor": "debug", "training.steps": STEPS,
        "training.global_batch": 4, "training.seq_len": 16, "training.clip_grad_norm": 1.0,
        "data.vocab_size": 1024, "data.max_corpus_mb": 0.3, "optimizer.lr": 3e-3, "optimizer.eps": 1e-3,
        "optimizer.warmup_steps": 1, "optimizer.total_steps": 100, "metrics.progress": False,
        "metrics.plot": False, "metrics.eval_every": 0, "metrics.moe_monitor": False,
        "checkpoint.enable": False}

#: case name -> overrides, on 2 ranks
CASES_2 = {
    "trainer pp GPipe": {"parallelism.pp": 2, "parallelism.pp_schedule": "GPipe"},
    "trainer pp 1F1B grad_accum 2": {"parallelism.pp": 2, "parallelism.pp_schedule": "1F1B",
                                     "training.grad_accum": 2, "parallelism.pp_microbatches": 2},
    "trainer pp Interleaved1F1B": {"parallelism.pp": 2, "parallelism.pp_schedule": "Interleaved1F1B",
                                   "parallelism.pp_microbatches": 4},
    "trainer cp ring": {"parallelism.cp": 2, "parallelism.cp_method": "ring"},
    "trainer cp allgather contiguous": {"parallelism.cp": 2, "parallelism.cp_method": "allgather",
                                        "parallelism.cp_load_balance": "none"},
    "trainer cp alltoall": {"parallelism.cp": 2, "parallelism.cp_method": "alltoall"},
    # training.compile: the whole forward + backward under mindspore.jit (one process; replicate, whose gradient
    # hooks are removed and whose buckets are reduced after the graph, with gradient accumulation)
    "trainer compile one process": {"training.compile": True, "job.nproc": 1, "parallelism.dp_shard": 1},
    "trainer compile x dp_replicate grad_accum 2": {"training.compile": True, "parallelism.dp_replicate": 2,
                                                    "parallelism.dp_shard": 1,
                                                    "training.grad_accum": 2},
    # FSDP: the all-gathers before and the reduce-scatters after one graph over an unsharded twin
    "trainer compile x fsdp grad_accum 2": {"training.compile": True, "parallelism.dp_shard": 2,
                                            "training.grad_accum": 2},
    # [activation] (recompute policies; results equal to no recompute) and the pipeline's recompute ahead
    "trainer activation selective-op x dp_replicate": {"activation.mode": "selective-op",
                                                       "parallelism.dp_replicate": 2, "parallelism.dp_shard": 1},
    "trainer activation full x tp": {"activation.mode": "full", "parallelism.dp_shard": 1, "parallelism.tp": 2},
    "trainer activation full x compile dp_replicate": {"activation.mode": "full", "training.compile": True,
                                                       "parallelism.dp_replicate": 2, "parallelism.dp_shard": 1},
    "trainer activation every-k x pp 1F1B recompute ahead": {"activation.mode": "every-k", "activation.every_k": 1,
                                                             "parallelism.pp": 2, "parallelism.pp_schedule": "1F1B",
                                                             "parallelism.pp_recompute_ahead": True},
}
#: case -> the cells ``[activation]`` must have set to recompute (suffixes of their names, on every rank)
RECOMPUTED = {
    "trainer activation selective-op x dp_replicate": ("input_layernorm", "post_attention_layernorm", "mlp.act"),
    "trainer activation full x tp": ("layers.0", "layers.1"),
    "trainer activation full x compile dp_replicate": ("layers.0", "layers.1"),
    "trainer activation every-k x pp 1F1B recompute ahead": ("layers.",),
}
#: on 4 ranks (PP x FSDP)
CASES_4 = {
    "trainer pp 1F1B x fsdp": {"parallelism.pp": 2, "parallelism.dp_shard": 2, "parallelism.pp_schedule": "1F1B"},
    "trainer pp Interleaved1F1B x fsdp": {"parallelism.pp": 2, "parallelism.dp_shard": 2,
                                          "parallelism.pp_schedule": "Interleaved1F1B",
                                          "parallelism.pp_microbatches": 2},
}


def _config(overrides, out_dir, nproc):
    from hyper_parallel.trainer.config import load_config
    over = dict(BASE, **overrides)
    over.update({"job.nproc": nproc, "job.out_dir": out_dir})
    return load_config(None, list(over.items()))


def _train(overrides, nproc, distributed):
    from hyper_parallel.checkpoint._mindspore.state_dict import get_model_state_dict
    from hyper_parallel.trainer.api import LLMTrainer
    out = tempfile.mkdtemp(prefix="hp_ms_par_")
    trainer = LLMTrainer(_config(overrides, out, nproc), distributed=distributed)
    try:
        history = trainer.train()
        if overrides.get("training.compile") and overrides.get("parallelism.dp_shard", 1) > 1:
            # the compiled graph over the unsharded twin ran, not PyNative fully_shard
            step = trainer.backend._compiled_fsdp  # pylint: disable=protected-access
            assert step is not None and step.twin_params, "training.compile under FSDP: no CompiledFSDPStep"
            assert step.fused, "training.compile under FSDP: the units' collectives were not fused"
        if overrides.get("training.compile") and overrides.get("parallelism.tp", 1) > 1:
            # the compiled graph over this rank's shards ran (hyper_parallel.tp._mindspore.compiled), not PyNative
            fns = getattr(trainer.backend._grad_fn, "_fns", None)  # pylint: disable=protected-access
            assert fns, "training.compile under TP: no compiled TP graph ran"
        recomputed = _recomputed(trainer.backend)
        held_out = trainer.evaluate(1)  # under PP the schedule's forward-only pass
        state = get_model_state_dict(trainer.backend.model, options=SimpleNamespace(full_state_dict=True))
        params = {k: v.asnumpy() for k, v in state.items()}
    finally:
        trainer.close()
    return [m["loss"] for m in history] + [held_out], params, recomputed, [m["grad_norm"] for m in history]


def _recomputed(backend):
    """Names of the cells set to recompute (``Cell.recompute()``) in the backend's model, and under PP how many
    microbatches each of this rank's stages recomputed ahead of its output gradient (None for a last stage)."""
    cells = sorted(n for n, c in backend.model.cells_and_names() if getattr(c, "_has_config_recompute", False))
    stages = [] if backend._schedule is None else backend._schedule._stages  # pylint: disable=protected-access
    return cells, [None if st.is_last else st.recomputed_ahead for st in stages]


def _compare(name, got, want):
    losses, params, (recomputed, ahead), norms = got
    if "recompute ahead" in name:  # every stage that waits for a gradient built its recompute before it came
        assert all(n is None or n >= STEPS for n in ahead), f"{name}: microbatches recomputed ahead: {ahead}"
    else:
        assert not any(ahead), f"{name}: stages recomputed ahead without parallelism.pp_recompute_ahead: {ahead}"
    for suffix in RECOMPUTED.get(name, ()):  # the policy was applied (equal results alone would not show it)
        assert any(n.endswith(suffix) or f".{suffix}" in n for n in recomputed), \
            f"{name}: no cell matching {suffix!r} recomputes: {recomputed}"
    if name not in RECOMPUTED:
        assert not recomputed, f"{name}: cells recompute without an [activation] section: {recomputed}"
    if name in RECOMPUTED and "selective" in name:  # the matmuls keep their activations
        assert not any(n.endswith(("q_proj", "o_proj", "gate_proj", "down_proj")) for n in recomputed), recomputed
    ref_losses, ref_params, _, ref_norms = want
    np.testing.assert_allclose(losses, ref_losses, rtol=RTOL, err_msg=f"{name}: losses (the last: held-out)")
    if any(k in name for k in ("dp_replicate", "compile x fsdp", "compile x tp")):  # replicate: the norm of its
        # flat reduced buckets; compiled FSDP: of its whole reduced table (no collective of their own)
        np.testing.assert_allclose(norms, ref_norms, rtol=RTOL, err_msg=f"{name}: gradient norms")
        assert max(ref_norms) > BASE["training.clip_grad_norm"], f"{name}: no step clipped: {ref_norms}"
    assert params and set(params) <= set(ref_params), sorted(set(params) - set(ref_params))
    for key, value in params.items():
        ref = ref_params[key]
        err = float(np.abs(value - ref).max() / max(np.abs(ref).max(), 1e-12))
        assert err <= RTOL, f"{name}: {key} differs from one process by {err:.2e} (relative)"


#: the trainer cases of ``make test`` 's launch (the others run in ``make matrix-mindspore``)
GATE_CASES = ("trainer pp 1F1B grad_accum 2", "trainer pp Interleaved1F1B", "trainer cp ring",
              "trainer compile one process", "trainer compile x dp_replicate grad_accum 2",
              "trainer compile x fsdp grad_accum 2",
              "trainer activation selective-op x dp_replicate", "trainer activation full x tp",
              "trainer activation full x compile dp_replicate",
              "trainer activation every-k x pp 1F1B recompute ahead")


def _run(cases, nproc, results=None, seconds=None):
    import time
    from tests.st.mindspore.common import record
    os.environ.setdefault("HYPER_PARALLEL_BACKEND", "mindspore")
    results = {} if results is None else results
    seconds = {} if seconds is None else seconds
    start = time.perf_counter()
    ref = _train({}, 1, distributed=False)
    seconds["one process"] = round(time.perf_counter() - start, 1)
    for name, overrides in cases.items():
        start = time.perf_counter()
        ranks = overrides.get("job.nproc", nproc)  # "job.nproc": 1: this rank alone, no process group
        record(results, name, lambda o=overrides, n=name, r=ranks: _compare(n, _train(o, r, r != 1), ref))
        seconds[name] = round(time.perf_counter() - start, 1)
    return {"results": results, "seconds": seconds}


def run_two_ranks():
    """Launch entry (2 ranks): every pipeline schedule and CP method case against one process."""
    return _run(CASES_2, 2)


def run_gate():
    """Launch entry of ``tests/st/mindspore/test_mindspore_breadth.py`` (2 ranks): the CP checks
    (``cp_checks.CP_CHECKS``), then the trainer cases :data:`GATE_CASES` against one process."""
    import time
    from tests.st.mindspore.common import run_group, setup_mesh
    from tests.st.mindspore.cp_checks import CP_CHECKS
    results, seconds = {}, {}
    start = time.perf_counter()
    run_group(results, CP_CHECKS, setup_mesh())
    seconds["cp checks"] = round(time.perf_counter() - start, 1)
    return _run({name: CASES_2[name] for name in GATE_CASES}, 2, results, seconds)


def run_compile():
    """Launch entry (2 ranks): the ``training.compile`` cases only (for working on them)."""
    return _run({name: case for name, case in CASES_2.items() if "compile" in name}, 2)


def run_activation():
    """Launch entry (2 ranks): the ``[activation]`` cases alone against one process."""
    return _run({k: v for k, v in CASES_2.items() if k in RECOMPUTED}, 2)


def run_four_ranks():
    """Launch entry (4 ranks): PP x FSDP against one process."""
    return _run(CASES_4, 4)


def warm_data_cache():
    """Train (or find) the cases' BPE tokenizer and token cache here, before the ranks start."""
    from hyper_parallel.trainer.data import prepare_dataset
    cfg = _config({}, tempfile.mkdtemp(prefix="hp_ms_par_"), 1)
    d = cfg.data
    prepare_dataset(d.source, d.paths, text_key=d.text_key, tokenizer=d.tokenizer, vocab_size=d.vocab_size,
                    max_corpus_mb=d.max_corpus_mb, cache_dir=d.cache_dir, seq_len=cfg.training.seq_len,
                    eval_fraction=d.eval_fraction)
