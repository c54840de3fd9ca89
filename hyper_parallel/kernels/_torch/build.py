# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Build and load the C++ ops of ``csrc/`` (``torch.ops.hyper_parallel.*``).

Order: an ahead-of-time build installed next to this package (``pip install`` with
``HYPER_PARALLEL_BUILD_EXT=1``), else a just-in-time build with ``torch.utils.cpp_extension`` (ninja)
into a per-version cache: ``$HYPER_PARALLEL_EXT_DIR`` or ``~/.cache/hyper_parallel/ext``, one folder per
(torch version, Python version, CPU capability, hash of the sources and flags) — a changed source or
flag builds a new folder, an unchanged one loads in about a second. When no compiler is available
(or ninja, or the C++ sources, or the build fails, or ``HYPER_PARALLEL_NO_EXT=1``) every op falls back to
its pure-Python reference and one warning says why and how to build. Nothing here raises.

An AOT library carries ``_build_info.json`` (the torch version and C++ ABI it was built against); one built
for another torch is refused with one warning and the JIT build takes over.
"""
from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Dict, List, Optional

import torch

__all__ = ["load", "available", "build_info", "csrc_dir", "sources", "cache_dir", "compile_flags", "torch_abi",
           "aot_mismatch"]

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


def torch_abi() -> Dict[str, object]:
    """The running torch's version and C++ ABI flag (what an AOT library must have been built against)."""
    return {"torch": torch.__version__, "cxx11_abi": int(torch._C._GLIBCXX_USE_CXX11_ABI)}  # pylint: disable=W0212


def aot_mismatch(recorded: Optional[Dict[str, object]], running: Dict[str, object]) -> Optional[str]:
    """Why an AOT library recorded as ``recorded`` (its ``_build_info.json``; None when absent) cannot be
    loaded into ``running`` (:func:`torch_abi`), or None when it can."""
    if not recorded:
        return "it has no _build_info.json (which torch it was built for is unknown)"
    for key in ("torch", "cxx11_abi"):
        if recorded.get(key) != running.get(key):
            return (f"it was built for {key} {recorded.get(key)!r}, this process runs {running.get(key)!r}; "
                    f"rebuild it for this torch (HYPER_PARALLEL_BUILD_EXT=1 pip install --no-build-isolation ...)")
    return None


def _load_aot(path: str) -> Optional[str]:
    """Load the AOT library at ``path``; returns None, or why it was refused (the caller falls back)."""
    info_file = Path(path).parent / "_build_info.json"
    try:
        recorded = json.loads(info_file.read_text(encoding="utf-8")) if info_file.is_file() else None
    except (OSError, ValueError):
        recorded = None
    why = aot_mismatch(recorded, torch_abi())
    if why is None:
        try:
            torch.ops.load_library(path)
        except (OSError, RuntimeError) as exc:
            why = f"loading it failed ({str(exc).strip().splitlines()[-1] if str(exc).strip() else exc!r})"
    return why


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


_HOW = ("to build them: install a C++ compiler and ninja (pip install ninja) and the JIT build runs on first use, "
        "or install an AOT wheel (HYPER_PARALLEL_BUILD_EXT=1 pip wheel --no-build-isolation .); "
        "HYPER_PARALLEL_NO_EXT=1 skips them without this warning")


def _jit_or_reason() -> "tuple[Optional[str], Optional[str]]":
    """(path, None) after a JIT build or cache load, else (None, why not)."""
    reason = _compiler_missing()
    if reason is not None:
        return None, reason
    try:
        cached = (cache_dir() / "READY").is_file()
    except FileNotFoundError as exc:
        return None, f"the C++ sources are not installed ({exc})"
    try:
        path = _jit_build()
    except (RuntimeError, OSError, ImportError, SystemExit) as exc:  # compiler/ninja errors
        return None, f"the C++ build failed: {str(exc).strip().splitlines()[-1] if str(exc).strip() else exc!r}"
    _STATE.update(mode="cached" if cached else "built")
    return path, None


def _load_once() -> None:
    t0 = time.perf_counter()
    if os.environ.get("HYPER_PARALLEL_NO_EXT") == "1":
        path, reason, quiet = None, "disabled by HYPER_PARALLEL_NO_EXT=1", True
    else:
        quiet, refused = False, None
        path = _aot_library()
        if path is not None:
            refused = _load_aot(path)
            if refused is not None:
                warnings.warn(f"hyper_parallel.kernels: the prebuilt {Path(path).name} is refused: {refused}",
                              RuntimeWarning, stacklevel=3)
                path = None
            else:
                _STATE.update(mode="aot")
        reason = None
        if path is None:
            path, reason = _jit_or_reason()
    _STATE.update(available=reason is None, path=path, reason=reason, seconds=time.perf_counter() - t0)
    _STATE.update(torch_abi())
    if reason is None:
        from hyper_parallel.kernels._torch import library
        library.register_python_parts()
        return
    _STATE["mode"] = "reference"
    if not quiet:
        warnings.warn(f"hyper_parallel.kernels: C++ ops unavailable ({reason}); every op runs its pure-Python "
                      f"reference instead; {_HOW}", RuntimeWarning, stacklevel=3)


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
    """How the ops were obtained: ``mode`` (aot / built / cached / reference), ``seconds``, ``path``, ``reason``,
    and the ``torch`` version / ``cxx11_abi`` of this process (an AOT library must match both)."""
    load()
    return dict(_STATE)
