# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Cut a torch model into pipeline stage modules by module names (TorchTitan's way).

Each stage is a deep copy of the model with every listed module that the stage does not own removed:
a ``ModuleList`` entry (``layers.3``) disappears from a ``ModuleDict`` that keeps the original indices
as keys (so parameter names, and checkpoints, stay the same), any other module becomes ``None``. The
model's forward must skip ``None`` modules and iterate its layer container (as the tiny Llama does).
"""
from __future__ import annotations

import copy
from typing import List, Optional, Sequence

from torch import nn

__all__ = ["pipeline_module_split"]


def _as_dict(root: nn.Module, path: str) -> nn.ModuleDict:
    """Replace the ModuleList at ``path`` by a ModuleDict keyed by index (in place)."""
    parent_name, _, leaf = path.rpartition(".")
    parent = root.get_submodule(parent_name) if parent_name else root
    container = getattr(parent, leaf)
    if isinstance(container, nn.ModuleList):
        container = nn.ModuleDict({str(i): m for i, m in enumerate(container)})
        setattr(parent, leaf, container)
    return container


def _drop(root: nn.Module, fqn: str) -> None:
    parent_name, _, leaf = fqn.rpartition(".")
    parent = root.get_submodule(parent_name) if parent_name else root
    if isinstance(parent, (nn.ModuleList, nn.ModuleDict)):
        container = _as_dict(root, parent_name)
        if leaf in container:
            del container[leaf]
    else:
        setattr(parent, leaf, None)


def pipeline_module_split(model: nn.Module, module_names_per_stage: Sequence[Sequence[str]],
                          stages: Optional[Sequence[int]] = None) -> List[nn.Module]:
    """One module per stage (only the ``stages`` listed, default all; see the module docstring);
    raises on a name that is not a submodule or is given to two stages."""
    every = [n for names in module_names_per_stage for n in names]
    dup = sorted({n for n in every if every.count(n) > 1})
    if dup:
        raise ValueError(f"pipeline_module_split: modules {dup} are assigned to more than one stage")
    for name in every:
        try:
            model.get_submodule(name)
        except AttributeError as exc:
            raise ValueError(f"pipeline_module_split: {name!r} is not a submodule of {type(model).__name__}") from exc
    parts = []
    wanted = range(len(module_names_per_stage)) if stages is None else stages
    for names in (module_names_per_stage[s] for s in wanted):
        part = copy.deepcopy(model)
        keep = set(names)
        for fqn in every:
            if fqn not in keep:
                _drop(part, fqn)
        parts.append(part)
    return parts
