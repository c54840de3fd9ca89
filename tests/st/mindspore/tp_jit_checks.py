# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Tensor parallel under ``mindspore.jit`` (``hyper_parallel.tp._mindspore.compiled``) on 2 MindSpore ranks, each
against one process:

* the mechanism: a ``mindspore.jit`` -compiled ``mindspore.value_and_grad`` whose graph holds mccl collectives
  (``ops.AllReduce`` in Megatron's *f* / *g* cells with a custom ``bprop``) over a column- then row-parallel MLP:
  loss, input gradient and both weight shards' gradients equal one process;
* the local twin of a TP-parallelised model (``LocalTPModel``): Llama 3 / Qwen3 debug after the MindSpore TP plan
  (with and without sequence parallel, loss parallel, an uneven sequence under SP; Qwen3's QK norms and tied
  embeddings), loss and every shard's gradient against the unsharded model's PyNative ones;
* the trainer (``training.compile`` with ``tp = 2``, the code ``hp-train`` runs): ``trainer_par_checks`` 's cases,
  every step's loss, the gradient norms, the held-out loss and every final parameter against one PyNative
  process."""
import numpy as np

RTOL = 1e-5


def _mesh():
    import mindspore as ms
    import hyper_parallel as hp
    mesh = hp.init_device_mesh("cpu", (2,), mesh_dim_names=("tp",), platform="mindspore")
    ms.set_seed(0)
    return mesh


def check_megatron_f_g(mesh):
    """``x -> g(relu(f(x) @ W1_r.T) @ W2_r.T)`` compiled, against ``relu(x @ W1.T) @ W2.T`` on one process."""
    import mindspore as ms
    from mindspore import mint
    from hyper_parallel.tp._mindspore.compiled import CopyToTP, ReduceFromTP
    group, rank = mesh.get_group(0), mesh.get_local_rank(0)
    rng = np.random.default_rng(0)
    w1, w2, x = (rng.standard_normal(s).astype(np.float32) for s in ((16, 8), (8, 16), (4, 8)))
    cols = slice(8 * rank, 8 * rank + 8)
    p1, p2 = ms.Parameter(ms.Tensor(w1[cols]), name="w1"), ms.Parameter(ms.Tensor(w2[:, cols]), name="w2")
    f, g = CopyToTP(group, rank), ReduceFromTP(group, rank)
    lin, relu = mint.nn.functional.linear, mint.nn.functional.relu

    def tp_loss(inp):
        z = g(lin(relu(lin(f(inp), p1)), p2))
        return (z * z).sum()

    q1, q2 = ms.Parameter(ms.Tensor(w1), name="q1"), ms.Parameter(ms.Tensor(w2), name="q2")

    def one_loss(inp):
        z = lin(relu(lin(inp, q1)), q2)
        return (z * z).sum()

    got, (gx, (g1, g2)) = ms.jit(ms.value_and_grad(tp_loss, 0, [p1, p2]))(ms.Tensor(x))
    want, (wx, (h1, h2)) = ms.value_and_grad(one_loss, 0, [q1, q2])(ms.Tensor(x))
    np.testing.assert_allclose(float(got.asnumpy()), float(want.asnumpy()), rtol=RTOL)
    np.testing.assert_allclose(gx.asnumpy(), wx.asnumpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(g1.asnumpy(), h1.asnumpy()[cols], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(g2.asnumpy(), h2.asnumpy()[:, cols], rtol=1e-4, atol=1e-4)


def _model(name):
    from hyper_parallel.models import get_model_spec
    from hyper_parallel.trainer.models import build_model_config
    cfg = build_model_config(name, "debug", "mindspore")
    return get_model_spec(name, backend="mindspore").model_cls(cfg, seed=3)


def _local(full, spec, rank):
    from hyper_parallel.tp._mindspore.compiled import chunk_sizes
    for dim, pl in enumerate(spec.placements):
        if pl.is_shard():
            d = pl.dim % full.ndim
            sizes = chunk_sizes(full.shape[d], spec.mesh.size(dim))
            full = np.take(full, range(sum(sizes[:rank]), sum(sizes[:rank + 1])), axis=d)
    return full


def _twin_case(name, sequence_parallel, loss_parallel, seq):
    def check(mesh):
        import mindspore as ms
        from hyper_parallel.models.llama3._mindspore.parallelize import _apply_tp
        from hyper_parallel.optim._mindspore.optimizers import parameter_specs
        from hyper_parallel.tp._mindspore.compiled import compiled_tp_grad_fn
        ref, model = _model(name), _model(name)
        vocab = model.config.vocab_size
        rng = np.random.default_rng(1)
        ids = ms.Tensor(rng.integers(0, vocab, (2, seq)).astype(np.int32))
        labels_np = rng.integers(0, vocab, (2, seq)).astype(np.int32)
        labels_np[0, :2] = -100  # ignored positions
        labels = ms.Tensor(labels_np)
        ref_params = list(ref.trainable_params())
        want, want_grads = ms.value_and_grad(lambda i, t: type(ref).loss(ref(i), t), None, ref_params)(ids, labels)
        want_by_name = {p.name: g.asnumpy() for p, g in zip(ref_params, want_grads)}
        _apply_tp(model, mesh, sequence_parallel=sequence_parallel, loss_parallel=loss_parallel,
                  attention_plan=None, after_tp=None)
        params = list(model.trainable_params())
        fn = compiled_tp_grad_fn(model, mesh, params, sequence_parallel=sequence_parallel,
                                 loss_parallel=loss_parallel)
        scale = ms.Tensor(0.5, ms.float32)
        for _ in range(2):  # the second call runs the cached graph
            got, grads = fn(ids, labels, scale)
            np.testing.assert_allclose(float(got.asnumpy()), 0.5 * float(want.asnumpy()), rtol=RTOL)
        specs, rank = parameter_specs(model), mesh.get_local_rank(0)
        for p, g in zip(params, grads):
            full = 0.5 * want_by_name[p.name]
            expect = _local(full, specs[p.name], rank) if p.name in specs else full
            err = float(np.abs(g.asnumpy() - expect).max() / max(np.abs(expect).max(), 1e-12))
            assert err <= 1e-4, f"{p.name}: gradient differs from one process by {err:.2e} (relative)"
    return check


TWIN_CHECKS = {
    "compiled tp: Megatron f / g in a jit graph": check_megatron_f_g,
    "compiled tp: llama3 twin, no SP": _twin_case("llama3", False, False, 16),
    "compiled tp: llama3 twin, SP": _twin_case("llama3", True, False, 16),
    "compiled tp: llama3 twin, SP uneven sequence": _twin_case("llama3", True, False, 7),
    "compiled tp: llama3 twin, SP + loss parallel": _twin_case("llama3", True, True, 16),
    "compiled tp: qwen3 twin (QK norm, tied), SP": _twin_case("qwen3", True, False, 16),
    "compiled tp: qwen3 twin, loss parallel, no SP": _twin_case("qwen3", False, True, 16),
}

#: trainer cases (``trainer_par_checks`` 's harness): ``training.compile`` with TP on 2 ranks
TRAINER_CASES = {
    "trainer compile x tp": {"training.compile": True, "parallelism.tp": 2, "parallelism.dp_shard": 1},
    "trainer compile x tp no sp loss parallel grad_accum 2": {
        "training.compile": True, "parallelism.tp": 2, "parallelism.dp_shard": 1,
        "parallelism.sequence_parallel": False, "parallelism.loss_parallel": True, "training.grad_accum": 2},
}


def run():
    """Launch entry (2 ranks): :data:`TWIN_CHECKS`, then :data:`TRAINER_CASES` against one process."""
    import os
    import time
    from tests.st.mindspore.common import run_group
    from tests.st.mindspore import trainer_par_checks
    os.environ.setdefault("HYPER_PARALLEL_BACKEND", "mindspore")
    results, seconds = {}, {}
    seconds["twin checks"] = round(run_group(results, TWIN_CHECKS, _mesh()), 1)
    return trainer_par_checks._run(TRAINER_CASES, 2, results, seconds)  # pylint: disable=protected-access


def run_twin():
    """Launch entry (2 ranks): :data:`TWIN_CHECKS` alone."""
    from tests.st.mindspore.common import run_group
    results = {}
    return {"results": results, "seconds": round(run_group(results, TWIN_CHECKS, _mesh()), 1)}
