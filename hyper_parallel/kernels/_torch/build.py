# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Build and load the C++ ops of ``csrc/`` (``torch.ops.hyper_parallel.*``).

Order: an ahead-of-time build installed next to this package (``pip install`` with
``HYPER_PARALLEL_BUILD_EXT=1``), else a just-in-time build with ``torch.utils.cpp_extension`` (ninja)
into a per-version cache: ``$HYPER_PARALLEL_EXT_DIR`` or ``~/.cache/hyper_parallel/ext``, one folder per
(torch version, Python version, CPU capability, hash of the sources and flags) — a changed source or
flag builds a new folder, an unchanged one loads in about a second. When no compiler is available
(or the build fails, or ``HYPER_PARALLEL_NO_EXT=1``) every op falls back to its pure-Python reference
and one warning says why.
"""
from __future__ import annotations

import glob
import hashlib
import os
import shutil
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Dict, List, Optional

import torch

__all__ = ["load", "available", "build_info", "csrc_dir", "sources", "cache_dir", "compile_flags"]

_LOCK = threading.Lock()
_STATE: Dict[str, object] = {}
_NAME = "hyper_parallel_C"


def csrc_dir() -> Path:
    """The ``csrc/`` folder (repository checkout, or installed next to the package)."""
    here = Path(__file__).resolve()
    for cand in (here.parents[3] / "csrc", here.parents[1] / "csrc"):
        if (cand / "register.cpp").is_file():
            return cand
    raise FileNotFoundError(f"hyper_parallel: C++ sources not found (looked for csrc/register.cpp above {here})")


def sources() -> List[str]:
    """The C++ sources of the CPU ops (CUDA sources join when a CUDA toolchain is present)."""
    root = csrc_dir()
    files = [str(root / "register.cpp")] + sorted(glob.glob(str(root / "cpu" / "*.cpp")))
    if torch.cuda.is_available() and os.environ.get("CUDA_HOME") and glob.glob(str(root / "cuda" / "*.cu")):
        files += sorted(glob.glob(str(root / "cuda" / "*.cu")))
    return files


def compile_flags() -> List[str]:
    """C++ flags: -O3, OpenMP, and at::vec's AVX2 path where the CPU has it."""
    flags = ["-O3", "-fopenmp", "-DNDEBUG"]
    cap = torch.backends.cpu.get_cpu_capability()
    if cap in ("AVX2", "AVX512"):
        flags += ["-mavx2", "-mfma", "-mf16c", "-DCPU_CAPABILITY=AVX2", "-DCPU_CAPABILITY_AVX2"]
    return flags


def cache_dir() -> Path:
    """The build folder for this torch/Python/CPU and these sources and flags."""
    base = Path(os.environ.get("HYPER_PARALLEL_EXT_DIR") or Path.home() / ".cache" / "hyper_parallel" / "ext")
    h = hashlib.sha256()
    for f in sources() + [str(csrc_dir() / "ops.h")]:
        h.update(Path(f).name.encode())
        h.update(Path(f).read_bytes())
    h.update(" ".join(compile_flags()).encode())
    tag = (f"torch{torch.__version__.replace('+', '_')}-py{sys.version_info.major}{sys.version_info.minor}-"
           f"{torch.backends.cpu.get_cpu_capability().lower()}-{h.hexdigest()[:12]}")
    return base / tag


def _aot_library() -> Optional[str]:
    """Path of an ahead-of-time built library installed with the package, if any."""
    found = sorted(glob.glob(str(Path(__file__).resolve().parents[1] / f"{_NAME}*.so")))
    return found[0] if found else None


def _compiler_missing() -> Optional[str]:
    cxx = os.environ.get("CXX", "c++")
    if shutil.which(cxx) is None:
        return f"no C++ compiler ({cxx!r} is not on PATH; set CXX or install g++)"
    bin_dir = os.path.dirname(sys.executable)  # the venv's ninja (pip package) when not activated
    if shutil.which("ninja") is None and os.path.exists(os.path.join(bin_dir, "ninja")):
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
    if shutil.which("ninja") is None:
        return "ninja is not installed (pip install ninja, or `make install`)"
    return None


def _jit_build() -> str:
    """Build into (or load from) the cache folder; a ``READY`` marker written after a successful build lets
    later processes load the library directly, without running ninja."""
    build = cache_dir()
    lib, ready = build / f"{_NAME}.so", build / "READY"
    if ready.is_file() and lib.is_file():
        torch.ops.load_library(str(lib))
        return str(lib)
    from torch.utils import cpp_extension
    build.mkdir(parents=True, exist_ok=True)
    cpp_extension.load(name=_NAME, sources=sources(), extra_cflags=compile_flags(),
                       extra_include_paths=[str(csrc_dir())], extra_ldflags=["-fopenmp"],
                       build_directory=str(build), is_python_module=False, verbose=False)
    ready.write_text(f"{torch.__version__}\n", encoding="utf-8")
    return str(lib)


def _load_once() -> None:
    t0 = time.perf_counter()
    reason = "disabled by HYPER_PARALLEL_NO_EXT=1" if os.environ.get("HYPER_PARALLEL_NO_EXT") == "1" else None
    path = None
    if reason is None:
        path = _aot_library()
        if path is not None:
            torch.ops.load_library(path)
            _STATE.update(mode="aot")
    if reason is None and path is None:
        reason = _compiler_missing()
        if reason is None:
            cached = (cache_dir() / "READY").is_file()
            try:
                path = _jit_build()
                _STATE.update(mode="cached" if cached else "built")
            except (RuntimeError, OSError, ImportError, SystemExit) as exc:  # compiler/ninja errors
                reason = f"the C++ build failed: {str(exc).strip().splitlines()[-1] if str(exc).strip() else exc!r}"
    _STATE.update(available=reason is None, path=path, reason=reason, seconds=time.perf_counter() - t0)
    if reason is None:
        from hyper_parallel.kernels._torch import library
        library.register_python_parts()
    else:
        _STATE["mode"] = "reference"
        warnings.warn(f"hyper_parallel.kernels: C++ ops unavailable ({reason}); every op runs its pure-Python "
                      "reference instead", RuntimeWarning, stacklevel=3)


def load() -> bool:
    """Build (or load from the cache) the C++ ops once per process; True when they are available."""
    if "available" not in _STATE:
        with _LOCK:
            if "available" not in _STATE:
                _load_once()
    return bool(_STATE["available"])


def available() -> bool:
    """True when ``torch.ops.hyper_parallel.*`` run the C++ kernels (builds on first call)."""
    return load()


def build_info() -> Dict[str, object]:
    """How the ops were obtained: ``mode`` (aot / built / cached / reference), ``seconds``, ``path``, ``reason``."""
    load()
    return dict(_STATE)
