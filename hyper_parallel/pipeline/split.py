# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Model split for pipelining, the TorchTitan way (pure Python).

``split_layers(num_layers, num_stages, first_stage_less=1, last_stage_less=1)`` gives each stage its
decoder layers: the first and last stages carry fewer layers because they also hold the embedding
and the output head (each counts as ``*_less`` layers of work). ``module_names_per_stage`` turns that
into the module names each stage keeps.
"""
from __future__ import annotations

from typing import List, Optional, Sequence

__all__ = ["split_layers", "check_layers_per_stage", "module_names_per_stage", "stage_ids_of_rank"]


def _stage_sizes(num_layers: int, num_stages: int, first_less: int, last_less: int) -> List[int]:
    if num_stages == 1:
        return [num_layers]
    base, extra = divmod(num_layers + first_less + last_less, num_stages)
    sizes = [base + (1 if s < extra else 0) for s in range(num_stages)]
    sizes[0] -= first_less
    sizes[-1] -= last_less
    return sizes


def split_layers(num_layers: int, num_stages: int, first_stage_less: int = 1, last_stage_less: int = 1
                 ) -> List[List[int]]:
    """Layer indices of every stage; the extra work of the first/last stage is counted as layers.

    The ``num_layers + first_stage_less + last_stage_less`` work units are dealt as evenly as possible
    (earlier stages get the remainder); a stage may end up with no layer only when
    ``num_layers < num_stages``-ish cases force it, which raises a clear error instead."""
    for name, value in (("num_layers", num_layers), ("num_stages", num_stages)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"split_layers({name}): expected a positive int, got {value!r}")
    if first_stage_less < 0 or last_stage_less < 0:
        raise ValueError("split_layers: first_stage_less / last_stage_less must be >= 0")
    sizes = _stage_sizes(num_layers, num_stages, first_stage_less, last_stage_less)
    if any(s < 0 for s in sizes) or any(s < 1 for s in sizes[1:-1]):
        raise ValueError(f"split_layers: {num_layers} layers cannot be split into {num_stages} stages with the first "
                         f"stage {first_stage_less} and the last stage {last_stage_less} layer(s) lighter (sizes "
                         f"{sizes}); use fewer stages or set first_stage_less/last_stage_less to 0")
    out, start = [], 0
    for size in sizes:
        out.append(list(range(start, start + size)))
        start += size
    return out


def check_layers_per_stage(layers_per_stage: Sequence[int], num_layers: int, num_stages: int,
                           what: str = "layers_per_stage") -> List[List[int]]:
    """Layer indices of every stage from an explicit split (``[3, 5]``: layers 0-2 on stage 0, 3-7 on stage 1).

    The split must have one entry per stage (``num_stages``: pipeline degree x stages per rank) and sum to
    ``num_layers``; the first and last stage may hold 0 layers (embedding / head only), the others at least one.
    Errors (``ValueError``) start with ``what`` (the config key that holds the split)."""
    sizes = list(layers_per_stage)
    if any(isinstance(n, bool) or not isinstance(n, int) or n < 0 for n in sizes):
        raise ValueError(f"{what}: expected non-negative ints, got {sizes}")
    if len(sizes) != num_stages:
        raise ValueError(f"{what}: {sizes} has {len(sizes)} entries; expected one per pipeline stage: {num_stages}")
    if sum(sizes) != num_layers:
        raise ValueError(f"{what}: {sizes} sums to {sum(sizes)} layers; the model has {num_layers}")
    if any(n < 1 for n in sizes[1:-1]):
        raise ValueError(f"{what}: {sizes}: only the first and the last stage may hold 0 layers")
    out, start = [], 0
    for size in sizes:
        out.append(list(range(start, start + size)))
        start += size
    return out


def module_names_per_stage(num_layers: int, num_stages: int, *, layer_prefix: str = "layers",
                           first: Sequence[str] = ("tok_embeddings",), last: Sequence[str] = ("norm", "output"),
                           first_stage_less: int = 1, last_stage_less: int = 1,
                           layers_per_stage: Optional[Sequence[int]] = None) -> List[List[str]]:
    """Module names each stage keeps: ``first`` on stage 0, its layers as ``<layer_prefix>.<i>``, ``last``
    on the last stage (TorchTitan's ``module_fqns_per_model_part``). ``layers_per_stage`` gives the split
    explicitly (:func:`check_layers_per_stage`); otherwise :func:`split_layers` balances it."""
    if layers_per_stage is not None:
        layers = check_layers_per_stage(layers_per_stage, num_layers, num_stages)
    else:
        layers = split_layers(num_layers, num_stages, first_stage_less, last_stage_less)
    out = []
    for s, ids in enumerate(layers):
        names = list(first) if s == 0 else []
        names += [f"{layer_prefix}.{i}" for i in ids]
        if s == num_stages - 1:
            names += list(last)
        out.append(names)
    return out


def stage_ids_of_rank(rank: int, num_ranks: int, stages_per_rank: int, style: str = "loop") -> List[int]:
    """The stage indices rank ``rank`` holds (``loop``: r, r+p, ...; ``v``: r and 2p-1-r)."""
    from hyper_parallel.pipeline.schedules import stage_to_rank_map  # pylint: disable=import-outside-toplevel
    mapping = stage_to_rank_map(num_ranks, num_ranks * stages_per_rank, style)
    return [s for s, r in enumerate(mapping) if r == rank]
