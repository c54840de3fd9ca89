# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""MindSpore MoE on 2 ranks (inside launch 2): expert parallel (EP = 2, dropless uneven all-to-all) vs one
process — forward, input gradient and every parameter gradient — for top-1 and top-2 with shared experts,
a skewed router (every token to one expert: one rank's experts get zero tokens), the expert-bias rule
(identical on both ranks) and the refused configurations."""
import numpy as np

TOL = dict(rtol=1e-4, atol=1e-5)


def _moe(top_k, shared, load_balance=None):
    import mindspore as ms
    from hyper_parallel.moe import MoEConfig
    from hyper_parallel.moe._mindspore.moe import MoE
    ms.set_seed(17)
    return MoE(MoEConfig(num_experts=4, top_k=top_k, dim=8, hidden_dim=6, num_shared_experts=shared,
                         load_balance=load_balance))


def _grads(model, x, w):
    import mindspore as ms
    params = model.trainable_params()
    fn = lambda a: (model(a) * w).sum()  # noqa: E731
    (out_loss, grads) = ms.value_and_grad(fn, 0, params)(x)
    return float(out_loss.asnumpy()), grads[0], {p.name: g for p, g in zip(params, grads[1])}


def _ep_case(mesh, top_k, shared, skew):
    import mindspore as ms
    from hyper_parallel.moe._mindspore.moe import expert_parallel
    from tests.st.mindspore.checks import _local_of
    from hyper_parallel.optim._mindspore.optimizers import parameter_specs
    me = mesh.get_coordinate()[0]
    rng = np.random.default_rng(5)
    xs = [ms.Tensor(rng.standard_normal((2, 3, 8)).astype(np.float32)) for _ in range(2)]
    ws = [ms.Tensor(rng.standard_normal((2, 3, 8)).astype(np.float32)) for _ in range(2)]
    ref, net = _moe(top_k, shared, "expert_bias" if skew else None), _moe(top_k, shared, "expert_bias" if skew else None)
    if skew:  # every token to expert 3 (rank 1's second expert): rank 0's experts get no token
        for m in (ref, net):
            m.expert_bias = ms.Tensor(np.array([0, 0, 0, 100.0], np.float32))
    expert_parallel(net, mesh)
    specs = parameter_specs(net)
    loss, gx, g = _grads(net, xs[me], ws[me])
    want = [_grads(ref, xs[r], ws[r]) for r in range(2)]
    np.testing.assert_allclose(loss, want[me][0], err_msg="loss", **TOL)
    np.testing.assert_allclose(gx.asnumpy(), want[me][1].asnumpy(), err_msg="input grad", **TOL)
    for name, gr in g.items():
        if name in specs:  # expert weights: both ranks' tokens contribute to this rank's experts
            full = want[0][2][name] + want[1][2][name]
            np.testing.assert_allclose(gr.asnumpy(), _local_of(full, specs[name], (me,)).asnumpy(), err_msg=name,
                                       **TOL)
        else:  # router and shared experts: this rank's tokens only (data parallel reduces them)
            np.testing.assert_allclose(gr.asnumpy(), want[me][2][name].asnumpy(), err_msg=name, **TOL)
    return net


def moe_ep_check(mesh):
    """EP=2 for top-1, top-2 + shared experts, and a skewed top-1 router (rank 0's experts idle)."""
    for top_k, shared, skew in ((1, 0, False), (2, 1, False), (1, 1, True)):
        try:
            _ep_case(mesh, top_k, shared, skew)
        except AssertionError as exc:
            raise AssertionError(f"top_k={top_k} shared={shared} skew={skew}: {exc}") from exc


def moe_bias_and_errors_check(mesh):
    """update_expert_bias sums the counts over the ranks and moves the bias identically; bad configs."""
    import mindspore as ms
    from hyper_parallel.moe import MoEConfig
    from hyper_parallel.moe._mindspore.moe import MoE, expert_parallel, update_expert_bias
    from hyper_parallel.platform.mindspore.collectives import raw_all_gather
    net = _moe(1, 0, "expert_bias")
    expert_parallel(net, mesh)
    me = mesh.get_coordinate()[0]
    x = ms.Tensor(np.random.default_rng(30 + me).standard_normal((5, 8)).astype(np.float32))
    net(x)
    mine = net.tokens_per_expert.copy()
    assert mine.sum() == 5, mine
    loads = update_expert_bias(net, mesh.get_group(0))
    both = raw_all_gather(ms.Tensor(mine.astype(np.float32).reshape(1, -1)), mesh.get_group(0), 0, (1, 1)).asnumpy()
    assert loads == list(both.sum(0)), (loads, both)
    mean = sum(loads) / 4
    rate = net.config.bias_update_rate  # the configured gamma (MoEConfig's default)
    assert rate > 0
    want = [rate * np.sign(mean - v) for v in loads]
    np.testing.assert_allclose(net.expert_bias.asnumpy(), want, rtol=0, atol=1e-9)
    biases = raw_all_gather(net.expert_bias.reshape(1, -1), mesh.get_group(0), 0, (1, 1)).asnumpy()
    assert np.array_equal(biases[0], biases[1]), biases
    assert not net.tokens_per_expert.any()
    # group-limited routing and the batch-level auxiliary loss are supported (tests/ut/mindspore/test_models_mindspore.py)
    for kwargs, text in (({"capacity_factor": 1.0}, "dropping"), ({"z_loss_coeff": 0.1}, "z-loss"),
                         ({"load_balance": "aux_loss", "aux_loss_level": "sequence"}, "sequence-level auxiliary loss")):
        try:
            MoE(MoEConfig(num_experts=4, top_k=1, dim=8, hidden_dim=6, **kwargs))
        except ValueError as exc:
            assert text in str(exc), exc
        else:
            raise AssertionError(f"MoE({kwargs}) must be refused on MindSpore")
    try:
        expert_parallel(MoE(MoEConfig(num_experts=3, top_k=1, dim=8, hidden_dim=6)), mesh)
    except ValueError as exc:
        assert "3" in str(exc), exc
    else:
        raise AssertionError("3 experts over 2 ranks must be refused")


MOE_CHECKS = {"moe ep=2 top-1, top-2 + shared, skewed top-1 router": moe_ep_check,
              "moe expert bias update and refused configs": moe_bias_and_errors_check}


def run_moe_only():
    """Entry for running these checks alone (development): one launch of 2 ranks."""
    from tests.st.mindspore.common import run_only
    return run_only(MOE_CHECKS)
