# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Models. Model code never mentions a mesh: each model folder (``llama3/``, ``qwen3/``, ``qwen3_moe/``,
``deepseek_v3/``) has ``args.py`` (config + flavor table), ``model.py`` (plain torch), ``parallelize.py``
(the plans that parallelise it) and ``state_dict_adapter.py`` (Hugging Face names). ``get_model_spec(name)``
returns a model's :class:`ModelSpec` (class, flavors, ``parallelize_fn``, ``pipelining_fn``, adapter,
loss); :class:`ParallelDims` holds the parallel degrees and builds the world mesh and its named sub-meshes
(the trainer uses the same class);
``init_empty_weights()`` / ``init_on_device(device)`` / ``init_parameters(model)`` build on the meta
device and materialise local shards with layout-independent values. Importing this package imports no
framework; a model's package imports torch when its spec is first asked for."""
from typing import TYPE_CHECKING

from hyper_parallel._lazy import lazy_exports
from hyper_parallel.models.registry import get_model_spec, list_models, register_model_spec
from hyper_parallel.models.parallel_dims import MESH_DIM_ORDER, ParallelDims, fsdp_mesh, merge_mesh_dims
from hyper_parallel.models.spec import ModelSpec

if TYPE_CHECKING:  # static analysers see the lazy names; nothing is imported at run time
    from hyper_parallel.models._torch.init import init_empty_weights, init_on_device, init_parameters

_INIT = "hyper_parallel.models._torch.init"
_LAZY = {"init_empty_weights": _INIT, "init_on_device": _INIT, "init_parameters": _INIT}
__all__ = ["get_model_spec", "list_models", "register_model_spec", "ModelSpec", "ParallelDims", "MESH_DIM_ORDER",
           "merge_mesh_dims", "fsdp_mesh", *sorted(_LAZY)]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
