# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""TP completeness on MindSpore, checked inside a MindSpore launch (2 ranks) against one process:
``mindspore.mint`` matmul/reduction/softmax/normalisation/view rules, vocabulary-parallel Embedding,
SequenceParallel, PrepareModuleInput/Output and loss parallel."""
import itertools

import numpy as np

TOL = dict(rtol=1e-4, atol=1e-5)


def _mint_cases():
    """(registry name, inputs, extra args, placement combos) of the mint rules."""
    import mindspore as ms
    from hyper_parallel import Partial, Replicate, Shard
    rng = np.random.default_rng(3)

    def t(*shape):
        return ms.Tensor((rng.random(shape) + 0.5).astype(np.float32))

    x, w, b3, c3, bias = t(4, 6), t(6, 4), t(2, 4, 6), t(2, 6, 3), t(5)
    lin_w = t(5, 6)
    rs = [Replicate(), Shard(0), Shard(1), Partial()]
    two = list(itertools.product(rs, rs))
    one = [(p,) for p in rs]
    return [
        ("mindspore.mint.matmul", [x, w], (), two),
        ("mindspore.mint.bmm", [b3, c3], (), [(Shard(0), Shard(0)), (Shard(2), Shard(1)), (Replicate(), Shard(2))]),
        ("mindspore.mint.nn.functional.linear", [x, lin_w, bias], (),
         [(Replicate(), Shard(0), Shard(0)), (Shard(1), Shard(1), Replicate()), (Shard(0), Replicate(), Replicate())]),
        ("mindspore.mint.sum", [x], (1,), one),
        ("mindspore.mint.mean", [x], (1,), one),
        ("mindspore.mint.amax", [x], (1,), one[:3]),
        ("mindspore.mint.softmax", [x], (1,), one),
        ("mindspore.ops.softmax", [x], (1,), one),
        ("mindspore.ops.log_softmax", [x], (1,), one),
        ("mindspore.mint.reshape", [x], ((2, 12),), one),
        ("mindspore.mint.flatten", [b3], (), [(Shard(0),), (Shard(1),), (Replicate(),)]),
        ("mindspore.mint.unsqueeze", [x], (0,), one),
        ("mindspore.mint.transpose", [x], (0, 1), one),
        ("mindspore.mint.permute", [b3], ((2, 0, 1),), [(Shard(0),), (Shard(2),), (Partial(),)]),
    ]


def mint_rule_checks(mesh, record):
    """Every case forward and backward vs one process (``checks._check_op``: gathered output, local grads)."""
    import mindspore as ms
    from hyper_parallel.platform.mindspore import dispatch as D
    from tests.st.mindspore.checks import _check_op
    for name, inputs, extra, combos in _mint_cases():
        def run(name=name, inputs=inputs, extra=extra, combos=combos):
            out = D.resolve_mindspore_name(name)(*inputs, *extra)
            weight = ms.Tensor(np.random.default_rng(1).standard_normal(tuple(out.shape)).astype(np.float32))
            for combo in combos:
                _check_op(mesh, name, len(inputs), extra, True, inputs, weight, combo)
        record(f"mint rule {name}", run)


MINT_NAMES = ["mindspore.mint.matmul", "mindspore.mint.bmm", "mindspore.mint.nn.functional.linear",
              "mindspore.mint.sum", "mindspore.mint.mean", "mindspore.mint.amax", "mindspore.mint.softmax",
              "mindspore.ops.softmax", "mindspore.ops.log_softmax",
              "mindspore.mint.reshape", "mindspore.mint.flatten", "mindspore.mint.unsqueeze",
              "mindspore.mint.transpose", "mindspore.mint.permute"]


def _sp_model(seed=3):
    import mindspore as ms
    from mindspore import mint, nn

    class Tiny(nn.Cell):
        """nn.Embedding(10, 8) -> nn.LayerNorm -> Dense(8, 16) -> relu -> Dense(16, 8) -> LayerNorm -> Dense(8, 10)."""

        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(10, 8)
            self.norm1 = nn.LayerNorm((8,))
            self.up = nn.Dense(8, 16)
            self.down = nn.Dense(16, 8)
            self.norm2 = nn.LayerNorm((8,))
            self.head = nn.Dense(8, 10, has_bias=False)

        def construct(self, ids):
            h = self.norm1(self.tok(ids))
            h = self.up(h)
            h = h.to_local() if hasattr(h, "to_local") else h  # Colwise returns a local tensor by default
            return self.head(self.norm2(self.down(mint.nn.functional.relu(h))))

    ms.set_seed(seed)
    return Tiny()


def _grad_of(cell, name, grad, coord):
    """This rank's part of the one-process gradient of parameter ``name`` (its TP layout, if any)."""
    from tests.st.mindspore.checks import _local_of
    owner, leaf = name.split(".")
    spec = getattr(cell, owner).__dict__.get("_hp_param_specs", {}).get(leaf)
    return grad if spec is None else _local_of(grad, spec, coord)


def sp_loss_parallel_check(mesh):
    """Vocab-parallel Embedding (output Shard(1)), SequenceParallel norms, Colwise/Rowwise (reduce-scatter
    to Shard(1)), a Colwise head with Shard(-1) logits and vocab_parallel_cross_entropy: loss and every
    gradient vs one process over 2 SGD steps."""
    import mindspore as ms
    from mindspore import nn
    from hyper_parallel import Shard
    from hyper_parallel.tp import (ColwiseParallel, RowwiseParallel, SequenceParallel, parallelize_module,
                                   vocab_parallel_cross_entropy)
    from tests.st.mindspore.checks import _close
    coord = mesh.get_coordinate()
    ref, net = _sp_model(), _sp_model()
    parallelize_module(net, mesh, {
        "tok": RowwiseParallel(input_layouts=None, output_layouts=Shard(1), use_local_output=False),
        "norm1": SequenceParallel(),
        "up": ColwiseParallel(input_layouts=Shard(1)),
        "down": RowwiseParallel(output_layouts=Shard(1), use_local_output=False),
        "norm2": SequenceParallel(),
        "head": ColwiseParallel(input_layouts=Shard(1), use_local_output=False),
    })
    assert tuple(net.tok.embedding_table.shape) == (5, 8), net.tok.embedding_table.shape
    rng = np.random.default_rng(4)
    ids = ms.Tensor(rng.integers(0, 10, (2, 4)).astype(np.int32))
    target = ms.Tensor(rng.integers(0, 10, (2, 4)).astype(np.int32))
    target[0, 1] = -100  # an ignored position

    def ref_loss(i, tgt):
        logits = ref(i)
        return ms.ops.cross_entropy(logits.reshape(-1, 10), tgt.reshape(-1), ignore_index=-100)

    def tp_loss(i, tgt):
        logits = net(i)
        assert logits.placements == (Shard(2),), logits.placements
        return vocab_parallel_cross_entropy(logits, tgt)

    for step in range(2):
        lr_, g_ref = ms.value_and_grad(ref_loss, None, ref.trainable_params())(ids, target)
        lt, g_tp = ms.value_and_grad(tp_loss, None, net.trainable_params())(ids, target)
        _close(lt, lr_, f"step {step} loss")
        for p, gr, gt in zip(ref.trainable_params(), g_ref, g_tp):
            _close(gt, _grad_of(net, p.name, gr, coord), f"step {step} grad {p.name}")
        nn.SGD(ref.trainable_params(), learning_rate=0.5)(g_ref)
        nn.SGD(net.trainable_params(), learning_rate=0.5)(g_tp)


def prepare_and_loss_context_check(mesh):
    """PrepareModuleInput (Shard(0) -> Replicate, local) and PrepareModuleOutput (Replicate -> Shard(0)) on a
    plain cell; loss_parallel() routes mint cross_entropy on Shard(-1) logits; bad style arguments."""
    import mindspore as ms
    from mindspore import mint, nn
    from hyper_parallel import Replicate, Shard
    from hyper_parallel.platform.mindspore import dispatch as D
    from hyper_parallel.platform.mindspore.dtensor import DTensor
    from hyper_parallel.tp import PrepareModuleInputOutput, loss_parallel, parallelize_module
    from tests.st.mindspore.checks import _close, _local_of
    from hyper_parallel.core.spec import DTensorSpec
    coord = mesh.get_coordinate()

    class Scale(nn.Cell):
        """x * 2 + column sums (needs the whole batch)."""

        def construct(self, x):
            assert isinstance(x, ms.Tensor) and tuple(x.shape) == (4, 3), (type(x), x.shape)
            return x * 2 + x.sum(0, keepdims=True)

    cell = parallelize_module(Scale(), mesh, PrepareModuleInputOutput(
        input_layouts=Shard(0), desired_input_layouts=Replicate(), use_local_input=True,
        output_layouts=Replicate(), desired_output_layouts=Shard(0)))
    full = ms.Tensor(np.arange(12, dtype=np.float32).reshape(4, 3))
    spec = DTensorSpec(mesh, (Shard(0),), (4, 3))
    local_in = _local_of(full, spec, coord)
    out = cell(local_in)
    _close(out, _local_of(full * 2 + full.sum(0, keepdims=True), spec, coord), "prepare input/output forward")
    g = ms.grad(lambda a: (cell(a) ** 2).sum())(local_in)
    g_ref = ms.grad(lambda a: ((a * 2 + a.sum(0, keepdims=True)) ** 2).sum())(full)
    _close(g, _local_of(g_ref, spec, coord), "prepare input/output gradient")
    rng = np.random.default_rng(6)
    logits = ms.Tensor(rng.standard_normal((5, 6)).astype(np.float32))
    tgt = ms.Tensor(np.array([0, 5, 2, 3, 1], np.int32))
    lspec = DTensorSpec(mesh, (Shard(1),), (5, 6))
    with loss_parallel():
        got = D.mint.nn.functional.cross_entropy(DTensor(_local_of(logits, lspec, coord), lspec), tgt,
                                                 label_smoothing=0.1)
    want = ms.ops.cross_entropy(logits, tgt, label_smoothing=0.1)
    _close(got, want, "loss_parallel cross_entropy with label smoothing")
    try:
        _rowwise().apply(nn.Embedding(10, 4, use_one_hot=True), mesh)
    except ValueError as exc:
        assert "use_one_hot" in str(exc), exc
    else:
        raise AssertionError("a one-hot Embedding must be refused")


def _rowwise():
    from hyper_parallel.tp import RowwiseParallel
    return RowwiseParallel()


TP_CHECKS = {"tp sequence parallel + vocab embedding + loss parallel, 2 SGD steps": sp_loss_parallel_check,
             "tp PrepareModuleInput/Output and loss_parallel()": prepare_and_loss_context_check}


def run_tp_only():
    """Entry for running these checks alone (development): one launch of 2 ranks."""
    from tests.st.mindspore.common import record, run_group, setup_mesh
    mesh = setup_mesh()
    results = {}
    mint_rule_checks(mesh, lambda name, fn: record(results, name, fn))
    run_group(results, TP_CHECKS, mesh)
    return {"results": results}
