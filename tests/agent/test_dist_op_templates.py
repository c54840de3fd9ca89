# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Rule templates that no committed op uses yet, exercised for real: rendered, imported and run on 2 gloo
ranks with ``check_op`` (forward and backward) in place of the registered rule, which is put back after.

* ``rule_scan.py.j2`` with ``mul`` (cumprod) and ``logaddexp`` (logcumsumexp): the scan expand;
* ``rule_coupled_dim.py.j2`` without an expand (normalize gathering its dim).
"""
import sys

import pytest

from hyper_parallel.testing import multi_rank

from hp_agent.dist_op.render import render
from hp_agent.dist_op.scaffold import IDENTITIES

BASE = {"names": ["x"], "dim_param": "dim", "dim_default": "None", "linear": False, "shape_rule": "same",
        "plan_path": "plans/x.md", "expand_params": {}}
VARIANTS = {
    "cumprod": ("rule_scan.py.j2", {"cls": "CumprodScan", "combine": "mul", "dim_position": 1, "expand": "scan"}),
    "logcumsumexp": ("rule_scan.py.j2", {"cls": "LogcumsumexpScan", "combine": "logaddexp", "dim_position": 1,
                                         "expand": "scan"}),
    "normalize": ("rule_coupled_dim.py.j2", {"cls": "NormalizeGather", "dim_position": 2, "dim_default": "1",
                                             "expand": None, "combine": None}),
}
OPS = {"cumprod": "torch.cumprod", "logcumsumexp": "torch.logcumsumexp", "normalize": "torch.nn.functional.normalize"}


def _write(tmp_path, key):
    template, extra = VARIANTS[key]
    ctx = dict(BASE, **extra)
    ctx["identity"] = IDENTITIES.get(ctx.get("combine") or "", "0.0")
    text = render(template, **ctx)
    compile(text, f"tpl_{key}.py", "exec")
    (tmp_path / f"tpl_{key}.py").write_text(text, encoding="utf-8")
    return ctx["cls"]


def _calls(key):
    import torch
    import torch.nn.functional as F
    if key == "cumprod":
        return [lambda t: torch.cumprod(t, 0), lambda t: torch.cumprod(t, dim=1)]
    if key == "logcumsumexp":
        return [lambda t: torch.logcumsumexp(t, 0), lambda t: torch.logcumsumexp(t, 1)]
    return [lambda t: F.normalize(t, 2.0, 0), lambda t: F.normalize(t, dim=1)]


def _parity_with_template(key, cls, folder):
    """Worker body: swap the op's rule for the rendered class, check parity, restore the rule."""
    import torch
    from hyper_parallel.core.ops.registry import get_registry, register_op
    from hyper_parallel.platform.torch.dispatch import clear_cache, install_registry
    from hyper_parallel.testing.op_parity import check_op
    sys.path.insert(0, folder)
    name = OPS[key]
    install_registry()
    old = get_registry().entries[name]
    try:
        register_op(name, cls, module=f"tpl_{key}", replace=True)
        clear_cache()
        for k, fn in enumerate(_calls(key)):
            for shape in ((4, 6), (5, 3)):
                torch.manual_seed(k)
                x = torch.rand(shape) + 0.5
                report = check_op(name, fn, [x])
                report.raise_if_failed()
                assert not report.rejected, report.rejected[:2]
                # the scan keeps every shard (R, S(0), S(1)); the gathering rule only the other dim's
                want = 3 if VARIANTS[key][1]["expand"] == "scan" else 2
                assert report.native == want, (name, shape, report.native)
    finally:
        register_op(name, old.rule, module=old.module, options=old.options, replace=True)
        clear_cache()
        sys.path.remove(folder)


@multi_rank(world_size=2, timeout=600)
def _run(key, cls, folder):
    _parity_with_template(key, cls, folder)


@pytest.mark.parametrize("key", sorted(VARIANTS))
def test_template_rule_matches_single_device(tmp_path, key):
    cls = _write(tmp_path, key)
    _run(key=key, cls=cls, folder=str(tmp_path))
