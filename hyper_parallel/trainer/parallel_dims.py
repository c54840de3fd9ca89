# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``ParallelDims``: the parallel degrees of one run, validated once, and the meshes built from them once.

The world mesh has the dimensions ``pp, dp_replicate, dp_shard, cp, tp`` (those of size > 1; TorchTitan's
order: tensor parallel innermost); named sub-meshes are sliced or flattened from it: ``dp`` (replicate x
shard: where the batch is split), ``dp_shard_cp`` (FSDP's mesh: shard x cp), ``dp_cp`` and ``loss``
(every rank holding a different part of the batch or sequence). ``ep`` borrows its ranks from
``dp_shard x cp x tp`` (TorchTitan's rule) and gets no world-mesh dimension.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple

__all__ = ["ParallelDims"]

_DIMS = ("pp", "dp_replicate", "dp_shard", "cp", "tp")


@dataclass
class ParallelDims:
    """Parallel degrees; ``-1`` in one of ``dp_replicate, dp_shard, cp, tp, pp`` is inferred from ``world_size``.

    Example::

        dims = ParallelDims(dp_replicate=1, dp_shard=-1, cp=1, tp=2, pp=1, ep=1, world_size=8)
        dims.dp_shard          # 4
        mesh = dims.build_mesh("cpu")
        dims.mesh("dp_shard_cp"), dims.mesh("tp")
    """

    dp_replicate: int = 1
    dp_shard: int = -1
    cp: int = 1
    tp: int = 1
    pp: int = 1
    ep: int = 1
    world_size: int = 1
    _meshes: Dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name in ("dp_replicate", "dp_shard", "cp", "tp", "pp", "ep", "world_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value == 0 or value < -1:
                raise ValueError(f"ParallelDims({name}): expected a positive int or -1 (inferred), got {value!r}")
        if self.world_size == -1 or self.ep == -1:
            raise ValueError("ParallelDims: world_size and ep cannot be -1 (inferred)")
        self._infer()
        borrow = self.dp_shard * self.cp * self.tp
        if borrow % self.ep:
            raise ValueError(f"ParallelDims: ep={self.ep} must divide dp_shard*cp*tp = {self.dp_shard}*{self.cp}*"
                             f"{self.tp} = {borrow} (expert parallel borrows those ranks)")

    def _infer(self) -> None:
        inferred = [n for n in _DIMS if getattr(self, n) == -1]
        if len(inferred) > 1:
            raise ValueError(f"ParallelDims: only one degree may be -1 (inferred), got {inferred}")
        known = 1
        for n in _DIMS:
            known *= max(1, getattr(self, n))
        if inferred:
            if self.world_size % known:
                raise ValueError(f"ParallelDims: cannot infer {inferred[0]}: world_size {self.world_size} is not "
                                 f"divisible by {self._product_text(skip=inferred[0])} = {known}")
            setattr(self, inferred[0], self.world_size // known)
        elif known != self.world_size:
            raise ValueError(f"ParallelDims: {self._product_text()} = {known} does not match world_size "
                             f"{self.world_size}")

    def _product_text(self, skip: Optional[str] = None) -> str:
        return "*".join(f"{n}({getattr(self, n)})" for n in _DIMS if n != skip)

    # ------------------------------------------------------------------ derived degrees
    @property
    def dp(self) -> int:
        """Data-parallel degree (replicate x shard): how many parts the global batch is split into."""
        return self.dp_replicate * self.dp_shard

    @property
    def dp_enabled(self) -> bool:
        """Whether the batch is split."""
        return self.dp > 1

    @property
    def fsdp_enabled(self) -> bool:
        """Whether parameters are sharded (over ``dp_shard x cp``)."""
        return self.dp_shard * self.cp > 1

    @property
    def tp_enabled(self) -> bool:
        """Tensor parallel on."""
        return self.tp > 1

    @property
    def cp_enabled(self) -> bool:
        """Context parallel on."""
        return self.cp > 1

    @property
    def pp_enabled(self) -> bool:
        """Pipeline parallel on."""
        return self.pp > 1

    @property
    def ep_enabled(self) -> bool:
        """Expert parallel on."""
        return self.ep > 1

    @property
    def mesh_dims(self) -> Tuple[Tuple[str, int], ...]:
        """``(name, size)`` of the world mesh's dimensions (those of size > 1; one ``dp_shard`` dim of 1 when
        all are 1)."""
        dims = tuple((n, getattr(self, n)) for n in _DIMS if getattr(self, n) > 1)
        return dims or (("dp_shard", 1),)

    def coordinate(self, rank: int) -> Dict[str, int]:
        """This rank's coordinate along each of ``pp, dp_replicate, dp_shard, cp, tp`` (row-major)."""
        out = {}
        for name in reversed(_DIMS):
            size = getattr(self, name)
            out[name] = rank % size
            rank //= size
        return {n: out[n] for n in _DIMS}

    def dp_rank(self, rank: int) -> int:
        """Which part of the global batch ``rank`` trains on (``dp_replicate`` major, ``dp_shard`` minor)."""
        c = self.coordinate(rank)
        return c["dp_replicate"] * self.dp_shard + c["dp_shard"]

    # ------------------------------------------------------------------ meshes
    def build_mesh(self, device_type: str = "cpu") -> Any:
        """Build the world mesh and the named sub-meshes (once); returns the world mesh."""
        if "world" in self._meshes:
            return self._meshes["world"]
        from hyper_parallel.core.device_mesh import init_device_mesh
        names, sizes = zip(*self.mesh_dims)
        world = init_device_mesh(device_type, sizes, mesh_dim_names=names)
        self._meshes["world"] = world
        present = set(names)
        for n in names:
            self._meshes[n] = world[n]
        for name, parts in (("dp", ("dp_replicate", "dp_shard")), ("dp_shard_cp", ("dp_shard", "cp")),
                            ("dp_cp", ("dp_replicate", "dp_shard", "cp"))):
            parts = tuple(p for p in parts if p in present)
            if len(parts) == 1:
                self._meshes[name] = world[parts[0]]
            elif parts:
                self._meshes[name] = self._flat_mesh(device_type, name, parts)
        self._meshes["loss"] = self._meshes.get("dp_cp")
        return world

    def flat_groups(self, parts: Tuple[str, ...]) -> Tuple[Tuple[int, ...], ...]:
        """Every group of ranks that differ only along the dims ``parts`` (ascending ranks, sorted groups)."""
        groups: Dict[Tuple[int, ...], list] = {}
        for rank in range(self.world_size):
            c = self.coordinate(rank)
            groups.setdefault(tuple(c[n] for n in _DIMS if n not in parts), []).append(rank)
        return tuple(tuple(g) for _, g in sorted(groups.items()))

    def _flat_mesh(self, device_type: str, name: str, parts: Tuple[str, ...]) -> Any:
        """A 1-D mesh over ``parts`` flattened; every rank creates every such group in the same order."""
        from hyper_parallel.core.device_mesh import DeviceMesh
        from hyper_parallel.core.process_group import get_or_create_group, get_rank
        me = get_rank()
        mine = None
        for ranks in self.flat_groups(parts):
            get_or_create_group(ranks)
            if me in ranks:
                mine = ranks
        return DeviceMesh(device_type, list(mine), mesh_dim_names=(name,))

    def mesh(self, name: str) -> Any:
        """A named mesh (``world``, ``pp``, ``dp_replicate``, ``dp_shard``, ``cp``, ``tp``, ``dp``,
        ``dp_shard_cp``, ``dp_cp``, ``loss``); None when that degree is 1. Call :meth:`build_mesh` first."""
        if "world" not in self._meshes:
            raise RuntimeError("ParallelDims.mesh: call build_mesh(device_type) first")
        known = ("world",) + _DIMS + ("dp", "dp_shard_cp", "dp_cp", "loss")
        if name not in known:
            raise KeyError(f"ParallelDims.mesh({name!r}): expected one of {list(known)}")
        return self._meshes.get(name)
