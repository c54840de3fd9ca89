# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT (one process, no cluster): the MindSpore Llama 3 against the torch one on the same weights (logits,
loss and every gradient, fp32), its registry entry, its clear errors, and clipping by the global norm of
MindSpore gradients. The TP + FSDP run is checked in ``tests/st/mindspore/test_trainer_mindspore.py``."""
import dataclasses

import numpy as np
import pytest

TOL = dict(rtol=1e-5, atol=1e-5)


def _pair(vocab=300, seed=3):
    import mindspore as ms
    import torch
    from hyper_parallel.models import get_model_spec
    ms.set_device("CPU")
    cfg = dataclasses.replace(get_model_spec("llama3").flavors["debug"], vocab_size=vocab)
    torch.manual_seed(seed)
    tmodel = get_model_spec("llama3").model_cls(cfg)
    mmodel = get_model_spec("llama3", backend="mindspore").model_cls(cfg)
    mmodel.load_numpy({k: v.detach().numpy() for k, v in tmodel.state_dict().items()})
    return tmodel, mmodel


def test_logits_loss_and_gradients_equal_torch_on_the_same_weights():
    import mindspore as ms
    import torch
    tmodel, mmodel = _pair()
    ids = np.random.default_rng(0).integers(0, 300, (2, 17))
    ids[1, 5] = -100  # an ignored label position (only in the labels below)
    x, y = np.abs(ids[:, :-1]), ids[:, 1:]
    logits = mmodel(ms.Tensor(x.astype(np.int32))).asnumpy()
    tlogits = tmodel(torch.tensor(x))
    np.testing.assert_allclose(logits, tlogits.detach().numpy(), **TOL)
    params = mmodel.trainable_params()
    loss, grads = ms.value_and_grad(lambda a, b: type(mmodel).loss(mmodel(a), b), None, params)(
        ms.Tensor(x.astype(np.int32)), ms.Tensor(y.astype(np.int32)))
    tloss = type(tmodel).loss(tlogits, torch.tensor(y))
    tloss.backward()
    np.testing.assert_allclose(float(loss.asnumpy()), tloss.item(), **TOL)
    tgrads = dict(tmodel.named_parameters())
    assert sorted(p.name for p in params) == sorted(tgrads)
    for p, g in zip(params, grads):
        np.testing.assert_allclose(g.asnumpy(), tgrads[p.name].grad.numpy(), err_msg=p.name, **TOL)


def test_registry_entry_and_clear_errors():
    from hyper_parallel.models import get_model_spec
    from hyper_parallel.models.llama3 import LlamaConfig
    spec = get_model_spec("llama3", backend="mindspore")
    assert spec.config_cls is LlamaConfig and "debug" in spec.flavors and "debug_moe" in spec.flavors
    assert type(spec.model_cls).__module__.startswith("mindspore") or "mindspore" in spec.model_cls.__module__
    assert get_model_spec("llama3") is not spec and get_model_spec("llama3").model_cls.__module__.endswith("model")
    with pytest.raises(KeyError, match="model 'qwen3_5' has no mindspore implementation"):
        get_model_spec("qwen3_5", backend="mindspore")
    with pytest.raises(ValueError, match=r"load_numpy: missing \['lm_head.weight'\]"):
        model = spec.model_cls(spec.flavors["debug"])
        model.load_numpy({n: p.asnumpy() for n, p in model.parameters_and_names() if n != "lm_head.weight"})


def test_own_init_is_seeded_and_layout_free():
    from hyper_parallel.models import get_model_spec
    spec = get_model_spec("llama3", backend="mindspore")
    a, b = spec.model_cls(spec.flavors["debug"], seed=1), spec.model_cls(spec.flavors["debug"], seed=1)
    c = spec.model_cls(spec.flavors["debug"], seed=2)
    wa = {n: p.asnumpy() for n, p in a.parameters_and_names()}
    for n, p in b.parameters_and_names():
        np.testing.assert_array_equal(p.asnumpy(), wa[n])
    q = wa["model.layers.0.self_attn.q_proj.weight"]
    assert abs(float(q.std()) - 0.02) < 0.004 and (wa["model.norm.weight"] == 1).all()
    assert not np.array_equal(dict(c.parameters_and_names())["lm_head.weight"].asnumpy(), wa["lm_head.weight"])


def test_clip_grad_norm_by_the_global_norm():
    import mindspore as ms
    from hyper_parallel.optim._mindspore.clip import clip_grad_norm, total_grad_norm
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal(5).astype(np.float32)]
    params = [ms.Parameter(ms.Tensor(a), name=f"p{i}") for i, a in enumerate(arrays)]
    grads = [ms.Tensor(a * 2) for a in arrays]
    want = float(np.sqrt(sum(((a.astype(np.float64) * 2) ** 2).sum() for a in arrays)))
    assert total_grad_norm(params, grads) == pytest.approx(want, rel=1e-6)
    clipped, norm = clip_grad_norm(params, grads, 1.0)
    assert norm == pytest.approx(want, rel=1e-6)
    for g, a in zip(clipped, arrays):
        np.testing.assert_allclose(g.asnumpy(), a * 2 / (want + 1e-6), rtol=1e-5)
    same, _ = clip_grad_norm(params, grads, 1e6)
    assert all(s is g for s, g in zip(same, grads))
    with pytest.raises(ValueError, match="max_norm"):
        clip_grad_norm(params, grads, 0.0)


def test_a_torch_saved_checkpoint_loads_and_gives_the_torch_logits(tmp_path):
    """The shared checkpoint format: torch saves its Llama, the MindSpore Llama (other init) loads it."""
    import mindspore as ms
    import torch
    from hyper_parallel import checkpoint as ckpt
    from hyper_parallel.models import get_model_spec
    cfg = dataclasses.replace(get_model_spec("llama3").flavors["debug"], vocab_size=300)
    torch.manual_seed(5)
    tmodel = get_model_spec("llama3").model_cls(cfg)
    ckpt.save({"model": ckpt.ModelState(tmodel)}, checkpoint_id=str(tmp_path / "torch"))
    mmodel = get_model_spec("llama3", backend="mindspore").model_cls(cfg, seed=9)
    ids = np.random.default_rng(1).integers(0, 300, (2, 12))
    want = tmodel(torch.tensor(ids)).detach().numpy()
    assert np.abs(mmodel(ms.Tensor(ids.astype(np.int32))).asnumpy() - want).max() > 1e-3  # not yet the same
    ckpt.load({"model": ckpt.ModelState(mmodel)}, checkpoint_id=str(tmp_path / "torch"))
    np.testing.assert_allclose(mmodel(ms.Tensor(ids.astype(np.int32))).asnumpy(), want, **TOL)
