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
        held_out = trainer.evaluate(1)  # under PP the schedule's forward-only pass
        state = get_model_state_dict(trainer.backend.model, options=SimpleNamespace(full_state_dict=True))
        params = {k: v.asnumpy() for k, v in state.items()}
    finally:
        trainer.close()
    return [m["loss"] for m in history] + [held_out], params


def _compare(name, got, want):
    losses, params = got
    ref_losses, ref_params = want
    np.testing.assert_allclose(losses, ref_losses, rtol=RTOL, err_msg=f"{name}: losses (the last: held-out)")
    assert params and set(params) <= set(ref_params), sorted(set(params) - set(ref_params))
    for key, value in params.items():
        ref = ref_params[key]
        err = float(np.abs(value - ref).max() / max(np.abs(ref).max(), 1e-12))
        assert err <= RTOL, f"{name}: {key} differs from one process by {err:.2e} (relative)"


#: the trainer cases of ``make test`` 's launch (the others run in ``make matrix-mindspore``)
GATE_CASES = ("trainer pp 1F1B grad_accum 2", "trainer pp Interleaved1F1B", "trainer cp ring",
              "trainer compile one process", "trainer compile x dp_replicate grad_accum 2",
              "trainer compile x fsdp grad_accum 2")


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
