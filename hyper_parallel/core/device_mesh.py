# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``DeviceMesh``: an N-D topology of ranks plus one process group per mesh-dim slice.

All groups of all mesh dims are created when the mesh is built (a collective call on every rank)
and cached by rank tuple, so slicing (``mesh["tp"]``, ``mesh["dp", "tp"]``), flattening and
collectives never create groups lazily.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from hyper_parallel.core.mesh_topology import MeshTopology
from hyper_parallel.core.process_group import get_or_create_group, get_rank, get_world_size, is_initialized
from hyper_parallel.core import process_group as _pg

__all__ = ["DeviceMesh", "init_device_mesh"]

_MESHES: List["DeviceMesh"] = []


def _forget_meshes() -> None:
    """On ``destroy_process_group()``: every mesh drops its groups, so the backend's groups (and their
    worker threads) are freed now rather than at interpreter exit, where gloo can abort the process."""
    for mesh in _MESHES:
        mesh._release_groups()
    _MESHES.clear()
    _CHILDREN.clear()


_pg.ON_DESTROY.append(_forget_meshes)


def _flatten_ranks(mesh: Any) -> Tuple[Tuple[int, ...], Tuple[int, ...]]:
    """(shape, row-major ranks) of a nested list / tuple / tensor-like of ranks."""
    if hasattr(mesh, "tolist"):
        mesh = mesh.tolist()
    if isinstance(mesh, int):
        return (), (mesh,)
    shape: List[int] = []
    level = mesh
    while isinstance(level, (list, tuple)):
        shape.append(len(level))
        if not level:
            break
        level = level[0]
    flat: List[int] = []

    def walk(node, depth):
        if depth == len(shape):
            if not isinstance(node, int):
                raise ValueError(f"DeviceMesh(mesh): ragged or non-integer rank array at {node!r}")
            flat.append(node)
            return
        if not isinstance(node, (list, tuple)) or len(node) != shape[depth]:
            raise ValueError(f"DeviceMesh(mesh): ragged rank array, expected {shape[depth]} entries at depth {depth}")
        for child in node:
            walk(child, depth + 1)

    walk(mesh, 0)
    return tuple(shape), tuple(flat)


class DeviceMesh:
    """N-D mesh of ranks with named dimensions and eagerly created per-dimension groups.

    Args:
        device_type: ``"cpu"``, ``"cuda"`` or ``"npu"``.
        mesh: nested list (or tensor) of global ranks, e.g. ``[[0, 1], [2, 3]]``.
        mesh_dim_names: optional unique names, one per dimension.
    """

    def __init__(self, device_type: str, mesh: Any, *, mesh_dim_names: Optional[Sequence[str]] = None,
                 platform: Optional[str] = None, _topology: Optional[MeshTopology] = None) -> None:
        if not isinstance(device_type, str) or not device_type:
            raise ValueError(f"DeviceMesh(device_type): expected a device type string like 'cpu', got {device_type!r}")
        if _topology is None:
            shape, ranks = _flatten_ranks(mesh)
            _topology = MeshTopology(shape, ranks, mesh_dim_names)
        self.topology = _topology
        self.device_type = device_type
        self.platform = platform
        self._hash = hash((device_type, _topology))
        if not is_initialized(platform):
            raise RuntimeError("DeviceMesh: the default process group is not initialised; call "
                               "hyper_parallel.init_process_group() first (or launch with torchrun/msrun)")
        world = get_world_size(platform=platform)
        bad = [r for r in _topology.ranks if r >= world or r < 0]
        if bad:
            raise ValueError(f"DeviceMesh(mesh): ranks {bad} are outside the world of size {world}")
        self._rank = get_rank(platform=platform)
        self._coord = _topology.coordinate_of(self._rank)
        self._groups: List[Any] = []
        self._released = False
        for d in range(_topology.ndim):
            mine = None
            for ranks in _topology.groups_along(d):  # every rank creates every group, same order
                group = get_or_create_group(ranks, platform)
                if self._rank in ranks:
                    mine = group
            self._groups.append(mine)
        self._whole = get_or_create_group(_topology.ranks, platform) if _topology.ndim > 1 else self._groups[0]
        _MESHES.append(self)

    # ------------------------------------------------------------------ identity
    def __eq__(self, other: object) -> bool:
        return self is other or (isinstance(other, DeviceMesh) and self._hash == other._hash
                                 and self.device_type == other.device_type and self.topology == other.topology)

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self):
        return (_rebuild_mesh, (self.device_type, self.topology, self.platform))

    def __repr__(self) -> str:
        names = f", mesh_dim_names={self.mesh_dim_names}" if self.mesh_dim_names else ""
        return f"DeviceMesh('{self.device_type}', shape={self.shape}, ranks={list(self.topology.ranks)}{names})"

    # ------------------------------------------------------------------ shape
    @property
    def shape(self) -> Tuple[int, ...]:
        """Size of each mesh dimension."""
        return self.topology.shape

    @property
    def ndim(self) -> int:
        """Number of mesh dimensions."""
        return self.topology.ndim

    @property
    def mesh_dim_names(self) -> Optional[Tuple[str, ...]]:
        """Names of the mesh dimensions (or None)."""
        return self.topology.dim_names

    @property
    def mesh(self) -> List[Any]:
        """The ranks as a nested list."""
        flat = list(self.topology.ranks)
        for size in reversed(self.shape[1:]):
            flat = [flat[i:i + size] for i in range(0, len(flat), size)]
        return flat

    def size(self, mesh_dim: Union[int, str, None] = None) -> int:
        """Number of ranks (in one mesh dimension)."""
        if mesh_dim is None:
            return self.topology.size
        return self.shape[self.topology.dim_index(mesh_dim)]

    # ------------------------------------------------------------------ this rank
    def get_coordinate(self) -> Optional[Tuple[int, ...]]:
        """Coordinate of this rank in the mesh (None when this rank is not in it)."""
        return self._coord

    def get_local_rank(self, mesh_dim: Union[int, str] = 0) -> int:
        """This rank's coordinate along ``mesh_dim``."""
        if self._coord is None:
            raise RuntimeError(f"rank {self._rank} is not part of {self}")
        return self._coord[self.topology.dim_index(mesh_dim)]

    def get_group(self, mesh_dim: Union[int, str] = 0) -> Any:
        """The process group along ``mesh_dim`` that contains this rank."""
        if self.ndim > 1 and mesh_dim is None:
            raise ValueError("get_group: a multi-dimensional mesh needs mesh_dim")
        self._check_live("get_group")
        return self._groups[self.topology.dim_index(mesh_dim)]

    def whole_group(self) -> Any:
        """The group over every rank of the mesh (created with the mesh)."""
        self._check_live("whole_group")
        return self._whole

    def get_all_groups(self) -> List[Any]:
        """This rank's group of every mesh dimension."""
        self._check_live("get_all_groups")
        return list(self._groups)

    def _release_groups(self) -> None:
        self._groups = [None] * len(self._groups)
        self._whole = None
        self._released = True

    def _check_live(self, what: str) -> None:
        if self._released:
            raise RuntimeError(f"DeviceMesh.{what}: the process groups of {self} were destroyed by "
                               "destroy_process_group(); build a new mesh after init_process_group()")

    # ------------------------------------------------------------------ slicing / flattening
    def __getitem__(self, names: Union[str, Sequence[str]]) -> "DeviceMesh":
        if isinstance(names, str):
            names = (names,)
        names = tuple(names)
        if not self.mesh_dim_names:
            raise KeyError(f"cannot slice {self} by name: it has no mesh_dim_names")
        dims = [self.topology.dim_index(n) for n in names]
        if len(set(dims)) != len(dims):
            raise KeyError(f"mesh slice {names} repeats a dimension")
        if dims == list(range(self.ndim)):
            return self
        if self._coord is None:
            raise RuntimeError(f"rank {self._rank} is not part of {self}")
        return _cached_child(self, tuple(dims))

    def _flatten(self, mesh_dim_name: Optional[str] = None) -> "DeviceMesh":
        """A 1-D mesh over all dimensions of this mesh (named ``mesh_dim_name``)."""
        name = mesh_dim_name or "_".join(self.mesh_dim_names or ("flat",))
        ranks = self.topology.ranks
        topo = MeshTopology((len(ranks),), ranks, (name,))
        return DeviceMesh(self.device_type, None, platform=self.platform, _topology=topo)

    flatten = _flatten


_CHILDREN: Dict[Tuple[int, Tuple[int, ...]], DeviceMesh] = {}


def _cached_child(parent: DeviceMesh, dims: Tuple[int, ...]) -> DeviceMesh:
    key = (parent._hash, dims)  # pylint: disable=protected-access
    child = _CHILDREN.get(key)
    if child is None:
        sub = parent.topology.sub(dims, parent._rank)  # pylint: disable=protected-access
        child = DeviceMesh(parent.device_type, None, platform=parent.platform, _topology=sub)
        _CHILDREN[key] = child
    return child


def _rebuild_mesh(device_type: str, topology: MeshTopology, platform: Optional[str]) -> DeviceMesh:
    for mesh in _MESHES:
        if mesh.device_type == device_type and mesh.topology == topology:
            return mesh
    return DeviceMesh(device_type, None, platform=platform, _topology=topology)


def init_device_mesh(device_type: str, mesh_shape: Sequence[int], *,
                     mesh_dim_names: Optional[Sequence[str]] = None, platform: Optional[str] = None,
                     timeout: Optional[float] = None) -> DeviceMesh:
    """Build a mesh of shape ``mesh_shape`` over the whole world (initialising it if needed).

    ``prod(mesh_shape)`` must equal the world size. Example: ``init_device_mesh("cpu", (2, 2),
    mesh_dim_names=("dp", "tp"))``.
    """
    if isinstance(mesh_shape, int):
        mesh_shape = (mesh_shape,)
    mesh_shape = tuple(mesh_shape)
    if not mesh_shape or any(not isinstance(s, int) or s <= 0 for s in mesh_shape):
        raise ValueError(f"init_device_mesh(mesh_shape): expected positive ints, got {mesh_shape}")
    if not is_initialized(platform):
        backend = {"cpu": "gloo", "cuda": "nccl", "npu": "hccl"}.get(device_type)
        _pg.init_process_group(backend, timeout=timeout, platform=platform)
    world = get_world_size(platform=platform)
    total = 1
    for s in mesh_shape:
        total *= s
    if total != world:
        raise ValueError(f"init_device_mesh(mesh_shape={mesh_shape}): the mesh holds {total} ranks but the "
                         f"world size is {world}")
    topo = MeshTopology(mesh_shape, None, mesh_dim_names)
    return DeviceMesh(device_type, None, platform=platform, _topology=topo)
