# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The ``PipelineStage`` base class (pure). ``PipelineStage(submodule, ...)`` builds the stage class of the
submodule's framework; the backends' stage classes (``pipeline/_torch/stage.py``) subclass this one.

Which class a backend uses comes from the loader that ``pipeline/api.py`` installs when it is imported,
so this module never names a backend module (no import cycle between the base and its subclasses)."""
from __future__ import annotations

from typing import Any, Callable, Dict

__all__ = ["PipelineStage", "set_stage_loader"]

_LOADER: Dict[str, Callable[[Any], type]] = {}


def set_stage_loader(loader: Callable[[Any], type]) -> None:
    """Install ``loader(submodule) -> stage class of the submodule's framework``."""
    _LOADER["stage"] = loader


class PipelineStage:
    """One pipeline stage: ``PipelineStage(submodule, stage_index, num_stages, device, input_args=None,
    output_args=None, group=None, ...)``; returns the stage of the submodule's framework.

    Construction is collective over ``group`` (the pipeline group, default: the world): every rank
    builds its stages in the same order, and a bad ``stage_index`` / ``num_stages`` on any rank raises
    the same clear error on every rank.
    """

    def __new__(cls, *args: Any, **kwargs: Any):
        target = cls
        if cls is PipelineStage:
            loader = _LOADER.get("stage")
            if loader is None:
                raise RuntimeError("PipelineStage: import hyper_parallel.pipeline (or hyper_parallel.pipeline.api) "
                                   "first; it installs the backend stage classes")
            target = loader(args[0] if args else kwargs.get("submodule"))
        return object.__new__(target)
