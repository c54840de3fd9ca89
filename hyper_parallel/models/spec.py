# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""What a trainer needs to know about a model (TorchTitan's ``TrainSpec``), and the parallel degrees.

Pure Python: no framework is imported here. A :class:`ModelSpec` bundles the model class, its
config flavor table, the function that applies the parallel plan (TP/SP/loss parallel, CP, FSDP/HSDP,
EP, activation policy), the pipeline split, the Hugging Face state-dict adapter and the loss.
:class:`ParallelDims` holds the degrees of each parallelism, validates them against the world size
and names the device-mesh dimensions that ``parallelize_fn`` reads.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

__all__ = ["ModelSpec", "ParallelDims", "MESH_DIM_ORDER", "merge_mesh_dims", "fsdp_mesh"]

#: Order of the world mesh's dimensions (outermost first); size-1 ones except ``dp_shard`` are left out.
MESH_DIM_ORDER = ("pp", "dp_replicate", "dp_shard", "cp", "tp")


@dataclass(frozen=True)
class ParallelDims:
    """Degrees of each parallelism (TorchTitan's ``ParallelDims``).

    ``dp_shard=-1`` takes whatever the other degrees leave of ``world_size``. ``ep`` experts-parallel
    ranks are borrowed from ``dp_shard * cp * tp`` (the MoE layers' mesh is built by the model's
    ``parallelize_fn``); ``etp`` is the tensor-parallel degree inside each expert (1 or ``tp``).
    """

    world_size: int
    dp_replicate: int = 1
    dp_shard: int = -1
    cp: int = 1
    tp: int = 1
    pp: int = 1
    ep: int = 1
    etp: int = 1

    def __post_init__(self) -> None:
        for name in ("world_size", "dp_replicate", "cp", "tp", "pp", "ep", "etp"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"ParallelDims({name}={value!r}): expected a positive int")
        others = self.dp_replicate * self.cp * self.tp * self.pp
        if self.dp_shard == -1:
            if self.world_size % others:
                raise ValueError(f"ParallelDims: world_size={self.world_size} is not divisible by dp_replicate * cp"
                                 f" * tp * pp = {others}")
            object.__setattr__(self, "dp_shard", self.world_size // others)
        elif not isinstance(self.dp_shard, int) or self.dp_shard < 1:
            raise ValueError(f"ParallelDims(dp_shard={self.dp_shard!r}): expected a positive int or -1")
        if others * self.dp_shard != self.world_size:
            raise ValueError(f"ParallelDims: dp_replicate * dp_shard * cp * tp * pp = {others * self.dp_shard} "
                             f"!= world_size={self.world_size}")
        if self.etp not in (1, self.tp):
            raise ValueError(f"ParallelDims(etp={self.etp}): expected 1 or tp={self.tp}")
        if self.ep > 1 and (self.dp_shard * self.cp * self.tp) % self.ep:
            raise ValueError(f"ParallelDims(ep={self.ep}): must divide dp_shard * cp * tp = "
                             f"{self.dp_shard * self.cp * self.tp}")

    @property
    def dp(self) -> int:
        """Data-parallel degree (``dp_replicate * dp_shard``)."""
        return self.dp_replicate * self.dp_shard

    @property
    def fsdp_enabled(self) -> bool:
        """Whether parameters are sharded (``dp_shard * cp > 1``: FSDP shards over the CP ranks too)."""
        return self.dp_shard * self.cp > 1

    def mesh_dims(self) -> List[Tuple[str, int]]:
        """``(name, size)`` of the mesh dimensions in :data:`MESH_DIM_ORDER`: ``dp_shard`` always (size 1
        included, so ``mesh["dp_shard", "tp"]`` exists), the others when larger than 1."""
        return [(name, getattr(self, name)) for name in MESH_DIM_ORDER
                if getattr(self, name) > 1 or name == "dp_shard"]

    def build_mesh(self, device_type: str = "cpu") -> Any:
        """The world ``DeviceMesh`` with the dimensions of :meth:`mesh_dims` (initialises the process
        group if needed)."""
        from hyper_parallel.core.device_mesh import init_device_mesh
        dims = self.mesh_dims()
        return init_device_mesh(device_type, tuple(s for _, s in dims), mesh_dim_names=tuple(n for n, _ in dims))

    def fsdp_mesh(self, world_mesh: Any) -> Any:
        """:func:`fsdp_mesh` of these degrees."""
        return fsdp_mesh(world_mesh, self)


def fsdp_mesh(world_mesh: Any, dims: Any) -> Any:
    """The mesh ``fully_shard`` takes, sliced from ``world_mesh`` (dims named as in :data:`MESH_DIM_ORDER`;
    size-1 dims may be absent): 1-D over ``dp_shard * cp`` (FSDP), 2-D ``(dp_replicate, dp_shard * cp)``
    (HSDP), 1-D ``dp_replicate`` when nothing is sharded, or None on one data-parallel rank. ``dims``: any
    object with the degrees as attributes (:class:`ParallelDims`, the trainer's ``ParallelDims``)."""
    shard = [n for n in ("dp_shard", "cp") if getattr(dims, n) > 1]
    if len(shard) == 2:
        world_mesh = merge_mesh_dims(world_mesh, ("dp_shard", "cp"), "dp_shard_cp")
        shard = ["dp_shard_cp"]
    names = (["dp_replicate"] if dims.dp_replicate > 1 else []) + shard
    return world_mesh[tuple(names)] if names else None


def merge_mesh_dims(world_mesh: Any, names: Tuple[str, ...], new_name: str) -> Any:
    """A mesh over the same ranks as ``world_mesh`` with the adjacent dims ``names`` merged into one dim
    ``new_name`` (a row-major reshape). Every rank must call it: it creates the merged dim's groups."""
    from hyper_parallel.core.device_mesh import DeviceMesh
    dim_names = list(world_mesh.mesh_dim_names or ())
    idx = [dim_names.index(n) if n in dim_names else -1 for n in names]
    if -1 in idx or idx != list(range(idx[0], idx[0] + len(idx))):
        raise ValueError(f"merge_mesh_dims: {names} are not adjacent dims of {world_mesh}")
    shape = list(world_mesh.shape)
    merged = 1
    for i in idx:
        merged *= shape[i]
    new_shape = shape[:idx[0]] + [merged] + shape[idx[-1] + 1:]
    new_names = dim_names[:idx[0]] + [new_name] + dim_names[idx[-1] + 1:]
    nested: Any = list(world_mesh.topology.ranks)
    for size in reversed(new_shape[1:]):
        nested = [nested[i:i + size] for i in range(0, len(nested), size)]
    return DeviceMesh(world_mesh.device_type, nested, mesh_dim_names=tuple(new_names), platform=world_mesh.platform)


@dataclass(frozen=True)
class ModelSpec:
    """Everything a trainer needs to build, parallelise, split and checkpoint one model family.

    - ``model_cls(config)`` builds the model (``config = flavors[name]``);
    - ``parallelize_fn(model, world_mesh, parallel_dims, **options)`` applies TP/SP/loss parallel, CP,
      FSDP/HSDP, EP and the activation policy in place and returns the model (``options``: see the
      model's ``parallelize.py``);
    - ``pipelining_fn(model, world_mesh, parallel_dims, *, schedule, n_microbatches, loss_fn=None, **kw)``
      returns ``(schedule, stage_modules)`` (apply ``parallelize_fn`` to each stage module after);
    - ``state_dict_adapter(config)`` converts state dicts to and from Hugging Face names
      (``to_hf`` / ``from_hf`` / ``config_from_hf``);
    - ``loss_fn(logits, labels)`` is the next-token loss.
    """

    name: str
    model_cls: Any
    config_cls: Any
    flavors: Mapping[str, Any]
    parallelize_fn: Callable[..., Any]
    pipelining_fn: Optional[Callable[..., Any]]
    state_dict_adapter: Any
    loss_fn: Callable[..., Any]
    hf_architecture: str = ""
    extras: Dict[str, Any] = field(default_factory=dict)

    def config(self, flavor: str, **overrides: Any) -> Any:
        """The config of ``flavor`` (with ``overrides`` replacing fields); unknown flavor: a clear error."""
        if flavor not in self.flavors:
            raise KeyError(f"model {self.name!r} has no flavor {flavor!r}; known flavors: {sorted(self.flavors)}")
        cfg = self.flavors[flavor]
        if overrides and getattr(cfg, "head_dim_derived", False) and "head_dim" not in overrides:
            overrides["head_dim"] = 0  # derived from the (possibly overridden) sizes again
        return dataclasses.replace(cfg, **overrides) if overrides else cfg

    def build(self, flavor: str, **overrides: Any) -> Any:
        """``model_cls(config(flavor, **overrides))`` (wrap in ``init_empty_weights()`` for the meta device)."""
        return self.model_cls(self.config(flavor, **overrides))
