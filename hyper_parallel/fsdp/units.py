# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The framework-free bookkeeping both ``fully_shard`` backends share (``fsdp/_torch``, ``fsdp/_mindspore``).

* argument validation of ``fully_shard`` (:func:`check_fully_shard_args`);
* unit grouping: which parameters a ``fully_shard`` call manages, where each is registered, under which
  name (:func:`collect_unit_params`, :func:`check_shardable`);
* mesh and placement decisions: the global spec of a sharded parameter, plain FSDP, HSDP or TP x FSDP on a
  named mesh (:func:`sharded_param_spec`, :func:`find_parent_mesh`);
* prefetch lists (:func:`prefetch_units`) and the ``FSDP<Class>`` classes (:func:`fsdp_class`).

A backend passes what differs: its module class (``torch.nn.Module`` / ``mindspore.nn.Cell``), how to list
a module's own parameters and children, and this process's rank. Nothing here imports a framework.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from hyper_parallel.core.placement import Replicate, Shard
from hyper_parallel.core.spec import DTensorSpec
from hyper_parallel.fsdp.api import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy

__all__ = ["STATE_ATTR", "check_fully_shard_args", "collect_unit_params", "check_shardable", "find_parent_mesh",
           "sharded_param_spec", "prefetch_units", "require_unit", "fsdp_class"]

#: the attribute of a ``fully_shard`` module holding its FSDP state (both backends)
STATE_ATTR = "_hp_fsdp_state"


def check_fully_shard_args(module: Any, module_type: type, module_kind: str, mp_policy: Any, offload_policy: Any,
                           offload_refusal: Optional[str] = None) -> None:
    """Validate ``fully_shard``'s arguments: ``module`` is a ``module_type`` not yet sharded, the policies
    have the right types; ``offload_refusal`` (a backend without CPU offload) refuses ``CPUOffloadPolicy``."""
    if not isinstance(module, module_type):
        raise TypeError(f"fully_shard(module): expected {module_kind}, got {type(module).__name__}")
    if STATE_ATTR in module.__dict__:
        raise ValueError(f"fully_shard(module): {type(module).__name__} is already fully sharded")
    if not isinstance(mp_policy, MixedPrecisionPolicy):
        raise TypeError(f"fully_shard(mp_policy): expected a MixedPrecisionPolicy, got {mp_policy!r}")
    if not isinstance(offload_policy, OffloadPolicy):
        raise TypeError(f"fully_shard(offload_policy): expected an OffloadPolicy/CPUOffloadPolicy, got "
                        f"{offload_policy!r}")
    if offload_refusal is not None and isinstance(offload_policy, CPUOffloadPolicy):
        raise ValueError(offload_refusal)


def collect_unit_params(root: Any, *, params: Callable[[Any], Iterable[Tuple[str, Any]]],
                        children: Callable[[Any], Iterable[Tuple[str, Any]]],
                        skip: Callable[[Any], bool] = lambda p: False,
                        ignored: Iterable[Any] = ()) -> List[Tuple[Any, List[Tuple[Any, str]], str]]:
    """The parameters one ``fully_shard(root)`` call manages, in registration order: those of ``root`` and
    its descendants, except below another ``fully_shard`` module, ``None`` entries, ``ignored`` and those
    ``skip`` refuses. Returns ``(param, [(owner, name), ...], fqn)`` per distinct parameter (a shared
    parameter has several owners; its name is the first one's)."""
    ignored_ids = {id(p) for p in ignored}
    found: Dict[int, list] = {}

    def walk(mod: Any, prefix: str, top: bool) -> None:
        if not top and STATE_ATTR in mod.__dict__:
            return
        for name, p in params(mod):
            if p is None or id(p) in ignored_ids or skip(p):
                continue
            found.setdefault(id(p), [p, [], prefix + name])[1].append((mod, name))
        for cname, child in children(mod):
            if child is not None:
                walk(child, f"{prefix}{cname}.", False)

    walk(root, "", True)
    return [tuple(entry) for entry in found.values()]


def check_shardable(fqn: str, ndim: int) -> None:
    """A 0-dimensional parameter has no dim 0 to shard."""
    if ndim == 0:
        raise ValueError(f"fully_shard: parameter {fqn!r} is 0-dimensional; a 0-dimensional parameter cannot be "
                         "sharded on dim 0 (pass it in ignored_params or give it shape (1,))")


def find_parent_mesh(dp_mesh: Any, tp_mesh: Any, rank: int, fqn: str) -> Tuple[Any, str, str]:
    """A named mesh (2-D or more, newest first) with two dims whose slices through ``rank`` are ``dp_mesh`` and
    ``tp_mesh``, with the dp and tp dim names: a 2-D ``(dp, tp)`` mesh, or a larger world such as
    ``(pp, dp_shard, cp, tp)`` whose ``(cp, tp)`` slice TP x FSDP then uses. Slicing a larger world creates the
    2-D slice's group: every rank must hold the same groups (``ParallelDims.build_mesh`` creates them)."""
    from hyper_parallel.core import device_mesh as dm

    def same(sub, mesh):
        return sub.shape == mesh.topology.shape and sub.ranks == mesh.topology.ranks

    for parent in reversed(dm._MESHES):  # newest first  # pylint: disable=protected-access
        topo = parent.topology
        if topo.ndim < 2 or not topo.dim_names or parent.get_coordinate() is None:
            continue
        for a in range(topo.ndim):
            if not same(topo.sub((a,), rank), dp_mesh):
                continue
            for b in range(topo.ndim):
                if b != a and same(topo.sub((b,), rank), tp_mesh):
                    return parent, topo.dim_names[a], topo.dim_names[b]
    raise ValueError(f"fully_shard: parameter {fqn!r} is sharded by TP on {tp_mesh}; the data-parallel mesh "
                     f"{dp_mesh} and the TP mesh must be slices of one named mesh (e.g. mesh['dp'] and "
                     "mesh['tp'])")


def sharded_param_spec(fqn: str, shape: Sequence[int], tp_spec: Optional[DTensorSpec], mesh: Any,
                       rank: int) -> DTensorSpec:
    """The global spec of a parameter ``fully_shard`` shards: ``Shard(0)`` on a 1-D mesh (FSDP),
    ``(Replicate(), Shard(0))`` on a 2-D (replicate, shard) mesh (HSDP); a TP-sharded parameter (``tp_spec``
    on a 1-D TP mesh) gets its TP shard split again on dim 0 over the 1-D data-parallel mesh, both slices of
    one named mesh (:func:`find_parent_mesh`)."""
    if tp_spec is None:
        placements = (Shard(0),) if mesh.ndim == 1 else (Replicate(), Shard(0))
        return DTensorSpec(mesh, placements, tuple(shape))
    if mesh.ndim != 1 or tp_spec.mesh.ndim != 1:
        raise ValueError(f"fully_shard: parameter {fqn!r} is TP-sharded on {tp_spec.mesh}; TP x FSDP needs a 1-D "
                         f"data-parallel mesh and a 1-D TP mesh (HSDP with TP is not supported), got {mesh}")
    pl = tp_spec.placements[0]
    if pl.is_partial():
        raise ValueError(f"fully_shard: parameter {fqn!r} has a Partial placement {pl}; parameters must be "
                         "Shard or Replicate")
    parent, dp_name, tp_name = find_parent_mesh(mesh, tp_spec.mesh, rank, fqn)
    if isinstance(pl, Shard) and pl.dim == 0:  # FSDP splits the TP shard: TP is the outer split of dim 0
        return DTensorSpec(parent[tp_name, dp_name], (Shard(0), Shard(0)), tp_spec.shape)
    return DTensorSpec(parent[dp_name, tp_name], (Shard(0), pl), tp_spec.shape)


def prefetch_units(modules: Any, what: str, module_type: type, module_kind: str) -> List[Any]:
    """The units of ``modules`` (a list of ``fully_shard`` modules) for a prefetch list; modules without
    parameters of their own contribute nothing."""
    if isinstance(modules, module_type):
        raise TypeError(f"{what}(modules): expected a list of fully_shard {module_kind}s, got one {module_kind}")
    out = []
    for m in modules:
        st = m.__dict__.get(STATE_ATTR) if isinstance(m, module_type) else None
        if st is None:
            raise ValueError(f"{what}(modules): {type(m).__name__} is not a fully_shard {module_kind}")
        if st.unit is not None:
            out.append(st.unit)
    return out


def require_unit(module: Any, what: str) -> Any:
    """The unit of a ``fully_shard`` module that must manage parameters of its own."""
    unit = module.__dict__[STATE_ATTR].unit
    if unit is None:
        raise ValueError(f"{what}: {type(module).__name__} manages no parameters of its own")
    return unit


_CLASSES: Dict[Tuple[type, type], type] = {}


def fsdp_class(cls: type, mixin: type) -> type:
    """``FSDP<Class>``: ``cls`` with the backend's ``FSDPModule`` mixin first (one class per pair)."""
    new_cls = _CLASSES.get((cls, mixin))
    if new_cls is None:
        new_cls = _CLASSES[(cls, mixin)] = type(f"FSDP{cls.__name__}", (mixin, cls), {})
    return new_cls
