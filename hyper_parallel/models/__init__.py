# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Models. Model code never mentions a mesh: each model folder (``llama3/`` ...) has ``args.py``
(config + flavor table), ``model.py`` (plain torch), ``parallelize.py`` (the plans that parallelise
it) and ``state_dict_adapter.py`` (Hugging Face names). ``get_model_spec(name)`` returns a model's
:class:`ModelSpec` (class, flavors, ``parallelize_fn``, ``pipelining_fn``, adapter, loss);
:class:`ParallelDims` holds the parallel degrees and builds the world mesh. Importing this package
imports no framework; a model's package imports torch when its spec is first asked for."""
from hyper_parallel.models.registry import get_model_spec, list_models, register_model_spec
from hyper_parallel.models.spec import MESH_DIM_ORDER, ModelSpec, ParallelDims, fsdp_mesh, merge_mesh_dims

__all__ = ["get_model_spec", "list_models", "register_model_spec", "ModelSpec", "ParallelDims", "MESH_DIM_ORDER",
           "merge_mesh_dims", "fsdp_mesh"]
