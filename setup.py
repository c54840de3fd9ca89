# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Packaging lives in pyproject.toml; this file adds what a static table cannot say:

* the version, read from ``hyper_parallel/_version.py`` (the one source of truth);
* the C++ sources of ``csrc/`` copied into the wheel as ``hyper_parallel/kernels/csrc/`` (package data), so
  the just-in-time build of the fused ops works from site-packages;
* the optional ahead-of-time build of those ops (otherwise they are built just in time on first use and
  cached)::

      HYPER_PARALLEL_BUILD_EXT=1 pip wheel --no-build-isolation .    # torch must already be installed

  An AOT wheel carries a local version label naming the torch version and C++ ABI it was built against
  (``1.0.0+torch2.13.0.cpu.cxx11abi1``) and ``hyper_parallel/kernels/_build_info.json``; at import a library
  built for another torch is refused with one warning and the JIT build / Python references take over.
"""
import glob
import json
import os
import re
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

_HERE = os.path.dirname(os.path.abspath(__file__))


def _base_version() -> str:
    with open(os.path.join(_HERE, "hyper_parallel", "_version.py"), encoding="utf-8") as fh:
        return re.search(r'^__version__ = "([^"]+)"', fh.read(), re.M).group(1)


def _aot() -> bool:
    return os.environ.get("HYPER_PARALLEL_BUILD_EXT") == "1"


def _torch_tag() -> dict:
    import torch  # pylint: disable=import-outside-toplevel
    return {"torch": torch.__version__, "cxx11_abi": int(torch._C._GLIBCXX_USE_CXX11_ABI)}  # pylint: disable=W0212


def _version() -> str:
    if not _aot():
        return _base_version()
    tag = _torch_tag()
    label = re.sub(r"[^0-9a-zA-Z.]+", ".", f"torch{tag['torch']}.cxx11abi{tag['cxx11_abi']}")
    return f"{_base_version()}+{label}"


class BuildPy(build_py):
    """``build_py`` that also copies ``csrc/`` into the package (``hyper_parallel/kernels/csrc``) and, for an
    AOT build, writes ``hyper_parallel/kernels/_build_info.json``."""

    def run(self) -> None:
        super().run()
        src = os.path.join(_HERE, "csrc")
        dst = os.path.join(self.build_lib, "hyper_parallel", "kernels", "csrc")
        if os.path.isdir(src):
            shutil.rmtree(dst, ignore_errors=True)
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.o", "*.so", "__pycache__"))
        if _aot():
            info = dict(_torch_tag(), version=_version())
            with open(os.path.join(self.build_lib, "hyper_parallel", "kernels", "_build_info.json"), "w",
                      encoding="utf-8") as fh:
                json.dump(info, fh)


def _extension_kwargs() -> dict:
    if not _aot():
        return {}
    from torch.utils.cpp_extension import BuildExtension, CppExtension  # pylint: disable=import-outside-toplevel
    sources = ["csrc/register.cpp"] + sorted(glob.glob("csrc/cpu/*.cpp"))
    ext = CppExtension("hyper_parallel.kernels.hyper_parallel_C", sources, include_dirs=["csrc"],
                       extra_compile_args=["-O3", "-fopenmp", "-DNDEBUG"], extra_link_args=["-fopenmp"])
    return {"ext_modules": [ext], "cmdclass": {"build_ext": BuildExtension.with_options(no_python_abi_suffix=True),
                                               "build_py": BuildPy}}


setup(version=_version(), **({"cmdclass": {"build_py": BuildPy}} | _extension_kwargs()))
