# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""TP, EP, CP and PP of Qwen3, Qwen3-MoE and DeepSeek-V3 in the MindSpore trainer, inside one launch of MindSpore
ranks: each case trains the model's debug flavor for 2 steps through ``LLMTrainer`` (``job.backend =
"mindspore"``, the code ``hp-train`` runs) and is compared with the same config trained on one process of the
same model (each rank trains that reference itself): every step's loss, the held-out loss after training and every
parameter this rank holds (TP / FSDP / EP shards gathered). Qwen3 ties its embeddings (under PP the first stage's
embedding is the last stage's head), Qwen3-MoE and DeepSeek-V3 route tokens through MoE blocks (under TP on each
rank's sequence shard; under EP across the ranks), DeepSeek-V3 has multi-head latent attention."""
import os

from tests.st.mindspore.trainer_par_checks import _compare, _train, warm_data_cache

QWEN3 = {"model.name": "qwen3"}
QWEN3_MOE = {"model.name": "qwen3_moe"}
DEEPSEEK = {"model.name": "deepseek_v3"}
MODELS = {"qwen3": QWEN3, "qwen3_moe": QWEN3_MOE, "deepseek_v3": DEEPSEEK}

#: case name -> (model, overrides), on 2 ranks
CASES_2 = {
    "qwen3 tp sp": ("qwen3", {"parallelism.tp": 2}),
    "qwen3 tp loss parallel": ("qwen3", {"parallelism.tp": 2, "parallelism.loss_parallel": True}),
    "qwen3 cp ring": ("qwen3", {"parallelism.cp": 2, "parallelism.cp_method": "ring"}),
    "qwen3 pp 1F1B tied": ("qwen3", {"parallelism.pp": 2, "parallelism.pp_schedule": "1F1B"}),
    "qwen3_moe tp sp": ("qwen3_moe", {"parallelism.tp": 2}),
    "qwen3_moe cp ring": ("qwen3_moe", {"parallelism.cp": 2, "parallelism.cp_method": "ring"}),
    "qwen3_moe ep": ("qwen3_moe", {"parallelism.dp_shard": 2, "parallelism.ep": 2}),
    # one microbatch: the batch-level auxiliary loss takes its statistics per microbatch (as on torch, where
    # more microbatches differ from one process the same way)
    "qwen3_moe pp GPipe": ("qwen3_moe", {"parallelism.pp": 2, "parallelism.pp_schedule": "GPipe",
                                         "parallelism.pp_microbatches": 1}),
    "deepseek_v3 tp sp": ("deepseek_v3", {"parallelism.tp": 2}),
    "deepseek_v3 ep": ("deepseek_v3", {"parallelism.dp_shard": 2, "parallelism.ep": 2}),
    "deepseek_v3 pp 1F1B": ("deepseek_v3", {"parallelism.pp": 2, "parallelism.pp_schedule": "1F1B"}),
}

#: the cases of ``make test`` 's launch (one per model and parallelism kind; the rest run in
#: ``make matrix-mindspore``, the composition matrix's ``*_mindspore`` model rows)
GATE_CASES = ("qwen3 tp loss parallel", "qwen3 pp 1F1B tied", "qwen3_moe ep", "deepseek_v3 tp sp")


def _run(names, nproc):
    import time
    from tests.st.mindspore.common import record
    os.environ.setdefault("HYPER_PARALLEL_BACKEND", "mindspore")
    results, seconds, refs = {}, {}, {}
    for name in names:
        model, overrides = CASES_2[name]
        if model not in refs:
            start = time.perf_counter()
            refs[model] = _train(MODELS[model], 1, distributed=False)
            seconds[f"{model} one process"] = round(time.perf_counter() - start, 1)
        start = time.perf_counter()
        record(results, name, lambda o=dict(MODELS[model], **overrides), n=name, r=refs[model]:
               _compare(n, _train(o, nproc, True), r))
        seconds[name] = round(time.perf_counter() - start, 1)
    return {"results": results, "seconds": seconds}


def run_gate():
    """Launch entry of ``tests/st/mindspore/test_mindspore_models_par.py`` (2 ranks): :data:`GATE_CASES`."""
    return _run(GATE_CASES, 2)


def run_all():
    """Launch entry (2 ranks): every case of :data:`CASES_2`."""
    return _run(CASES_2, 2)


def run_named():
    """A development entry (2 ranks): the cases named in ``HP_MODEL_PAR_CASES`` (comma-separated)."""
    return _run([n.strip() for n in os.environ["HP_MODEL_PAR_CASES"].split(",")], 2)


__all__ = ["CASES_2", "GATE_CASES", "run_gate", "run_all", "run_named", "warm_data_cache"]
