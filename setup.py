# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Packaging lives in pyproject.toml; this file only adds the optional ahead-of-time build of the C++ ops
of ``csrc/`` (otherwise they are built just in time on first use and cached):

    HYPER_PARALLEL_BUILD_EXT=1 pip install --no-build-isolation .    # torch must already be installed
"""
import glob
import os

from setuptools import setup


def _extension_kwargs() -> dict:
    if os.environ.get("HYPER_PARALLEL_BUILD_EXT") != "1":
        return {}
    from torch.utils.cpp_extension import BuildExtension, CppExtension  # pylint: disable=import-outside-toplevel
    sources = ["csrc/register.cpp"] + sorted(glob.glob("csrc/cpu/*.cpp"))
    ext = CppExtension("hyper_parallel.kernels.hyper_parallel_C", sources, include_dirs=["csrc"],
                       extra_compile_args=["-O3", "-fopenmp", "-DNDEBUG"], extra_link_args=["-fopenmp"])
    return {"ext_modules": [ext], "cmdclass": {"build_ext": BuildExtension.with_options(no_python_abi_suffix=True)}}


setup(**_extension_kwargs())
