# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""What a trainer needs to know about a model (TorchTitan's ``TrainSpec``), and the parallel degrees.

Pure Python: no framework is imported here. A :class:`ModelSpec` bundles the model class, its
config flavor table, the function that applies the parallel plan (TP/SP/loss parallel, CP, FSDP/HSDP,
EP, activation policy), the pipeline split, the Hugging Face state-dict adapter and the loss.
:class:`ParallelDims` (``hyper_parallel.models.parallel_dims``, re-exported here) holds the degrees of
each parallelism, validates them against the world size and builds the device meshes ``parallelize_fn`` reads.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Mapping, Optional

from hyper_parallel.models.parallel_dims import MESH_DIM_ORDER, ParallelDims, fsdp_mesh, merge_mesh_dims

__all__ = ["ModelSpec", "flavor_config", "ParallelDims", "MESH_DIM_ORDER", "merge_mesh_dims", "fsdp_mesh"]


def flavor_config(name: str, flavors: Mapping[str, Any], flavor: str, **overrides: Any) -> Any:
    """The config of ``flavor`` in model ``name``'s flavor table ``flavors`` with ``overrides`` replacing fields
    (what :meth:`ModelSpec.config` returns; also used where the table is read without the model code)."""
    if flavor not in flavors:
        raise KeyError(f"model {name!r} has no flavor {flavor!r}; known flavors: {sorted(flavors)}")
    cfg = flavors[flavor]
    if overrides and getattr(cfg, "head_dim_derived", False) and "head_dim" not in overrides:
        overrides["head_dim"] = 0  # derived from the (possibly overridden) sizes again
    return dataclasses.replace(cfg, **overrides) if overrides else cfg


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
        return flavor_config(self.name, self.flavors, flavor, **overrides)

    def build(self, flavor: str, **overrides: Any) -> Any:
        """``model_cls(config(flavor, **overrides))`` (wrap in ``init_empty_weights()`` for the meta device)."""
        return self.model_cls(self.config(flavor, **overrides))
