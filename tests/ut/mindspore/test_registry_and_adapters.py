# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT (one process, no cluster): the MindSpore registry entries, backend selection, lazy import and
the local (non-communicating) adapters with their adjoints."""
import subprocess
import sys

import numpy as np
import pytest


def _ms():
    import mindspore as ms
    ms.set_device("CPU")
    return ms


def test_import_hyper_parallel_never_imports_mindspore():
    code = ("import sys, hyper_parallel as hp; hp.Shard(0); hp.Layout; "
            "from hyper_parallel.core.ops.registry import get_registry; get_registry(); "
            "assert 'mindspore' not in sys.modules, 'mindspore imported'; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr[-2000:]


def test_every_mindspore_registry_name_resolves_and_builds_its_rule():
    from hyper_parallel.core.ops.registry import get_registry
    from hyper_parallel.platform.mindspore import dispatch as D
    reg = get_registry()
    names = [n for n in reg.entries if n.startswith("mindspore.")]
    assert len(names) >= 30
    for name in names:
        assert callable(D.resolve_mindspore_name(name)), name
        reg.entries[name].rule_instance()
    assert D.registered_names() == sorted(names)


def test_each_dispatcher_ignores_the_other_frontend():
    from hyper_parallel.platform.mindspore import dispatch as D
    from hyper_parallel.platform.torch.dispatch import resolve_torch_name
    assert D.resolve_mindspore_name("torch.add") is None
    assert D.resolve_mindspore_name("Tensor.add_") is None
    assert resolve_torch_name("mindspore.mint.add") is None
    from hyper_parallel.core.ops.rule import RuleError
    with pytest.raises(RuleError, match="does not exist in mindspore"):
        D.resolve_mindspore_name("mindspore.mint.no_such_op")


def test_backend_selection_by_tensor_type():
    ms = _ms()
    from hyper_parallel.platform import get_platform, platform_for
    from hyper_parallel.platform.mindspore.platform import MindSporePlatform
    t = ms.Tensor(np.ones((2, 2), np.float32))
    assert isinstance(platform_for(t), MindSporePlatform)
    assert get_platform("mindspore") is platform_for(t)
    import hyper_parallel.core.api as api
    assert platform_for(t).name == "mindspore"
    with pytest.raises(TypeError, match="expected a torch or mindspore tensor"):
        api.distribute_tensor([1, 2], None)
    assert get_platform("mindspore").dtensor_type.__module__ == "hyper_parallel.platform.mindspore.dtensor"


def test_plain_tensors_fall_through_to_mindspore():
    ms = _ms()
    from mindspore import mint
    from hyper_parallel.platform.mindspore import dispatch as D
    x = ms.Tensor(np.array([[1.0, -2.0]], np.float32))
    np.testing.assert_allclose(D.mint.add(x, x).asnumpy(), [[2.0, -4.0]])
    np.testing.assert_allclose(D.mint.nn.functional.relu(x).asnumpy(), [[1.0, 0.0]])
    np.testing.assert_allclose(D.call(mint.abs, x).asnumpy(), [[1.0, 2.0]])
    np.testing.assert_allclose(D.mint.matmul(x, x.T).asnumpy(), [[5.0]])  # unregistered, but no DTensor


def _group(n=1):
    from hyper_parallel.platform.mindspore.collectives import MsGroup
    return MsGroup("hp_test", range(n), False)


def test_local_adapters_forward_and_adjoint():
    ms = _ms()
    from hyper_parallel.platform.mindspore import collectives as C
    x = ms.Tensor(np.arange(10, dtype=np.float32).reshape(5, 2))
    np.testing.assert_allclose(C.chunk_of(x, 0, (3, 2), 1).asnumpy(), x.asnumpy()[3:])
    assert C.chunk_of(x, 0, (5,), 0) is x
    g1 = _group(1)
    # one-rank groups: collectives are identities; adjoints still apply
    np.testing.assert_allclose(C.raw_all_gather(x, g1, 0, (5,)).asnumpy(), x.asnumpy())
    np.testing.assert_allclose(C.raw_all_reduce(x, "avg", g1).asnumpy(), x.asnumpy())
    grad = ms.grad(lambda a: (C.MakePartial.apply(a, "avg", 1, 2) * 3.0).sum())(x)
    np.testing.assert_allclose(grad.asnumpy(), np.full((5, 2), 6.0))  # x n for avg
    part = C.MakePartial.apply(x, "sum", 1, 2)
    np.testing.assert_allclose(part.asnumpy(), np.zeros((5, 2)))
    grad = ms.grad(lambda a: (C.Chunk.apply(a, 0, (5,), 0, g1) * 2.0).sum())(x)
    np.testing.assert_allclose(grad.asnumpy(), np.full((5, 2), 2.0))  # gather of the shard gradient (1 rank)
    grad = ms.grad(lambda a: (C.GradAllReduce.apply(a, g1) * 4.0).sum())(x)
    np.testing.assert_allclose(grad.asnumpy(), np.full((5, 2), 4.0))
    with pytest.raises(ValueError, match="expected sum, avg, max or min"):
        C.raw_all_reduce(x, "prod", g1)


def test_padding_keeps_dtype_and_trims():
    ms = _ms()
    from hyper_parallel.platform.mindspore import collectives as C
    x = ms.Tensor(np.ones((2, 3), np.float32))
    padded = C._pad_to(x, 0, 4)  # pylint: disable=protected-access
    assert tuple(padded.shape) == (4, 3) and padded.dtype == x.dtype
    np.testing.assert_allclose(padded.asnumpy()[2:], 0.0)
    assert C._pad_to(x, 1, 3) is x  # pylint: disable=protected-access


def test_tp_style_errors_are_clear():
    _ms()
    from mindspore import nn
    from hyper_parallel.tp import ColwiseParallel, RowwiseParallel, parallelize_module

    class _Mesh:  # the 1-D mesh checks only read ndim
        ndim = 1

    with pytest.raises(TypeError, match="supports nn.Dense and mint.nn.Linear"):
        ColwiseParallel().apply(nn.ReLU(), _Mesh())
    with pytest.raises(ValueError, match="fused activation"):
        RowwiseParallel().apply(nn.Dense(4, 4, activation="relu"), _Mesh())
    with pytest.raises(ValueError, match="matches no sub-cell"):
        parallelize_module(nn.SequentialCell([nn.Dense(2, 2)]), _Mesh(), {"fc9": ColwiseParallel()})
    with pytest.raises(TypeError, match="expected a ParallelStyle or a dict"):
        parallelize_module(nn.Dense(2, 2), _Mesh(), ["fc1"])


def test_launcher_rejects_bad_targets():
    from hyper_parallel.testing.mindspore_launch import launch
    with pytest.raises(ValueError, match="module:function"):
        launch("no_colon")
    with pytest.raises(ValueError, match="positive number of ranks"):
        launch("a:b", world_size=0)
