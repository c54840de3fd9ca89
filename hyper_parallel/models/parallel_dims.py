# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``ParallelDims``: the parallel degrees of one run, validated once, and the meshes built from them once.

One class for the models' ``parallelize_fn`` / ``pipelining_fn`` and the trainer (TorchTitan's
``ParallelDims``). Pure Python: the mesh is built lazily through ``hyper_parallel.core.device_mesh``.

The world mesh has the dimensions :data:`MESH_DIM_ORDER` = ``pp, dp_replicate, dp_shard, cp, tp``
(tensor parallel innermost) of size > 1, and ``dp_shard`` always (size 1 included, so
``world["dp_shard", "tp"]`` exists). Named sub-meshes are sliced or merged from it once, in
:meth:`ParallelDims.build_mesh`: ``dp`` (replicate x shard: where the batch is split), ``dp_shard_cp``
(shard x cp), ``dp_cp`` and ``loss`` (every rank holding a different part of the batch or sequence), and
``fsdp`` (the mesh ``fully_shard`` takes: 1-D ``dp_shard_cp``, or 2-D ``(dp_replicate, dp_shard_cp)`` for
HSDP). ``ep`` borrows its ranks from ``dp_shard x cp x tp`` (TorchTitan's rule) and gets no world-mesh
dimension; ``etp`` is the tensor-parallel degree inside each expert (1 or ``tp``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple

__all__ = ["ParallelDims", "MESH_DIM_ORDER", "DEGREE_NAMES", "check_degrees", "degrees_of", "merge_mesh_dims",
           "fsdp_mesh"]

#: Order of the world mesh's dimensions (outermost first); size-1 ones except ``dp_shard`` are left out.
MESH_DIM_ORDER = ("pp", "dp_replicate", "dp_shard", "cp", "tp")
#: Every degree, as ``[parallelism]`` names it (the keys of :func:`check_degrees`' and :func:`degrees_of`'s mappings)
DEGREE_NAMES = ("dp_replicate", "dp_shard", "cp", "tp", "pp", "ep", "etp")
#: Degrees that may be ``-1`` (inferred from the world size); ``ep``, ``etp`` and ``world_size`` may not.
INFERABLE = MESH_DIM_ORDER
#: Named meshes :meth:`ParallelDims.mesh` knows: the world, its 1-D dims and the merged ones.
MESH_NAMES = ("world",) + MESH_DIM_ORDER + ("dp", "dp_shard_cp", "dp_cp", "loss", "fsdp")
_MERGED = (("dp", ("dp_replicate", "dp_shard")), ("dp_shard_cp", ("dp_shard", "cp")),
           ("dp_cp", ("dp_replicate", "dp_shard", "cp")))


def _product_text(degrees: Mapping[str, int], skip: Optional[str] = None) -> str:
    return "*".join(f"{n}({degrees[n]})" for n in MESH_DIM_ORDER if n != skip)


def _check_values(out: Mapping[str, Any]) -> None:
    for name, value in out.items():
        if isinstance(value, bool) or not isinstance(value, int) or value == 0 or value < -1:
            hint = "a positive int or -1 (inferred)" if name in INFERABLE else "a positive int"
            raise ValueError(f"ParallelDims({name}={value!r}): expected {hint}")
        if value == -1 and name not in INFERABLE:
            raise ValueError(f"ParallelDims({name}=-1): {name} cannot be inferred (it borrows ranks; give it "
                             f"explicitly)")
    inferred = [n for n in INFERABLE if out[n] == -1]
    if len(inferred) > 1:
        raise ValueError(f"ParallelDims: only one degree may be -1 (inferred), got {inferred}")


def _resolve_product(out: Dict[str, int], world_size: Any) -> None:
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"ParallelDims(world_size={world_size!r}): expected a positive int")
    inferred = [n for n in INFERABLE if out[n] == -1]
    known = math.prod(max(1, out[n]) for n in INFERABLE)
    if inferred:
        if world_size % known:
            raise ValueError(f"ParallelDims: cannot infer {inferred[0]}: world_size {world_size} is not divisible "
                             f"by {_product_text(out, skip=inferred[0])} = {known}")
        out[inferred[0]] = world_size // known
    elif known != world_size:
        raise ValueError(f"ParallelDims: {_product_text(out)} = {known} does not match world_size {world_size}")


def check_degrees(degrees: Mapping[str, Any], world_size: Optional[int] = None) -> Dict[str, int]:
    """The one validator of parallel degrees (``ParallelDims`` and the trainer's config use it).

    ``degrees`` maps the names of :data:`MESH_DIM_ORDER`, ``ep`` and ``etp`` (missing ones are 1) to ints;
    one of :data:`MESH_DIM_ORDER` may be ``-1``. Without ``world_size`` only each value is checked; with it,
    the ``-1`` is inferred and the product must equal ``world_size``. Returns the degrees with the ``-1``
    resolved (when ``world_size`` is given). Errors (``ValueError``) name the degree, or the product that does
    not match: ``pp(1)*dp_replicate(1)*dp_shard(2)*cp(1)*tp(2) = 4 does not match world_size 8``."""
    out = {n: degrees.get(n, 1) for n in MESH_DIM_ORDER + ("ep", "etp")}
    _check_values(out)
    if world_size is None:
        return out
    _resolve_product(out, world_size)
    if out["etp"] not in (1, out["tp"]):
        raise ValueError(f"ParallelDims(etp={out['etp']}): expected 1 or tp={out['tp']}")
    borrow = out["dp_shard"] * out["cp"] * out["tp"]
    if borrow % out["ep"]:
        raise ValueError(f"ParallelDims(ep={out['ep']}): must divide dp_shard*cp*tp = {out['dp_shard']}*"
                         f"{out['cp']}*{out['tp']} = {borrow} (expert parallel borrows those ranks)")
    return out



def degrees_of(dims: Any) -> Dict[str, int]:
    """The degrees of ``dims`` (a :class:`ParallelDims`, or any object with the degrees as attributes; a missing one
    is 1) as the mapping :func:`check_degrees` returns, keyed by :data:`DEGREE_NAMES`: what a layout rule written
    for the config's resolved degrees reads on the ranks."""
    return {name: getattr(dims, name, 1) for name in DEGREE_NAMES}

@dataclass(frozen=True)
class ParallelDims:
    """Parallel degrees; ``-1`` in one of ``dp_replicate, dp_shard, cp, tp, pp`` is inferred from ``world_size``.

    Example::

        dims = ParallelDims(dp_replicate=1, dp_shard=-1, cp=1, tp=2, pp=1, ep=1, world_size=8)
        dims.dp_shard          # 4
        world = dims.build_mesh("cpu")   # dims ("dp_shard", "tp"); named sub-meshes built once
        dims.mesh("fsdp"), dims.mesh("tp"), dims.mesh("loss")

    Bad degrees raise ``ValueError`` naming the degree or the product (see :func:`check_degrees`).
    """

    dp_replicate: int = 1
    dp_shard: int = -1
    cp: int = 1
    tp: int = 1
    pp: int = 1
    ep: int = 1
    world_size: int = 1
    etp: int = 1
    _meshes: Dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        degrees = {n: getattr(self, n) for n in MESH_DIM_ORDER + ("ep", "etp")}
        for name, value in check_degrees(degrees, self.world_size).items():
            object.__setattr__(self, name, value)

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
        """Whether parameters are sharded (over ``dp_shard x cp``: FSDP shards over the CP ranks too)."""
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

    def mesh_dims(self) -> List[Tuple[str, int]]:
        """``(name, size)`` of the world mesh's dimensions in :data:`MESH_DIM_ORDER`: ``dp_shard`` always (size 1
        included), the others when larger than 1."""
        return [(n, getattr(self, n)) for n in MESH_DIM_ORDER if getattr(self, n) > 1 or n == "dp_shard"]

    def coordinate(self, rank: int) -> Dict[str, int]:
        """This rank's coordinate along each of :data:`MESH_DIM_ORDER` (row-major, as the world mesh)."""
        out = {}
        for name in reversed(MESH_DIM_ORDER):
            size = getattr(self, name)
            out[name] = rank % size
            rank //= size
        return {n: out[n] for n in MESH_DIM_ORDER}

    def dp_rank(self, rank: int) -> int:
        """Which part of the global batch ``rank`` trains on (``dp_replicate`` major, ``dp_shard`` minor)."""
        c = self.coordinate(rank)
        return c["dp_replicate"] * self.dp_shard + c["dp_shard"]

    def flat_groups(self, parts: Tuple[str, ...]) -> Tuple[Tuple[int, ...], ...]:
        """Every group of ranks that differ only along the dims ``parts`` (ascending ranks, sorted groups)."""
        groups: Dict[Tuple[int, ...], list] = {}
        for rank in range(self.world_size):
            c = self.coordinate(rank)
            groups.setdefault(tuple(c[n] for n in MESH_DIM_ORDER if n not in parts), []).append(rank)
        return tuple(tuple(g) for _, g in sorted(groups.items()))

    # ------------------------------------------------------------------ meshes
    def build_mesh(self, device_type: Optional[str] = None, platform: Optional[str] = None) -> Any:
        """Build the world mesh (initialising the process group if needed) and the named sub-meshes, once;
        returns the world mesh. Every rank must call it (it creates every group in the same order).
        ``device_type`` defaults to the platform's (``cuda`` under NCCL, else ``cpu``)."""
        if "world" in self._meshes:
            return self._meshes["world"]
        if device_type is None:
            from hyper_parallel.platform import get_platform  # pylint: disable=import-outside-toplevel
            device_type = get_platform(platform).default_device_type()
        from hyper_parallel.core.device_mesh import init_device_mesh  # pylint: disable=import-outside-toplevel
        names, sizes = zip(*self.mesh_dims())
        world = init_device_mesh(device_type, sizes, mesh_dim_names=names, platform=platform)
        meshes: Dict[str, Any] = {"world": world}
        for n in MESH_DIM_ORDER:
            meshes[n] = world[n] if getattr(self, n) > 1 else None
        for name, parts in _MERGED:
            meshes[name] = self._merged(world, name, parts)
        meshes["loss"] = meshes["dp_cp"]
        meshes["fsdp"] = fsdp_mesh(world, self)
        self._meshes.update(meshes)
        if meshes["tp"] is not None and meshes["fsdp"] is not None and meshes["fsdp"].ndim == 1:
            _tp_fsdp_groups(meshes["fsdp"], meshes["tp"])
        return world

    def _merged(self, world: Any, name: str, parts: Tuple[str, ...]) -> Any:
        """The 1-D mesh over ``parts`` (those of size > 1) merged; None when all are 1."""
        present = tuple(p for p in parts if getattr(self, p) > 1)
        if not present:
            return None
        if len(present) == 1:
            return world[present[0]]
        keep = tuple(p for p in parts if p in (world.mesh_dim_names or ()))  # dp_shard is always there
        return merge_mesh_dims(world, keep, name)[name]

    def mesh(self, name: str) -> Any:
        """A named mesh (one of :data:`MESH_NAMES`); None when that degree is 1. Call :meth:`build_mesh` first."""
        if name not in MESH_NAMES:
            raise KeyError(f"ParallelDims.mesh({name!r}): expected one of {list(MESH_NAMES)}")
        if "world" not in self._meshes:
            raise RuntimeError("ParallelDims.mesh: call build_mesh(device_type) first")
        return self._meshes[name]

    def fsdp_mesh(self, world_mesh: Any) -> Any:
        """:func:`fsdp_mesh` of these degrees."""
        return fsdp_mesh(world_mesh, self)


def _tp_fsdp_groups(fsdp: Any, tp: Any) -> None:
    """Create, on every rank in the same order, the groups of the 2-D ``(fsdp, tp)`` slices ``fully_shard``
    takes for TP-sharded parameters (``hyper_parallel.fsdp.units.find_parent_mesh``): in a world of more than
    two dims (``(dp_shard, cp, tp)``, ``(pp, dp_shard, tp)`` ...) each rank slices its own, and a group is
    created by every rank of the world (gloo)."""
    from hyper_parallel.core.process_group import get_or_create_group, get_rank  # noqa  # pylint: disable=C0415
    from hyper_parallel.fsdp.units import find_parent_mesh  # pylint: disable=import-outside-toplevel
    parent, dp_name, tp_name = find_parent_mesh(fsdp, tp, get_rank(platform=fsdp.platform), "")
    topo = parent.topology
    pair = (topo.dim_index(dp_name), topo.dim_index(tp_name))
    for dims in (pair, pair[::-1]):
        for rank in topo.ranks:
            get_or_create_group(topo.sub(dims, rank).ranks, parent.platform)


def fsdp_mesh(world_mesh: Any, dims: Any) -> Any:
    """The mesh ``fully_shard`` takes, sliced from ``world_mesh`` (dims named as in :data:`MESH_DIM_ORDER`;
    size-1 dims may be absent): 1-D over ``dp_shard * cp`` (FSDP), 2-D ``(dp_replicate, dp_shard * cp)``
    (HSDP), 1-D ``dp_replicate`` when nothing is sharded, or None on one data-parallel rank. ``dims``: a
    :class:`ParallelDims` (its mesh built by :meth:`ParallelDims.build_mesh` is reused) or any object with the
    degrees as attributes."""
    built = getattr(dims, "_meshes", None)
    if built and built.get("world") is world_mesh and "fsdp" in built:
        return built["fsdp"]
    shard = [n for n in ("dp_shard", "cp") if getattr(dims, n) > 1]
    if len(shard) == 2:
        world_mesh = merge_mesh_dims(world_mesh, ("dp_shard", "cp"), "dp_shard_cp")
        shard = ["dp_shard_cp"]
    names = (["dp_replicate"] if dims.dp_replicate > 1 else []) + shard
    return world_mesh[tuple(names)] if names else None


def merge_mesh_dims(world_mesh: Any, names: Tuple[str, ...], new_name: str) -> Any:
    """A mesh over the same ranks as ``world_mesh`` with the adjacent dims ``names`` merged into one dim
    ``new_name`` (a row-major reshape). Every rank must call it: it creates the merged dim's groups."""
    from hyper_parallel.core.device_mesh import DeviceMesh  # pylint: disable=import-outside-toplevel
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
