# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Process-group management on top of the active backend.

Groups are created eagerly (``DeviceMesh`` creates every group of every mesh dim when it is
built) and cached by their rank tuple, so no collective path ever creates a group lazily.
The collective timeout is configurable (``timeout=`` or ``HYPER_PARALLEL_COLLECTIVE_TIMEOUT``
seconds); when a peer dies, the surviving ranks' collectives fail with ``CollectiveError`` within
that timeout.
"""
from __future__ import annotations

from datetime import timedelta
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from hyper_parallel.platform import get_platform
from hyper_parallel.platform.base import collective_timeout_seconds as _timeout_of

__all__ = ["init_process_group", "destroy_process_group", "get_process_group_ranks", "get_backend",
           "split_group", "get_group_local_rank", "get_or_create_group", "collective_timeout_seconds",
           "get_rank", "get_world_size", "is_initialized"]

_GROUPS: Dict[Tuple[str, Tuple[int, ...]], Any] = {}
#: callables run when every group is destroyed (DeviceMesh registers its cache reset here)
ON_DESTROY: List[Any] = []


def collective_timeout_seconds(platform: Optional[str] = None) -> float:
    """The collective timeout in force (seconds) on ``platform`` (default: the active backend)."""
    return _timeout_of(get_platform(platform).name)


def init_process_group(backend: Optional[str] = None, *, rank: Optional[int] = None,
                       world_size: Optional[int] = None, init_method: Optional[str] = None,
                       timeout: Union[None, float, timedelta] = None, platform: Optional[str] = None) -> None:
    """Initialise the world group (reads ``RANK``/``WORLD_SIZE``/``MASTER_ADDR`` from torchrun/msrun).

    Args:
        backend: communication backend (``gloo``, ``nccl``, ``mccl``, ``hccl``); default by device.
        timeout: collective timeout in seconds or as ``timedelta`` (default
            ``$HYPER_PARALLEL_COLLECTIVE_TIMEOUT`` or 600 s).
        platform: ``torch`` or ``mindspore`` (default ``$HYPER_PARALLEL_BACKEND`` or ``torch``).
    """
    plat = get_platform(platform)
    if isinstance(timeout, timedelta):
        seconds = timeout.total_seconds()
    elif timeout is None:
        seconds = _timeout_of(plat.name)
    else:
        seconds = float(timeout)
    if seconds <= 0:
        raise ValueError(f"init_process_group(timeout): expected a positive number of seconds, got {timeout!r}")
    plat.init_process_group(backend, rank=rank, world_size=world_size, init_method=init_method,
                            timeout=timedelta(seconds=seconds))


def is_initialized(platform: Optional[str] = None) -> bool:
    """True once the world group exists."""
    return get_platform(platform).is_initialized()


def _require_init(what: str, platform: Optional[str] = None) -> None:
    if not get_platform(platform).is_initialized():
        raise RuntimeError(f"{what}: the default process group is not initialised; call "
                           "hyper_parallel.init_process_group() first (or launch with torchrun/msrun)")


def destroy_process_group(group: Any = None, platform: Optional[str] = None) -> None:
    """Destroy ``group``, or every group (and the group cache) when ``group`` is None."""
    plat = get_platform(platform)
    if group is None:
        for key in [k for k in _GROUPS if k[0] == plat.name]:
            del _GROUPS[key]
        for callback in ON_DESTROY:
            callback()
    else:
        for key in [k for k, g in _GROUPS.items() if g is group]:
            del _GROUPS[key]
    plat.destroy_process_group(group)


def get_rank(group: Any = None, platform: Optional[str] = None) -> int:
    """Global rank, or the rank inside ``group``."""
    _require_init("get_rank", platform)
    return get_platform(platform).get_rank(group)


def get_world_size(group: Any = None, platform: Optional[str] = None) -> int:
    """World size, or the size of ``group``."""
    _require_init("get_world_size", platform)
    return get_platform(platform).get_world_size(group)


def get_process_group_ranks(group: Any = None, platform: Optional[str] = None) -> Tuple[int, ...]:
    """Global ranks of ``group`` (default: the world), in group order."""
    _require_init("get_process_group_ranks", platform)
    return get_platform(platform).get_process_group_ranks(group)


def get_backend(group: Any = None, platform: Optional[str] = None) -> str:
    """Communication backend of ``group`` (default: the world)."""
    _require_init("get_backend", platform)
    return get_platform(platform).get_backend(group)


def get_group_local_rank(group: Any, global_rank: Optional[int] = None, platform: Optional[str] = None) -> int:
    """Position of ``global_rank`` (default: this rank) inside ``group``; clear error when absent."""
    ranks = get_process_group_ranks(group, platform)
    if global_rank is None:
        global_rank = get_rank(platform=platform)
    if global_rank not in ranks:
        raise ValueError(f"get_group_local_rank: rank {global_rank} is not in group {ranks}")
    return ranks.index(global_rank)


def get_or_create_group(ranks: Sequence[int], platform: Optional[str] = None) -> Any:
    """The cached group over ``ranks`` (created now if new: a collective call on every rank)."""
    plat = get_platform(platform)
    key = (plat.name, tuple(int(r) for r in ranks))
    group = _GROUPS.get(key)
    if group is None:
        _require_init("get_or_create_group", platform)
        world = plat.get_world_size()
        bad = [r for r in key[1] if not 0 <= r < world]
        if bad:
            raise ValueError(f"group ranks {key[1]}: ranks {bad} are outside the world of size {world}")
        group = plat.new_group(key[1])
        _GROUPS[key] = group
    return group


def split_group(parent: Any = None, split_ranks: Iterable[Sequence[int]] = (),
                platform: Optional[str] = None) -> Optional[Any]:
    """Split ``parent`` (default: world) into disjoint groups; return the one holding this rank.

    Every rank calls this with the same ``split_ranks``; all groups are created eagerly.
    Returns ``None`` when this rank is in none of them.
    """
    parent_ranks = set(get_process_group_ranks(parent, platform))
    me = get_rank(platform=platform)
    mine = None
    seen: List[int] = []
    for ranks in split_ranks:
        ranks = tuple(int(r) for r in ranks)
        outside = [r for r in ranks if r not in parent_ranks]
        if outside:
            raise ValueError(f"split_group: ranks {outside} of {ranks} are not in the parent group")
        dup = [r for r in ranks if r in seen]
        if dup:
            raise ValueError(f"split_group: ranks {dup} appear in more than one split")
        seen.extend(ranks)
        group = get_or_create_group(ranks, platform)
        if me in ranks:
            mine = group
    return mine
