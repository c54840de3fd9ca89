# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The ``package`` gate stage: build the sdist and the wheel from this checkout (``python -m build``: the wheel
is built from the unpacked sdist, so the sdist is proven complete), check them (``twine check``,
``check-wheel-contents``, the kernel sources inside), install the wheel into a clean venv outside the source
tree, and run it there with no hyper-parallel environment variable and no source tree on the path: the
versions, a one-process smoke (a DTensor op, the debug Llama's forward + backward through the C++ kernels built
from the installed sources) and a 2-rank ``hp-train`` of 3 steps.

The clean venv has no pip packages of its own: a ``.pth`` line adds this interpreter's site-packages for the
dependencies (torch is 800 MB; the editable install of this checkout is not activated that way, because
``.pth`` files of an added directory are not processed), and every check asserts the import came from the
venv."""
import glob
import json
import os
import re
import subprocess
import sys
import sysconfig
import tarfile
import textwrap
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from hyper_parallel._version import __version__  # noqa: E402  # pylint: disable=wrong-import-position

CLEAN_KEYS = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
              "MASTER_ADDR", "MASTER_PORT")


def _clean_env():
    """This process's environment without any ``HYPER_PARALLEL_*``/``HP_*`` variable, path or launcher setting."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("HYPER_PARALLEL_", "HP_", "TORCHELASTIC_")) and k not in CLEAN_KEYS}


def _run(cmd, cwd, timeout=300, env=None):
    res = subprocess.run(cmd, cwd=cwd, env=env or _clean_env(), capture_output=True, text=True, timeout=timeout,
                         check=False)
    assert res.returncode == 0, f"{cmd}: exit {res.returncode}\n{res.stdout[-4000:]}\n{res.stderr[-4000:]}"
    return res.stdout + res.stderr


@pytest.fixture(scope="module")
def dist_dir(tmp_path_factory):
    """The sdist and the wheel, built without build isolation (this interpreter's setuptools)."""
    out = tmp_path_factory.mktemp("dist")
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), ROOT], cwd=str(out))
    return out


@pytest.fixture(scope="module")
def venv(dist_dir, tmp_path_factory):
    """A clean venv outside the source tree with the wheel installed (by the venv's own pip machinery: its
    console scripts point at the venv's interpreter)."""
    home = tmp_path_factory.mktemp("clean")
    env_dir = home / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], cwd=str(home))
    py = str(env_dir / "bin" / "python")
    site = _run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=str(home)).strip()
    with open(os.path.join(site, "deps.pth"), "w", encoding="utf-8") as fh:
        fh.write(sysconfig.get_paths()["purelib"] + "\n")  # dependencies only; see the module docstring
    wheel = glob.glob(str(dist_dir / "*.whl"))[0]
    _run([py, "-m", "pip", "install", "--no-deps", "--no-index", "--no-compile", "-q", wheel], cwd=str(home))
    return {"home": home, "python": py, "bin": str(env_dir / "bin"), "site": site}


def test_sdist_and_wheel_carry_the_kernel_sources_and_pass_the_checks(dist_dir):
    """Names and metadata say 1.0.0; the sdist holds csrc/, the wheel hyper_parallel/kernels/csrc/ (package data
    for the JIT build); ``twine check`` and ``check-wheel-contents`` pass."""
    wheel, = glob.glob(str(dist_dir / "*.whl"))
    sdist, = glob.glob(str(dist_dir / "*.tar.gz"))
    assert os.path.basename(wheel) == f"hyper_parallel-{__version__}-py3-none-any.whl", wheel
    assert __version__ == "1.0.0"
    with tarfile.open(sdist) as tar:
        names = tar.getnames()
    for need in ("csrc/register.cpp", "csrc/ops.h", "csrc/cpu/norm_rope_act.cpp", "setup.py", "MANIFEST.in"):
        assert any(n.endswith(f"-{__version__}/{need}") for n in names), need
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        meta = zf.read(f"hyper_parallel-{__version__}.dist-info/METADATA").decode()
        entry = zf.read(f"hyper_parallel-{__version__}.dist-info/entry_points.txt").decode()
    for need in ("register.cpp", "ops.h", "cpu/norm_rope_act.cpp", "cpu/moe_sinkhorn.cpp"):
        assert f"hyper_parallel/kernels/csrc/{need}" in names, need
    assert not [n for n in names if n.endswith(".so")], "a pure wheel must not carry a compiled library"
    assert re.search(rf"^Version: {re.escape(__version__)}$", meta, re.M), meta[:400]
    assert "Provides-Extra: torch" in meta and "hp-train = hyper_parallel.trainer.cli:main" in entry
    _run([sys.executable, "-m", "twine", "check", "--strict", wheel, sdist], cwd=str(dist_dir))
    out = _run([sys.executable, "-m", "check_wheel_contents", "--config", os.path.join(ROOT, "pyproject.toml"), wheel],
               cwd=str(dist_dir))
    assert "OK" in out, out


def test_console_scripts_report_the_version(venv):
    """``hp-train --version``, ``hp-agent --version`` and the metadata, all from the venv."""
    for script, name in (("hp-train", "hp-train"), ("hp-agent", "hp-agent")):
        out = _run([os.path.join(venv["bin"], script), "--version"], cwd=str(venv["home"]))
        assert out.split()[0].rstrip(",") == name and __version__ in out, out
    code = "import importlib.metadata as m, hyper_parallel; print(m.version('hyper-parallel'), hyper_parallel.__file__)"
    version, where = _run([venv["python"], "-c", code], cwd=str(venv["home"])).split()
    assert version == __version__ and where.startswith(venv["site"]), (version, where)


SMOKE = textwrap.dedent("""
    import json, os, sys, tempfile, warnings
    warnings.simplefilter("error", RuntimeWarning)   # the kernels must build: no fallback warning here
    import torch
    import torch.distributed as dist
    import hyper_parallel as hp
    from hyper_parallel.kernels import build_info, rms_norm
    from hyper_parallel.kernels._torch import build, reference
    from hyper_parallel.trainer.models import build_model_config, model_spec
    out = {"file": hp.__file__, "csrc": str(build.csrc_dir()), "sys_path": sys.path}
    dist.init_process_group("gloo", init_method="file://" + tempfile.mktemp(), rank=0, world_size=1)
    mesh = hp.init_device_mesh("cpu", (1,), mesh_dim_names=("dp",))
    torch.manual_seed(0)
    a, b = torch.randn(4, 6), torch.randn(6, 3)
    da = hp.distribute_tensor(a, mesh, [hp.Shard(0)])
    db = hp.distribute_tensor(b, mesh, [hp.Replicate()])
    out["dtensor_err"] = float((da @ db).full_tensor().sub(a @ b).abs().max())
    x, w = torch.randn(3, 16), torch.rand(16) + 0.5
    out["rms_err"] = float((rms_norm(x, w) - reference.rms_norm_ref(x, w, 1e-6)).abs().max())
    cfg = build_model_config("llama3", "debug", vocab_size=128)
    model = model_spec("llama3").model_cls(cfg)
    ids = torch.randint(0, 128, (2, 16))
    loss = type(model).loss(model(ids[:, :-1]).float(), ids[:, 1:])
    loss.backward()
    out["loss"] = float(loss)
    out["grad_norm"] = float(sum(p.grad.norm() ** 2 for p in model.parameters() if p.grad is not None) ** 0.5)
    out["build"] = {k: v for k, v in build_info().items() if k != "seconds"}
    dist.destroy_process_group()
    print("SMOKE " + json.dumps(out))
""")


def test_one_process_smoke_from_the_installed_wheel(venv):
    """DTensor, the fused kernels (JIT-built from the installed csrc/, no fallback warning) and the debug Llama's
    forward + backward, with the source tree nowhere on the path."""
    text = _run([venv["python"], "-c", SMOKE], cwd=str(venv["home"]))
    out = json.loads(text.split("SMOKE ", 1)[1].splitlines()[0])
    assert out["file"].startswith(venv["site"]) and out["csrc"].startswith(venv["site"]), out
    deps = os.path.realpath(sysconfig.get_paths()["purelib"])  # may lie under ROOT (.venv): dependencies only
    assert not [p for p in out["sys_path"] if p and os.path.realpath(p).startswith(ROOT)
                and os.path.realpath(p) != deps], out["sys_path"]
    assert not os.path.isdir(os.path.join(deps, "hyper_parallel")), "the dependencies' site-packages holds a copy"
    assert out["build"]["available"] and out["build"]["mode"] in ("built", "cached"), out["build"]
    assert out["dtensor_err"] < 1e-6 and out["rms_err"] < 1e-5, out
    assert 3.0 < out["loss"] < 7.0 and out["grad_norm"] > 0, out  # ~ln(128) = 4.85 at initialisation


def test_two_rank_hp_train_from_the_installed_wheel(venv):
    """``hp-train`` (the venv's console script) launches torchrun itself and trains 3 steps of the debug Llama
    with FSDP on 2 ranks, from a config outside the source tree."""
    home = venv["home"]
    cfg = home / "tiny.toml"
    cfg.write_text(textwrap.dedent("""
        [job]
        name = "wheel"
        nproc = 2
        out_dir = "runs/wheel"
        [model]
        name = "llama3"
        flavor = "debug"
        [parallelism]
        dp_shard = -1
        [training]
        steps = 3
        global_batch = 4
        seq_len = 32
        [data]
        source = "stdlib"
        vocab_size = 512
        max_corpus_mb = 0.2
        [metrics]
        progress = false
        plot = false
    """), encoding="utf-8")
    out = _run([os.path.join(venv["bin"], "hp-train"), "--config", str(cfg)], cwd=str(home), timeout=400)
    assert "launcher: none" in out, out[-2000:]
    assert "on 2 ranks" in out and "steps 1..3: loss" in out, out[-3000:]
    with open(home / "runs" / "wheel" / "metrics.jsonl", encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh]
    assert [r["step"] for r in rows] == [1, 2, 3] and all(3.0 < r["loss"] < 8.0 for r in rows), rows
