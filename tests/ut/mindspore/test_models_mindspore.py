# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT (one process, torch and MindSpore side by side): the MindSpore Qwen3, Qwen3-MoE and DeepSeek-V3 (and the
MoE Llama) against the torch models. Their own init equals torch's ``init_parameters`` for the seed bit for bit
(no torch needed on the MindSpore side); logits, loss and every gradient (the Qwen3-MoE auxiliary loss's
included) equal torch's to 1e-5 on those weights; a Hugging Face folder written from the torch model loads
into the MindSpore model through the same adapter and gives the torch logits; lazy construction then
``init_parameters`` gives the same weights, and a block of a sharded parameter is the slice of the full one."""
import numpy as np
import pytest

TOL = dict(rtol=1e-5, atol=1e-5)
MODELS = ["qwen3", "qwen3_moe", "deepseek_v3"]


def _pair(name, seed=3):
    import mindspore as ms
    from hyper_parallel.models import get_model_spec, init_parameters
    ms.set_device("CPU")
    cfg = get_model_spec(name).config("debug")
    tmodel = init_parameters(get_model_spec(name).build("debug"), seed=seed)
    mmodel = get_model_spec(name, backend="mindspore").model_cls(cfg, seed=seed)
    return tmodel, mmodel


def _ids(cfg, seed=0, shape=(2, 13)):
    return np.random.default_rng(seed).integers(0, cfg.vocab_size, shape)


@pytest.mark.parametrize("name", MODELS)
def test_own_init_logits_loss_gradients_and_hf_folder_equal_torch(name, tmp_path):
    """Init, logits, loss and gradients; then a Hugging Face folder written from the torch model (sharded, with
    an index) loads into a fresh MindSpore model through the same adapter and gives the torch logits."""
    import mindspore as ms
    import torch
    tmodel, mmodel = _pair(name)
    tparams = dict(tmodel.named_parameters())
    params = mmodel.trainable_params()
    assert sorted(p.name for p in params) == sorted(tparams)
    for p in params:  # the MindSpore init is torch's init_parameters, bit for bit
        np.testing.assert_array_equal(p.asnumpy(), tparams[p.name].detach().numpy(), err_msg=p.name)
    ids = _ids(mmodel.config)
    x, y = ids[:, :-1], ids[:, 1:].copy()
    y[1, 4] = -100
    mx, my = ms.Tensor(x.astype(np.int32)), ms.Tensor(y.astype(np.int32))
    np.testing.assert_allclose(mmodel(mx).asnumpy(), tmodel(torch.tensor(x)).detach().numpy(), **TOL)
    loss, grads = ms.value_and_grad(lambda a, b: type(mmodel).loss(mmodel(a), b), None, params)(mx, my)
    tloss = type(tmodel).loss(tmodel(torch.tensor(x)), torch.tensor(y))
    tloss.backward()
    np.testing.assert_allclose(float(loss.asnumpy()), tloss.item(), **TOL)
    for p, g in zip(params, grads):
        want = tparams[p.name].grad
        assert want is not None, p.name
        np.testing.assert_allclose(g.asnumpy(), want.numpy(), err_msg=p.name, **TOL)
    _hf_folder_case(name, tmodel, mmodel, tmp_path / name)


def _hf_folder_case(name, tmodel, mmodel, folder):
    import mindspore as ms
    import torch
    from hyper_parallel import checkpoint as ckpt
    ckpt.save_hf(tmodel, str(folder), get_adapter(name, tmodel.config), max_file_bytes=200_000)
    assert len(list(folder.glob("model-*.safetensors"))) > 1  # sharded, with an index
    fresh = type(mmodel)(mmodel.config, seed=11)
    ids = _ids(mmodel.config, 1, (2, 9))
    want = tmodel(torch.tensor(ids)).detach().numpy()
    assert np.abs(fresh(ms.Tensor(ids.astype(np.int32))).asnumpy() - want).max() > 1e-3  # other weights yet
    ckpt.load_hf(fresh, str(folder))  # the adapter of the folder's model_type, on the MindSpore backend
    np.testing.assert_allclose(fresh(ms.Tensor(ids.astype(np.int32))).asnumpy(), want, **TOL)


def get_adapter(name, config):
    from hyper_parallel.models import get_model_spec
    return get_model_spec(name).state_dict_adapter(config)


def test_lazy_construction_and_sharded_blocks_give_the_same_weights():
    import mindspore as ms
    from hyper_parallel.models import get_model_spec
    from hyper_parallel.models._mindspore.init import init_empty_weights, init_parameters, parameter_values
    ms.set_device("CPU")
    spec = get_model_spec("deepseek_v3", backend="mindspore")
    eager = spec.model_cls(spec.flavors["debug"], seed=7)
    with init_empty_weights():
        lazy = spec.model_cls(spec.flavors["debug"])
    assert all(p.has_init for _, p in lazy.parameters_and_names())  # nothing allocated yet
    init_parameters(lazy, seed=7)
    want = {n: p.asnumpy() for n, p in eager.parameters_and_names()}
    for n, p in lazy.parameters_and_names():
        np.testing.assert_array_equal(p.asnumpy(), want[n], err_msg=n)
    name = "model.layers.1.mlp.experts.gate_proj"  # [E, hidden, dim]: expert-parallel ranks hold blocks of E
    full = want[name]
    for rank in range(4):
        block = parameter_values(name, "normal", full.shape, (2,) + full.shape[1:], (2 * rank, 0, 0), seed=7)
        np.testing.assert_array_equal(block, full[2 * rank:2 * rank + 2])
    col = parameter_values("lm_head.weight", "normal", want["lm_head.weight"].shape, (128, 64), (128, 0), seed=7)
    np.testing.assert_array_equal(col, want["lm_head.weight"][128:])
    with pytest.raises(ValueError, match="init kind 'uniform'"):
        parameter_values("x", "uniform", (2,))


def test_clear_errors():
    from hyper_parallel.models import get_model_spec
    spec = get_model_spec("deepseek_v3", backend="mindspore")
    assert "debug_mtp" not in spec.flavors and "debug" in spec.flavors
    with pytest.raises(ValueError, match="multi-token-prediction layers are torch-only"):
        spec.model_cls(get_model_spec("deepseek_v3").flavors["debug_mtp"])
    with pytest.raises(TypeError, match="expected a Qwen3Config"):
        get_model_spec("qwen3", backend="mindspore").model_cls(get_model_spec("llama3").flavors["debug"])
    model = get_model_spec("qwen3", backend="mindspore").build("debug")
    with pytest.raises(ValueError, match=r"load_numpy: missing \['model.norm.weight'\]"):
        model.load_numpy({n: p.asnumpy() for n, p in model.parameters_and_names() if n != "model.norm.weight"})
