# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT: with the C++ compiler hidden (and an empty build cache) every fused op warns once and runs its
Python reference; results checked against torch's own functions (forward and backward)."""
import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import warnings
    import torch
    import torch.nn.functional as F
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        from hyper_parallel.kernels import (apply_rotary_emb, build_info, moe_permute, moe_unpermute, rms_norm,
                                            sinkhorn, swiglu)
        torch.manual_seed(0)
        x = torch.randn(4, 8, requires_grad=True)
        w = torch.rand(8) + 0.5
        for _ in range(2):
            y = rms_norm(x, w, 1e-6)
            torch.testing.assert_close(y, F.rms_norm(x, (8,), w, 1e-6), atol=1e-6, rtol=1e-6)
        g, = torch.autograd.grad(y.sum(), x)
        g_ref, = torch.autograd.grad(F.rms_norm(x, (8,), w, 1e-6).sum(), x)
        torch.testing.assert_close(g, g_ref, atol=1e-6, rtol=1e-6)
        u = torch.randn(4, 8)
        torch.testing.assert_close(swiglu(x, u), F.silu(x) * u)
        theta = torch.randn(4, 4)
        q = apply_rotary_emb(x, torch.cat([theta.cos()] * 2, -1), torch.cat([theta.sin()] * 2, -1))
        as_complex = torch.complex(x[:, :4], x[:, 4:]) * torch.exp(1j * theta)
        torch.testing.assert_close(q, torch.cat([as_complex.real, as_complex.imag], -1), atol=1e-5, rtol=1e-5)
        idx = torch.tensor([[1, 0], [0, 2], [2, 1], [0, 1]])
        p, row_map, counts = moe_permute(x, idx, 3)
        assert counts.tolist() == [3, 3, 2]
        assert torch.equal(p[row_map[:, 0]], x) and torch.equal(p[row_map[:, 1]], x)
        torch.testing.assert_close(moe_unpermute(p, row_map, torch.full((4, 2), 0.5)), x)
        s = sinkhorn(torch.randn(3, 4, 4), 60)
        torch.testing.assert_close(s.sum(-1), torch.ones(3, 4), atol=1e-4, rtol=0)
    info = build_info()
    assert info["mode"] == "reference" and not info["available"], info
    assert "compiler" in info["reason"], info
    ours = [str(c.message) for c in caught if "C++ ops unavailable" in str(c.message)]
    assert len(ours) == 1, ours
    assert not hasattr(torch.ops.hyper_parallel, "rms_norm")
    print("FALLBACK-OK", ours[0])
""")


def test_no_compiler_warns_once_and_runs_the_references(tmp_path):
    env = dict(os.environ, CXX=str(tmp_path / "no-such-c++"), HYPER_PARALLEL_EXT_DIR=str(tmp_path / "ext"))
    env.pop("HYPER_PARALLEL_NO_EXT", None)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    res = subprocess.run([sys.executable, "-c", SCRIPT], env=env, cwd=root, capture_output=True, text=True,
                         timeout=300, check=False)
    assert res.returncode == 0 and "FALLBACK-OK" in res.stdout, res.stdout + res.stderr
    assert "no C++ compiler" in res.stdout
    assert not (tmp_path / "ext").exists() or not any((tmp_path / "ext").rglob("*.so"))
