# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Developer tools that ship with the library (run as ``python -m hyper_parallel.devtools.<name>``).

* ``op_coverage`` — run PyTorch's OpInfo sample inputs through DTensor on 2 ranks and write
  ``docs/op_coverage.md``.
* ``trace_overlap`` — how long two kinds of intervals of a ``torch.profiler`` chrome trace run at the same
  time (compute of two threads, a transfer in flight during compute).
"""
