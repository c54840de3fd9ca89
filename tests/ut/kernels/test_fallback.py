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


CHECK = textwrap.dedent("""
    import json, warnings
    import torch
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import hyper_parallel
        from hyper_parallel.kernels import build_info, rms_norm
        x = torch.randn(4, 8)
        torch.testing.assert_close(rms_norm(x, None, 1e-6), torch.nn.functional.rms_norm(x, (8,), None, 1e-6))
    info = build_info()
    print("INFO " + json.dumps({"file": hyper_parallel.__file__, "mode": info["mode"], "reason": info["reason"],
                                "warnings": [str(c.message) for c in caught if "hyper_parallel.kernels" in str(c.message)]}))
""")


def _package_copy(tmp_path):
    """This checkout's ``hyper_parallel`` package alone (no csrc/ above it), as an installed copy would be."""
    import shutil
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    site = tmp_path / "site"
    shutil.copytree(os.path.join(root, "hyper_parallel"), site / "hyper_parallel",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    return root, site


def _run_check(site, env_extra=None):
    import json
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYPER_PARALLEL_")}
    env.update(PYTHONPATH=str(site), **(env_extra or {}))
    res = subprocess.run([sys.executable, "-c", CHECK], env=env, cwd=str(site), capture_output=True, text=True,
                         timeout=300, check=False)
    assert res.returncode == 0 and "INFO " in res.stdout, res.stdout + res.stderr
    out = json.loads(res.stdout.split("INFO ", 1)[1])
    assert out["file"].startswith(str(site)), out
    return out


def test_missing_kernel_sources_warn_once_with_how_to_build(tmp_path):
    """A package without its csrc/ (the 0.1.0 wheel's crash: FileNotFoundError inside rms_norm) runs the
    references after ONE warning that says why and how to build."""
    _, site = _package_copy(tmp_path)
    out = _run_check(site, {"HYPER_PARALLEL_EXT_DIR": str(tmp_path / "ext")})
    assert out["mode"] == "reference" and "C++ sources are not installed" in out["reason"], out
    assert len(out["warnings"]) == 1 and "to build them" in out["warnings"][0], out["warnings"]
    assert "pip install ninja" in out["warnings"][0] and "HYPER_PARALLEL_BUILD_EXT=1" in out["warnings"][0]


def test_aot_library_for_another_torch_is_refused_then_jit(tmp_path):
    """An ahead-of-time library next to the package whose _build_info.json names another torch is refused with
    one warning and the JIT build (from the packaged csrc/) takes over; a matching one loads as ``aot``."""
    import json
    import shutil
    from hyper_parallel.kernels._torch import build
    assert build.load(), build.build_info()
    root, site = _package_copy(tmp_path)
    kernels = site / "hyper_parallel" / "kernels"
    shutil.copytree(os.path.join(root, "csrc"), kernels / "csrc")
    shutil.copy(build.build_info()["path"], kernels / "hyper_parallel_C.so")
    (kernels / "_build_info.json").write_text(json.dumps({"torch": "1.13.0+cpu", "cxx11_abi": 1}), encoding="utf-8")
    out = _run_check(site)
    assert out["mode"] in ("cached", "built"), out
    refused = [w for w in out["warnings"] if "is refused" in w]
    assert len(refused) == 1 and "built for torch '1.13.0+cpu'" in refused[0] and len(out["warnings"]) == 1, out
    (kernels / "_build_info.json").write_text(json.dumps(build.torch_abi()), encoding="utf-8")
    out = _run_check(site)
    assert out["mode"] == "aot" and not out["warnings"], out


def test_aot_mismatch_rules():
    from hyper_parallel.kernels._torch.build import aot_mismatch
    running = {"torch": "2.13.0+cpu", "cxx11_abi": 1}
    assert aot_mismatch(dict(running), running) is None
    assert "no _build_info.json" in aot_mismatch(None, running)
    assert "cxx11_abi 0" in aot_mismatch({"torch": "2.13.0+cpu", "cxx11_abi": 0}, running)
