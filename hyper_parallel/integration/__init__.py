# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Integrations with other training frameworks, one sub-package each (``docs/integration.md``):

* ``hyper_parallel.integration.transformers`` — ``transformers.Trainer`` on our ``fully_shard`` / HSDP,
  tensor parallel and selective recompute / swap (the shared machinery);
* ``hyper_parallel.integration.llamafactory`` — the names LlamaFactory imports when a run sets
  ``use_hyper_parallel: true`` (its 0.9.5 contract and the newer main-branch one), on top of the former.

Importing this package (or either sub-package) imports no framework; transformers, accelerate and torch load
on first use of a name that needs them (the ``hf`` extra installs transformers).
"""
from __future__ import annotations

__all__: list = []
