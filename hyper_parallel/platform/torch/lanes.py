# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Collective lanes: what keeps two compute threads' collectives apart (``overlap_b_f``).

Collectives on one process group are matched by the order in which each rank issues them. With a
forward running on the calling thread and a backward on the backward thread (a pipeline's
``OVERLAP_F_B`` step), both may issue collectives on the same group (an MoE layer's expert-parallel
all-to-all in the forward, the inverse exchange of its gradient in the backward) in an order that
differs from rank to rank. So the backward thread runs on the *backward lane*: every collective it
issues on a group travels on that group's *twin* (a second process group over the same ranks,
created once by :func:`add_twin_groups`), and the order on each group is again the same on every rank
(the forward thread's order on the group, the backward thread's on the twin). Point-to-point
transfers are posted by the calling thread only and keep their group.

A collective issued on the backward lane for a group without a twin raises a ``CollectiveError``
naming the group, instead of hanging.
"""
from __future__ import annotations

import threading
from typing import Any, Dict, Iterable, Tuple

import torch.distributed as dist

from hyper_parallel.platform.base import CollectiveError

__all__ = ["enter_backward_lane", "on_backward_lane", "lane_group", "add_twin_groups", "forget_twins"]

_STATE = threading.local()
_TWINS: Dict[int, Tuple[Any, Any]] = {}  # id(group) -> (group, twin): the entry keeps the group alive
_BY_RANKS: Dict[Tuple[int, ...], Any] = {}


def enter_backward_lane() -> None:
    """Put the calling thread on the backward lane for good (the initializer of the backward thread)."""
    _STATE.backward = True


def on_backward_lane() -> bool:
    """True on the backward thread of ``overlap_b_f``."""
    return getattr(_STATE, "backward", False)


def _key(group):
    return group if group is not None else dist.group.WORLD


def lane_group(group):
    """The group a collective on ``group`` uses on this thread: ``group`` itself, or its twin on the
    backward lane."""
    if not on_backward_lane():
        return group
    entry = _TWINS.get(id(_key(group)))
    if entry is None or entry[0] is not _key(group):
        ranks = dist.get_process_group_ranks(_key(group))
        raise CollectiveError(f"a collective over ranks {ranks} ran on the backward thread of overlap_b_f, but that "
                              "group has no twin (the schedule twins the expert-parallel groups of its stages' MoE "
                              "layers and the mesh groups of their DTensor parameters); run with overlap_b_f=False "
                              "or call hyper_parallel.platform.torch.lanes.add_twin_groups([group]) on every rank "
                              "of the group")
    return entry[1]


def add_twin_groups(groups: Iterable[Any]) -> int:
    """Create the twin of every group in ``groups`` that has none yet (one twin per distinct rank set,
    created in sorted rank order, by the group's ranks only); returns how many twins were created.
    Every rank of a group must call this with it (the pipeline schedule does, for its stages)."""
    wanted = {}
    for g in groups:
        g = _key(g)
        if id(g) not in _TWINS:
            wanted[id(g)] = (g, tuple(dist.get_process_group_ranks(g)))
    created = 0
    for ranks in sorted({r for _, r in wanted.values()}):
        if ranks not in _BY_RANKS:
            _BY_RANKS[ranks] = dist.new_group(list(ranks), use_local_synchronization=True)
            created += 1
    for gid, (g, ranks) in wanted.items():
        _TWINS[gid] = (g, _BY_RANKS[ranks])
    return created


def forget_twins() -> None:
    """Drop every twin (on ``destroy_process_group()`` of the world)."""
    _TWINS.clear()
    _BY_RANKS.clear()
