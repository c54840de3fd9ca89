# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Plan templates that no committed op uses yet, exercised for real: the shared class of
``hyper_parallel/core/ops/rules/planned.py`` with the options ``dev`` writes for such a plan is registered in
place of the op's rule and run on 2 gloo ranks with ``check_op`` (forward and backward); the rule is put
back after.

* ``scan`` (``CombineScanRule``) with ``mul`` (cumprod) and ``logaddexp`` (logcumsumexp): the scan expand;
* ``coupled_dim`` (``CoupledDimRule``) without an expand (normalize gathering its dim).
"""
import pytest

from hyper_parallel.testing import multi_rank

from hp_agent.dist_op.plan import Plan
from hp_agent.dist_op.scaffold import planned_entry

DIM = {"dim_param": "dim", "dim_default": None}
PLANS = {
    "cumprod": ("torch.cumprod", "scan", {"scan_combine": "mul", "linear": False}, 1),
    "logcumsumexp": ("torch.logcumsumexp", "scan", {"scan_combine": "logaddexp", "linear": False}, 1),
    "normalize": ("torch.nn.functional.normalize", "coupled_dim", {"expand": None, "linear": False}, 2),
}


def _entry(key):
    op, template, deriv, position = PLANS[key]
    meta = {"op": op, "rule": {"template": template}, "options": {}, "derivation": {**deriv, "dim_param": "dim"},
            "dim_position": position, "dim_default": 1 if key == "normalize" else None, "expand_params": {}}
    return planned_entry(Plan(meta, ""))


def _calls(key):
    import torch
    import torch.nn.functional as F
    if key == "cumprod":
        return [lambda t: torch.cumprod(t, 0), lambda t: torch.cumprod(t, dim=1)]
    if key == "logcumsumexp":
        return [lambda t: torch.logcumsumexp(t, 0), lambda t: torch.logcumsumexp(t, 1)]
    return [lambda t: F.normalize(t, 2.0, 0), lambda t: F.normalize(t, dim=1)]


@multi_rank(world_size=2, timeout=600)
def _run(key, entry):
    """Worker body: swap the op's rule for the planned class, check parity, restore the rule."""
    import torch
    from hyper_parallel.core.ops.registry import get_registry, register_op
    from hyper_parallel.platform.torch.dispatch import clear_cache, install_registry
    from hyper_parallel.testing.op_parity import check_op
    name = PLANS[key][0]
    install_registry()
    old = get_registry().entries[name]
    try:
        register_op(name, entry["rule"], module=entry["module"], options=entry["options"], replace=True)
        clear_cache()
        for k, fn in enumerate(_calls(key)):
            for shape in ((4, 6), (5, 3)):
                torch.manual_seed(k)
                x = torch.rand(shape) + 0.5
                report = check_op(name, fn, [x])
                report.raise_if_failed()
                assert not report.rejected, report.rejected[:2]
                # the scan keeps every shard (R, S(0), S(1)); the gathering rule only the other dim's
                want = 3 if PLANS[key][1] == "scan" else 2
                assert report.native == want, (name, shape, report.native)
    finally:
        register_op(name, old.rule, module=old.module, options=old.options, replace=True)
        clear_cache()


@pytest.mark.parametrize("key", sorted(PLANS))
def test_planned_class_matches_single_device(key):
    entry = _entry(key)
    assert entry["module"] == "hyper_parallel.core.ops.rules.planned"
    _run(key=key, entry=entry)
