# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The trainer's model lookup: ``[model] name`` and ``flavor`` through the model registry
(``hyper_parallel.models.get_model_spec``; ``llama`` is accepted as ``llama3``)."""
from __future__ import annotations

from typing import Any, Tuple

__all__ = ["model_spec", "model_flavors", "build_model_config"]

_ALIASES = {"llama": "llama3"}


def model_spec(name: str, backend: str = "torch") -> Any:
    """The registry's ``ModelSpec`` of ``name`` on ``backend`` (``"mindspore"``: the MindSpore model, so nothing
    imports torch); a ``ValueError`` naming ``model.name`` when unknown."""
    from hyper_parallel.models import get_model_spec, list_models  # pylint: disable=import-outside-toplevel
    try:
        return get_model_spec(_ALIASES.get(name, name), backend=backend)
    except KeyError as exc:
        if backend != "torch":
            raise ValueError(f"model.name: {exc.args[0]}") from None
        raise ValueError(f"model.name: unknown model {name!r}; expected one of {list_models()}") from None


def model_flavors(name: str) -> Tuple[str, ...]:
    """The flavors ``name`` offers."""
    return tuple(model_spec(name).flavors)


def build_model_config(name: str, flavor: str, backend: str = "torch", **overrides: Any) -> Any:
    """The model config of ``name``/``flavor`` (on ``backend``) with ``overrides`` (``vocab_size=...``) applied;
    imports no framework for the built-in models whose flavor table is pure (``pure_flavor_table``)."""
    from hyper_parallel.models.registry import pure_flavor_table  # pylint: disable=import-outside-toplevel
    from hyper_parallel.models.spec import flavor_config  # pylint: disable=import-outside-toplevel
    name = _ALIASES.get(name, name)
    flavors = pure_flavor_table(name) if backend == "torch" else None
    if flavors is None:  # the spec: a model whose package imports its code (and a registered one) builds its own
        spec = model_spec(name, backend)
        if flavor not in spec.flavors:
            raise ValueError(f"model.flavor: {name!r} has no flavor {flavor!r}; expected one of "
                             f"{sorted(spec.flavors)}")
        return spec.config(flavor, **overrides)
    if flavor not in flavors:  # the flavor table alone: the model's code (and torch) is not imported
        raise ValueError(f"model.flavor: {name!r} has no flavor {flavor!r}; expected one of {sorted(flavors)}")
    return flavor_config(name, flavors, flavor, **overrides)
