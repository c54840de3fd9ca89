# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The backend switch of ``hyper_parallel.fully_shard``: a ``torch.nn.Module`` goes to ``fsdp/_torch``, a
``mindspore.nn.Cell`` to ``fsdp/_mindspore`` (same signature and semantics; see ``docs/fsdp.md``)."""
from __future__ import annotations

import importlib
from typing import Any, Iterable, Optional

from hyper_parallel.fsdp.api import MixedPrecisionPolicy, OffloadPolicy

__all__ = ["fully_shard"]

_IMPLEMENTATIONS = {"torch": "hyper_parallel.fsdp._torch.fully_shard",
                    "mindspore": "hyper_parallel.fsdp._mindspore.fully_shard"}


def fully_shard(module: Any, *, mesh: Any = None, reshard_after_forward: Any = True,
                mp_policy: Optional[MixedPrecisionPolicy] = None, offload_policy: Optional[OffloadPolicy] = None,
                ignored_params: Optional[Iterable[Any]] = None) -> Any:
    """Shard ``module``'s parameters over the data-parallel mesh dim (FSDP2 semantics), on the module's
    backend: see ``hyper_parallel.fsdp._torch.fully_shard.fully_shard`` (torch) and
    ``hyper_parallel.fsdp._mindspore.fully_shard.fully_shard`` (MindSpore) for the arguments."""
    from hyper_parallel.platform import platform_of
    plat = platform_of(module)
    if plat is None or plat.name not in _IMPLEMENTATIONS or not isinstance(module, plat.module_type):
        raise TypeError(f"fully_shard(module): expected an nn.Module (torch) or an nn.Cell (MindSpore), got "
                        f"{type(module).__name__}")
    impl = importlib.import_module(_IMPLEMENTATIONS[plat.name])
    return impl.fully_shard(module, mesh=mesh, reshard_after_forward=reshard_after_forward, mp_policy=mp_policy,
                            offload_policy=offload_policy, ignored_params=ignored_params)
