# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Context-parallel names LlamaFactory's main branch imports (``…llamafactory.context_parallel``).

The rank arithmetic is exact for any ``cp_size`` (the mesh order is ``dp_replicate, dp_shard, cp, tp``, as
``hyper_parallel.models.ParallelDims``): :func:`get_cp_rank`, :func:`get_dp_rank`, :func:`get_cp_group_ranks`,
:func:`get_cp_group`, and :func:`shard_inputs_for_cp` (contiguous split of the sequence dim). The model side,
:func:`cp_prepare_model`, supports ``cp_size == 1`` only: context-parallel attention for ``transformers``
models is not wired yet (``hp-train`` has it), so ``cp_size > 1`` is refused there with a clear error.
No framework is imported here (tensors are handled through their own methods, the rank through the platform).
"""
from __future__ import annotations

from typing import Any, Mapping, Tuple

from hyper_parallel.integration.transformers.args import HyperParallelArguments

__all__ = ["cp_prepare_model", "get_cp_rank", "get_dp_rank", "get_cp_group", "get_cp_group_ranks",
           "shard_inputs_for_cp", "SEQUENCE_KEYS"]

#: Input keys whose dim 1 is the sequence (split by :func:`shard_inputs_for_cp`).
SEQUENCE_KEYS = ("input_ids", "labels", "attention_mask", "position_ids", "token_type_ids", "shift_labels",
                 "loss_mask")


def _check(hp_args: Any) -> HyperParallelArguments:
    if not isinstance(hp_args, HyperParallelArguments):
        raise TypeError(f"context_parallel(hp_args): expected a HyperParallelArguments, got {type(hp_args).__name__}")
    return hp_args


def _rank_and_world() -> Tuple[int, int]:
    from hyper_parallel.platform import get_platform
    plat = get_platform()
    return plat.get_rank(), plat.get_world_size()


def _dims(hp_args: HyperParallelArguments) -> Any:
    from hyper_parallel.models.parallel_dims import ParallelDims
    _, world = _rank_and_world()
    try:
        return ParallelDims(**_check(hp_args).degrees(), world_size=world)
    except ValueError as exc:
        raise ValueError(f"hyper_parallel_args: {exc}") from None


def get_cp_rank(hp_args: HyperParallelArguments) -> int:
    """This rank's position in its context-parallel group (0 when ``cp_size == 1``)."""
    rank, _ = _rank_and_world()
    return _dims(hp_args).coordinate(rank)["cp"]


def get_dp_rank(hp_args: HyperParallelArguments) -> int:
    """Which part of the global batch this rank trains on (``dp_replicate`` major, ``dp_shard`` minor)."""
    rank, _ = _rank_and_world()
    return _dims(hp_args).dp_rank(rank)


def get_cp_group_ranks(hp_args: HyperParallelArguments) -> Tuple[int, ...]:
    """The global ranks of this rank's context-parallel group, ascending (this rank alone for ``cp_size == 1``)."""
    rank, _ = _rank_and_world()
    for group in _dims(hp_args).flat_groups(("cp",)):
        if rank in group:
            return group
    raise RuntimeError(f"get_cp_group_ranks: rank {rank} is in no context-parallel group")  # unreachable


def get_cp_group(hp_args: HyperParallelArguments) -> Any:
    """The process group of this rank's context-parallel peers (None when ``cp_size == 1``); every rank must call
    it the first time (the meshes are built collectively)."""
    if _check(hp_args).cp_size == 1:
        return None
    from hyper_parallel.integration.transformers import parallel_dims
    return parallel_dims(hp_args).mesh("cp").get_group()


def shard_inputs_for_cp(inputs: Mapping[str, Any], cp_rank: int, cp_size: int) -> dict:
    """This CP rank's contiguous slice of the sequence dim (dim 1) of every tensor in :data:`SEQUENCE_KEYS`;
    other entries pass through. The sequence length must be divisible by ``cp_size``. Identity for
    ``cp_size == 1``."""
    if isinstance(cp_size, bool) or not isinstance(cp_size, int) or cp_size < 1:
        raise ValueError(f"shard_inputs_for_cp(cp_size): expected a positive int, got {cp_size!r}")
    if isinstance(cp_rank, bool) or not isinstance(cp_rank, int) or not 0 <= cp_rank < cp_size:
        raise ValueError(f"shard_inputs_for_cp(cp_rank): expected an int in [0, {cp_size}), got {cp_rank!r}")
    out = dict(inputs)
    if cp_size == 1:
        return out
    for key in SEQUENCE_KEYS:
        value = out.get(key)
        if value is None or not hasattr(value, "dim") or value.dim() < 2:
            continue
        seq = value.shape[1]
        if seq % cp_size:
            raise ValueError(f"shard_inputs_for_cp: inputs[{key!r}] has sequence length {seq}, not divisible by "
                             f"cp_size={cp_size} (pad to a multiple)")
        part = seq // cp_size
        out[key] = value[:, cp_rank * part:(cp_rank + 1) * part].contiguous()
    return out


def cp_prepare_model(model: Any, accelerator: Any, hp_args: HyperParallelArguments) -> Any:
    """Install context-parallel attention on ``model`` (LlamaFactory main calls it before
    ``fsdp2_prepare_model``). ``cp_size == 1``: returns the model unchanged. ``cp_size > 1``: refused (see the
    module docstring)."""
    del accelerator
    if _check(hp_args).cp_size == 1:
        return model
    raise ValueError(f"hyper_parallel_args.cp_size: {hp_args.cp_size} > 1 is not supported by the transformers "
                     "integration yet (context-parallel attention is wired for hp-train models only)")
