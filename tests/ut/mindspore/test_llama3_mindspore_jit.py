# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT (one MindSpore process): ``jit_cells`` (each decoder layer under ``mindspore.jit``; the MindSpore trainer's
``training.compile`` compiles the whole forward and backward instead, checked in ``trainer_par_checks.py``) gives the
loss and every gradient of the PyNative model; a cell with a managed sub-cell is
refused naming it. (Named to run after ``test_kernels_reference.py``, which sets the device before any kernel.)"""
import mindspore as ms
import numpy as np
import pytest


def _grads(jit):
    from hyper_parallel.models import get_model_spec
    from hyper_parallel.platform.mindspore.runtime import jit_cells
    from hyper_parallel.trainer.models import build_model_config
    cfg = build_model_config("llama3", "debug", vocab_size=128, max_position_embeddings=32)
    model = get_model_spec("llama3", backend="mindspore").model_cls(cfg, seed=3)
    if jit:
        assert jit_cells(model.model.layers) == cfg.num_hidden_layers
    params = model.trainable_params()
    fn = ms.value_and_grad(lambda i, t: type(model).loss(model(i), t), None, params)
    b = np.random.default_rng(0).integers(0, 128, (2, 17)).astype(np.int32)
    loss, grads = fn(ms.Tensor(b[:, :-1]), ms.Tensor(b[:, 1:]))
    return float(loss.asnumpy()), [g.asnumpy() for g in grads], model


def test_jit_layers_equal_pynative_and_refusals():
    from hyper_parallel.platform.mindspore.runtime import jit_cells
    ref_loss, ref_grads, _ = _grads(False)
    loss, grads, model = _grads(True)
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-5, atol=1e-6)
    assert len(grads) == len(ref_grads)
    for a, b in zip(grads, ref_grads):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    layer = model.model.layers[0]
    layer.self_attn.q_proj.__dict__["_hp_param_specs"] = {}  # what a TP style / fully_shard records
    with pytest.raises(ValueError, match=r"jit_cells: .*self_attn\.q_proj"):
        jit_cells([layer])
