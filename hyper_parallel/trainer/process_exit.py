# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Ending a launched process without the interpreter's teardown (a launched rank's ``exit_rank`` in
``hyper_parallel.trainer.cli`` and the one-node torchrun agent ``hyper_parallel.trainer._torch.torchrun``)."""
from __future__ import annotations

import contextlib
import os
import sys

__all__ = ["flush_and_exit"]


def flush_and_exit(code: int) -> None:
    """Flush stdout and stderr (a closed or broken pipe is ignored: nothing more to say), then ``os._exit(code)``
    without the interpreter's teardown of torch, gloo and every imported module."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)  # pylint: disable=protected-access
