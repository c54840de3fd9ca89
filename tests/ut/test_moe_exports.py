# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT: ``hyper_parallel.moe`` exports the MindSpore MoE layers lazily (``MindSporeMoE``, ...), and
``update_expert_bias`` / ``expert_parallel`` pick the backend from the model's class."""
import subprocess
import sys
import textwrap

import numpy as np
import pytest

MS_NAMES = ("MindSporeMoE", "MindSporeTokenChoiceTopKRouter", "MindSporeGroupedExperts", "MindSporeFeedForward")


def test_import_without_any_framework_lists_the_mindspore_names():
    code = textwrap.dedent(f"""
        import sys
        sys.modules["torch"] = None
        sys.modules["mindspore"] = None
        import hyper_parallel.moe as moe
        names = {MS_NAMES!r} + ("expert_parallel", "update_expert_bias")
        assert all(n in moe.__all__ and n in dir(moe) for n in names), moe.__all__
        assert moe.update_expert_bias.__module__ == "hyper_parallel.moe.entry"
        try:
            moe.update_expert_bias(object())
        except TypeError as exc:
            assert "update_expert_bias(model)" in str(exc) and "object" in str(exc), exc
        else:
            raise AssertionError("a plain object must be refused")
        try:
            moe.MindSporeMoE
        except ImportError as exc:
            assert "mindspore" in str(exc), exc
        else:
            raise AssertionError("MindSporeMoE needs MindSpore")
        loaded = [m for m in ("torch", "mindspore") if sys.modules.get(m) is not None]
        assert not loaded, loaded
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]


def test_mindspore_names_are_the_cells_and_update_expert_bias_dispatches():
    from mindspore import nn
    import hyper_parallel.moe as moe
    from hyper_parallel.moe._mindspore import moe as ms_moe
    assert moe.MindSporeMoE is ms_moe.MoE and moe.MindSporeFeedForward is ms_moe.FeedForward
    assert moe.MindSporeGroupedExperts is ms_moe.GroupedExperts
    assert moe.MindSporeTokenChoiceTopKRouter is ms_moe.TokenChoiceTopKRouter
    cell = moe.MindSporeMoE(moe.MoEConfig(num_experts=4, top_k=1, dim=4, hidden_dim=8, load_balance="expert_bias",
                                          bias_update_rate=0.5))
    assert isinstance(cell, nn.Cell)
    cell.tokens_per_expert = np.array([3, 1, 0, 4], np.int64)
    loads = moe.update_expert_bias(cell)  # one process: no group, the local loads
    assert loads == [3.0, 1.0, 0.0, 4.0]
    # mean 2: experts above it lose 0.5, below it gain 0.5
    np.testing.assert_allclose(cell.expert_bias.asnumpy(), [-0.5, 0.5, 0.5, -0.5])
    assert not cell.tokens_per_expert.any()


def test_torch_model_goes_to_the_torch_balance_and_expert_parallel_refuses_it():
    import torch
    import hyper_parallel.moe as moe
    model = torch.nn.Sequential(moe.MoE(moe.MoEConfig(num_experts=4, top_k=1, dim=4, hidden_dim=8,
                                                      load_balance="expert_bias", bias_update_rate=0.5)))
    layer = model[0]
    with torch.no_grad():
        layer.tokens_per_expert.copy_(torch.tensor([3, 1, 0, 4], dtype=layer.tokens_per_expert.dtype))
    loads = moe.update_expert_bias(model)
    assert loads == [[3, 1, 0, 4]] or loads == [[3.0, 1.0, 0.0, 4.0]], loads
    torch.testing.assert_close(layer.expert_bias.float(), torch.tensor([-0.5, 0.5, 0.5, -0.5]))
    with pytest.raises(TypeError, match="ExpertParallel"):
        moe.expert_parallel(layer, None)
