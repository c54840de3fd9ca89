# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Runs inside 2 MindSpore ranks (``test_replicate_mindspore.py``): ``replicate`` (data parallel, bucketed gradient
all-reduce started during backward) on the MindSpore Llama 3 ``debug`` model against one process over the whole
batch -- losses, every gradient and the SGD-updated weights for 2 steps, with overlap and without, and with
gradient accumulation; the buckets start during backward, last layer first; the loss averaged with the
gradients (``extra=``, and packed by a compiled graph for ``reduce_packed``), the clipping norm and scaling from
the flat buckets; and the timing of a step with and without overlap."""
import statistics
import time

import numpy as np

from tests.st.mindspore.common import TOL, record

ROWS, SEQ, VOCAB, LR = 4, 16, 256, 0.1


def _model():
    from hyper_parallel.models import get_model_spec
    from hyper_parallel.trainer.models import build_model_config
    cfg = build_model_config("llama3", "debug", vocab_size=VOCAB, max_position_embeddings=64)
    return get_model_spec("llama3", backend="mindspore").model_cls(cfg, seed=0)


def _batch(step):
    return np.random.default_rng(100 + step).integers(0, VOCAB, (ROWS, SEQ + 1)).astype(np.int32)


def _grad_fn(model):
    import mindspore as ms
    params = model.trainable_params()
    return params, ms.value_and_grad(lambda ids, labels: type(model).loss(model(ids), labels), None, params)


def _sgd(params, grads):
    import mindspore as ms
    for p, g in zip(params, grads):  # in place: a compiled graph keeps reading the parameter's storage
        ms.ops.assign(p, p.value() - LR * g)


def _reference(steps):
    """One process, the whole batch: per step the loss and every gradient; the weights after."""
    import mindspore as ms
    model = _model()
    params, fn = _grad_fn(model)
    out = []
    for s in range(steps):
        b = _batch(s)
        loss, grads = fn(ms.Tensor(b[:, :-1]), ms.Tensor(b[:, 1:]))
        out.append((float(loss.asnumpy()), [g.asnumpy() for g in grads]))
        _sgd(params, grads)
    return out, {p.name: p.asnumpy() for p in params}


def _through_plan():
    """The trainer's way: ``parallelize_llama3`` with ``dp_replicate = 2`` (nothing sharded) is ``replicate``."""
    from hyper_parallel.models import ParallelDims, get_model_spec
    dims = ParallelDims(dp_replicate=2, world_size=2)
    model = get_model_spec("llama3", backend="mindspore").parallelize_fn(_model(), dims.build_mesh(
        "cpu", platform="mindspore"), dims)
    assert type(model).__name__ == "ReplicateLlamaForCausalLM", type(model)
    return model


def _distributed(me, steps, *, overlap, accumulate=False, bucket_cap_mb=0.02, extra=False):  # noqa  # pylint: disable=R0914
    import mindspore as ms
    from hyper_parallel.fsdp._mindspore.replicate import replicate
    from hyper_parallel.platform.mindspore.collectives import raw_all_reduce
    model = _through_plan() if bucket_cap_mb is None else replicate(_model(), bucket_cap_mb=bucket_cap_mb,
                                                                      overlap=overlap)
    group = model._replicate_state().group  # pylint: disable=protected-access
    params, fn = _grad_fn(model)
    if extra == "packed":
        fn = _packed_fn(model, params)
    half = ROWS // 2
    out, launched, norms = [], [], []
    for s in range(steps):
        rows = _batch(s)[me * half:(me + 1) * half]
        if accumulate:  # two micro-batches of one row each; the first keeps its gradients locally
            model.set_requires_gradient_sync(False)
            l1, _ = fn(ms.Tensor(rows[:1, :-1]), ms.Tensor(rows[:1, 1:]))
            model.set_requires_gradient_sync(True)
            l2, grads = fn(ms.Tensor(rows[1:, :-1]), ms.Tensor(rows[1:, 1:]))
            loss = (l1 + l2) / 2
            reduced = [g / 2 for g in model.reduce_gradients(params, grads)]
        elif extra:  # the loss averaged in the gradients' all-reduce; the norm from the flat buckets
            loss, grads = fn(ms.Tensor(rows[:, :-1]), ms.Tensor(rows[:, 1:]))
            if extra == "packed":  # grads: the graph's flat buffers, the loss at the end of the last
                reduced, avg = model.reduce_packed(params, grads, extra=True)
            else:
                reduced, avg = model.reduce_gradients(params, grads, extra=loss.reshape(1))
            norms.append(float(model.reduced_grad_sq_norm().asnumpy()))
            halves = model.scale_reduced_gradients(params, 0.5)
            for g, h in zip(reduced, halves):
                np.testing.assert_allclose(h.asnumpy(), g.asnumpy() * 0.5, rtol=1e-6, atol=0)
        else:
            loss, grads = fn(ms.Tensor(rows[:, :-1]), ms.Tensor(rows[:, 1:]))
            reduced = model.reduce_gradients(params, grads)
        launched.append(model.replicate_stats()["launched"])
        mean = float(raw_all_reduce(ms.Tensor([float(loss.asnumpy())], ms.float32), "avg", group).asnumpy()[0])
        if extra:
            assert avg.shape == (1,) and abs(float(avg.asnumpy()[0]) - mean) <= 1e-6 * abs(mean), (avg, mean)
        out.append((mean, [g.asnumpy() for g in reduced]))
        _sgd(params, reduced)
    return out, {p.name: p.asnumpy() for p in params}, model, launched, norms


def _packed_fn(model, params):
    """``training.compile`` 's way: hooks removed, forward + backward in one graph that returns the flat buckets
    (``pack_gradients``, the loss at the end of the last)."""
    import mindspore as ms
    from hyper_parallel.fsdp._mindspore.replicate import pack_gradients
    model.remove_gradient_hooks()

    from hyper_parallel.models.llama3._mindspore.model import cross_entropy

    def loss_fn(ids, labels):  # the model's loss on plain logits, as the trainer compiles it
        logits = model(ids)
        return cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))

    grad_fn = ms.value_and_grad(loss_fn, None, params)
    layout, size = model.gradient_layout(params), model._replicate_state().size  # pylint: disable=protected-access
    assert model.packs_extra() and sorted(i for idx in layout for i in idx) == list(range(len(params))), layout

    def packed(ids, labels):
        loss, grads = grad_fn(ids, labels)
        return loss, pack_gradients(grads, layout, size, loss)

    return ms.jit(packed)


def _compare(ref, got):
    (ref_steps, ref_w), (steps, w) = ref, got[:2]
    for (rl, rg), (l, g) in zip(ref_steps, steps):
        np.testing.assert_allclose(l, rl, **TOL)
        for a, b in zip(g, rg):
            np.testing.assert_allclose(a, b, **TOL)
    for name, value in ref_w.items():
        np.testing.assert_allclose(w[name], value, **TOL)


def _timing(me, reps=4):
    """Median seconds of backward + reduce_gradients with overlap and without, interleaved."""
    import mindspore as ms
    from hyper_parallel.fsdp._mindspore.replicate import replicate
    from hyper_parallel.platform import get_platform
    models = {k: replicate(_model(), bucket_cap_mb=0.02, overlap=k) for k in (True, False)}
    fns = {k: _grad_fn(m) for k, m in models.items()}
    rows = _batch(0)[me * 2:(me + 1) * 2]
    ids, labels = ms.Tensor(rows[:, :-1]), ms.Tensor(rows[:, 1:])
    times = {True: [], False: []}
    for _ in range(reps):
        for k, m in models.items():
            get_platform("mindspore").barrier()
            start = time.perf_counter()
            params, fn = fns[k]
            _, grads = fn(ids, labels)
            reduced = m.reduce_gradients(params, grads)
            float(reduced[0].sum().asnumpy())
            times[k].append(time.perf_counter() - start)
    return {"overlap_s": statistics.median(times[True][1:]), "after_backward_s": statistics.median(times[False][1:])}


def run():
    """Every check; returns ``{"results": {name: "ok" | "FAIL ..."}, "timing": {...}}``."""
    import mindspore as ms
    from hyper_parallel.platform.mindspore.runtime import configure
    from tests.st.mindspore.common import setup_mesh
    configure()
    ms.set_context(mode=ms.PYNATIVE_MODE)
    mesh = setup_mesh()
    me = mesh.get_coordinate()[0]
    results, timing = {}, {}
    ref = _reference(2)
    runs = {}

    def overlap():
        runs["on"] = _distributed(me, 2, overlap=True)
        _compare(ref, runs["on"])

    def buckets_start_during_backward():
        model, launched = runs["on"][2], runs["on"][3]
        buckets = model.replicate_stats()["buckets"]
        assert len(buckets) >= 3, buckets
        assert buckets[0][0] == "lm_head.weight" and buckets[-1][-1] == "model.embed_tokens.weight", buckets
        for step in launched:  # every bucket started inside backward, in backward order (last layer first)
            assert step == [(i, True) for i in range(len(buckets))], step

    def no_overlap_same_result():
        got = _distributed(me, 2, overlap=False)
        _compare(ref, got)
        assert all(not during for step in got[3] for _, during in step), got[3]

    def accumulation():
        _compare(ref, _distributed(me, 2, overlap=True, accumulate=True))

    def one_bucket_through_the_plan():
        got = _distributed(me, 2, overlap=True, bucket_cap_mb=None)
        _compare(ref, got)
        assert len(got[2].replicate_stats()["buckets"]) == 1 and got[3][-1] == [(0, True)], got[3]

    def extra_values_and_grad_norm():  # reduce_gradients(extra=) in the last bucket's all-reduce (overlap off)
        # or its own (every bucket started in backward), or packed in a compiled graph (reduce_packed);
        # reduced_grad_sq_norm = the one-process gradients' norm; scale_reduced_gradients = gradients x factor
        for overlap_on, how in ((False, True), (True, True), (False, "packed")):
            got = _distributed(me, 2, overlap=overlap_on, extra=how)
            _compare(ref, got)
            for (_, ref_grads), sq in zip(ref[0], got[4]):
                want = sum(float((g.astype(np.float64) ** 2).sum()) for g in ref_grads)
                assert abs(sq - want) <= 1e-5 * want, (how, sq, want)

    for name, fn in (("overlap", overlap), ("buckets_start_during_backward", buckets_start_during_backward),
                     ("no_overlap_same_result", no_overlap_same_result), ("accumulation", accumulation),
                     ("one_bucket_through_the_plan", one_bucket_through_the_plan),
                     ("extra_values_and_grad_norm", extra_values_and_grad_norm)):
        record(results, name, fn)
    record(results, "timing", lambda: timing.update(_timing(me)))
    return {"results": results, "timing": timing}
