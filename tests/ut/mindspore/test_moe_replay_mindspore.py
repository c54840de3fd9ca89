# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT (one process): a MindSpore MoE block counts the tokens it routes (``tokens_per_expert``, the expert-bias
balancing's statistics) in a forward, and not in a forward that runs again what already ran
(``hyper_parallel.platform.mindspore.runtime.replaying()``: a MindSpore pipeline stage's recomputed forward in its
backward, its shape inference on placeholder inputs), whose output is the same."""
import numpy as np


def test_replayed_forward_routes_the_same_and_counts_nothing():
    import mindspore as ms
    from hyper_parallel.moe import MoEConfig
    from hyper_parallel.moe._mindspore.moe import MoE
    from hyper_parallel.platform.mindspore.runtime import is_replaying, replaying
    ms.set_device("CPU")
    ms.set_seed(3)
    moe = MoE(MoEConfig(num_experts=4, top_k=2, dim=8, hidden_dim=6, score_func="sigmoid",
                        load_balance="expert_bias"))
    x = ms.Tensor(np.random.default_rng(0).standard_normal((5, 8)).astype(np.float32))
    out = moe(x).asnumpy()
    counts = moe.tokens_per_expert.copy()
    assert counts.sum() == 5 * 2, counts
    assert not is_replaying()
    with replaying():
        with replaying():  # nested: still replaying until the outer block closes
            assert is_replaying()
        assert is_replaying()
        again = moe(x).asnumpy()
    assert not is_replaying()
    np.testing.assert_array_equal(again, out)
    np.testing.assert_array_equal(moe.tokens_per_expert, counts)
    moe(x)
    np.testing.assert_array_equal(moe.tokens_per_expert, 2 * counts)
