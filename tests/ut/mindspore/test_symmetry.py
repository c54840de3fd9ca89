# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Symmetry of the two backends: every backend-interface method (and every public DTensor name)
the torch backend implements must be implemented for MindSpore, or raise a clear
"not supported on MindSpore because ..." error. The gap lists are computed, printed and asserted."""
import inspect
from datetime import timedelta

import pytest

from hyper_parallel.platform.base import Platform

#: public DTensor names that exist only for torch, with the reason (asserted to be exactly the gap)
DTENSOR_TORCH_ONLY = {
    "__torch_function__": "MindSpore has no function-interception protocol; MindSpore ops reach the registry "
                          "through hyper_parallel.platform.mindspore.dispatch and the DTensor's Python operators",
}


def _public_methods(cls):
    return {name for name, _ in inspect.getmembers(cls, callable) if not name.startswith("_")}


def platform_gaps():
    """Methods implemented by TorchPlatform but not (re)implemented by MindSporePlatform."""
    from hyper_parallel.platform.mindspore.platform import MindSporePlatform
    from hyper_parallel.platform.torch.platform import TorchPlatform
    torch_impl = {m for m in _public_methods(TorchPlatform) if m in TorchPlatform.__dict__}
    return sorted(m for m in torch_impl if m not in MindSporePlatform.__dict__)


def dtensor_gaps():
    """Public (and protocol) names defined on the torch DTensor class but not on the MindSpore one."""
    from hyper_parallel.platform.mindspore.dtensor import DTensor as MsDTensor
    from hyper_parallel.platform.torch.dtensor import DTensor as TorchDTensor
    names = {n for n in TorchDTensor.__dict__ if not n.startswith("_") or n in ("__torch_function__", "__len__")}
    return sorted(n for n in names if not hasattr(MsDTensor, n))


def test_platform_interface_is_fully_implemented():
    from hyper_parallel.platform.mindspore.platform import MindSporePlatform
    abstract = sorted(getattr(MindSporePlatform, "__abstractmethods__", ()))
    assert not abstract, f"MindSporePlatform leaves abstract methods: {abstract}"
    gaps = platform_gaps()
    print("\nPlatform methods implemented for torch and not for MindSpore:", gaps or "none")
    assert gaps == [], f"Platform methods implemented for torch but not for MindSpore: {gaps}"
    base = {n for n in Platform.__dict__ if not n.startswith("_") and callable(Platform.__dict__[n])}
    assert base <= set(MindSporePlatform.__dict__), sorted(base - set(MindSporePlatform.__dict__))


def test_dtensor_api_gaps_are_exactly_the_explained_ones():
    gaps = dtensor_gaps()
    print("\nDTensor names on torch and not on MindSpore:", {g: DTENSOR_TORCH_ONLY.get(g, "UNEXPLAINED") for g in gaps})
    unexplained = sorted(set(gaps) - set(DTENSOR_TORCH_ONLY))
    assert gaps == sorted(DTENSOR_TORCH_ONLY), f"unexplained DTensor gaps: {unexplained}"


def test_unsupported_arguments_raise_the_clear_error():
    from hyper_parallel.platform.mindspore.platform import MindSporePlatform
    plat = MindSporePlatform()
    with pytest.raises(RuntimeError, match="not supported on MindSpore because"):
        plat.init_process_group("mccl", init_method="tcp://127.0.0.1:1234", timeout=timedelta(seconds=5))
    with pytest.raises(ValueError, match="expected mccl"):
        plat.init_process_group("ucc")
    with pytest.raises(RuntimeError, match="not initialised"):
        plat.get_rank()


def test_tp_styles_have_the_torch_names():
    """One set of TP classes for both backends: the MindSpore implementation applies the very style objects
    of ``hyper_parallel.tp`` (by their kind), so MindSpore has the torch names and signatures by construction."""
    import hyper_parallel.tp as tp
    import hyper_parallel.tp._mindspore.styles as ms_impl
    for name in ("ColwiseParallel", "RowwiseParallel", "parallelize_module", "ParallelStyle"):
        assert hasattr(tp, name), name
    for style in ("ColwiseParallel", "RowwiseParallel"):
        assert getattr(tp, style).kind in ms_impl.SUPPORTED, style
        sig = inspect.signature(getattr(tp, style))
        # torch's keywords, plus hyper-parallel's optional overlap="mc2" (default None: torch code runs unchanged)
        assert set(sig.parameters) == {"input_layouts", "output_layouts", "use_local_output", "overlap"}, \
            (style, set(sig.parameters))
        assert sig.parameters["overlap"].default is None
