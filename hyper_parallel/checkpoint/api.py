# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Public checkpoint API, backend-free: the backend (torch or MindSpore) is chosen by the values given.

``save`` / ``load`` / ``async_save`` follow ``torch.distributed.checkpoint``; ``get_state_dict`` /
``set_state_dict`` (and the model/optimizer variants) follow ``torch.distributed.checkpoint.state_dict``;
:class:`CheckpointManager` runs a training job's checkpoints (interval, retention, async, crash safety);
``save_hf`` / ``load_hf`` exchange Hugging Face folders. Importing this module imports no framework.
"""
from __future__ import annotations

import importlib
import os
import shutil
import warnings
from dataclasses import dataclass
from typing import Any, Dict, Iterable, Optional, Protocol, runtime_checkable

from hyper_parallel.checkpoint.format import CheckpointCorruptError, CheckpointError
from hyper_parallel.checkpoint.publish import list_published_steps, read_latest, remove_staging, write_latest
from hyper_parallel.checkpoint.retention import parse_step_dir, plan_retention, should_save, step_dir_name

__all__ = ["Stateful", "StateDictOptions", "CheckpointManager", "save", "load", "async_save", "get_state_dict",
           "set_state_dict", "get_model_state_dict", "set_model_state_dict", "get_optimizer_state_dict",
           "set_optimizer_state_dict", "save_hf", "load_hf", "backend_of", "ASYNC_MODES", "ModelState",
           "OptimizerState", "PerRank", "this_rank"]

ASYNC_MODES = ("disabled", "async")


@runtime_checkable
class Stateful(Protocol):
    """Anything with ``state_dict()`` and ``load_state_dict(sd)`` (a data loader, an LR scheduler, a
    model wrapper): put it in a checkpoint's state dict and it is saved and restored through them.
    The same protocol as ``torch.distributed.checkpoint.stateful.Stateful``."""

    def state_dict(self) -> Dict[str, Any]:
        """The state to save."""

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Restore a saved state."""


@dataclass(frozen=True)
class StateDictOptions:
    """Options of the state-dict functions (the subset of torch's ``StateDictOptions`` that applies).

    Attributes:
        full_state_dict: gather DTensors into full tensors (a collective) instead of returning shards.
        cpu_offload: with ``full_state_dict``, keep the result on rank 0 only, on the CPU.
        strict: loading raises on missing or unexpected keys.
        ignore_frozen_params: leave out parameters with ``requires_grad=False``.
        flatten_optimizer_state_dict: optimizer state dicts keyed ``state.<fqn>.<name>`` and
            ``param_groups.<fqn>.<setting>`` (one key per parameter: pipeline stages merge, group order
            does not matter); loading accepts both forms.
    """

    full_state_dict: bool = False
    cpu_offload: bool = False
    strict: bool = True
    ignore_frozen_params: bool = False
    flatten_optimizer_state_dict: bool = False


def _leaves(obj: Any) -> Iterable[Any]:
    if isinstance(obj, dict):
        for v in obj.values():
            yield from _leaves(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _leaves(v)
    else:
        yield obj


def _platform_of_leaf(leaf: Any) -> Any:
    from hyper_parallel.platform import platform_of
    plat = platform_of(leaf)
    inner = getattr(leaf, "model", None)  # ModelState / OptimizerState wrap a model
    if plat is None and inner is not None and inner is not leaf:
        plat = platform_of(inner)
    return plat


def backend_of(*values: Any) -> str:
    """The backend (``'torch'`` or ``'mindspore'``) of the first framework object among ``values`` and the
    leaves of nested state dicts (tensors, models, wrappers of models); the active platform otherwise."""
    from hyper_parallel.platform import get_platform
    for value in values:
        for leaf in _leaves(value):
            plat = _platform_of_leaf(leaf)
            if plat is not None:
                return plat.name
    return get_platform().name


def _impl(backend: str, name: str) -> Any:
    """The backend implementation of ``name`` (``hyper_parallel.checkpoint._<backend>.<module>``)."""
    return getattr(importlib.import_module(f"hyper_parallel.checkpoint._{backend}.{_SUBMODULE[name]}"), name)


_SUBMODULE = {"save": "api", "load": "api", "async_save": "api", "wait_for_async_save": "api",
              "get_state_dict": "state_dict", "set_state_dict": "state_dict", "get_model_state_dict": "state_dict",
              "set_model_state_dict": "state_dict", "get_optimizer_state_dict": "state_dict",
              "set_optimizer_state_dict": "state_dict", "save_hf": "hf", "load_hf": "hf",
              "coordinator": "api", "agree": "api", "barrier": "api"}


def save(state_dict: Dict[str, Any], *, checkpoint_id: Any = None, **kwargs: Any) -> Any:
    """Save ``state_dict`` as one checkpoint folder (every rank calls it; see ``docs/checkpoint.md``)."""
    return _impl(backend_of(state_dict), "save")(state_dict, checkpoint_id=checkpoint_id, **kwargs)


def load(state_dict: Dict[str, Any], *, checkpoint_id: Any = None, **kwargs: Any) -> None:
    """Load a checkpoint into ``state_dict`` in place, whatever layout or world size saved it."""
    return _impl(backend_of(state_dict), "load")(state_dict, checkpoint_id=checkpoint_id, **kwargs)


def async_save(state_dict: Dict[str, Any], *, checkpoint_id: Any = None, **kwargs: Any) -> Any:
    """Stage ``state_dict`` in host memory and save it in the background; returns a future."""
    return _impl(backend_of(state_dict), "async_save")(state_dict, checkpoint_id=checkpoint_id, **kwargs)


def get_state_dict(model: Any, optimizers: Any, *, options: Optional[StateDictOptions] = None) -> Any:
    """``(model state dict, optimizer state dict)`` with FQN keys that are the same in every layout."""
    return _impl(backend_of(model), "get_state_dict")(model, optimizers, options=options)


def set_state_dict(model: Any, optimizers: Any, *, model_state_dict: Dict[str, Any],
                   optim_state_dict: Dict[str, Any], options: Optional[StateDictOptions] = None) -> Any:
    """Load both state dicts (sharded or full, from any layout)."""
    return _impl(backend_of(model), "set_state_dict")(model, optimizers, model_state_dict=model_state_dict,
                                                      optim_state_dict=optim_state_dict, options=options)


def get_model_state_dict(model: Any, *, options: Optional[StateDictOptions] = None) -> Dict[str, Any]:
    """The model's state dict (DTensor shards, or full tensors with ``full_state_dict``)."""
    return _impl(backend_of(model), "get_model_state_dict")(model, options=options)


def set_model_state_dict(model: Any, model_state_dict: Dict[str, Any], *,
                         options: Optional[StateDictOptions] = None) -> Any:
    """Load a model state dict (sharded or full)."""
    return _impl(backend_of(model), "set_model_state_dict")(model, model_state_dict, options=options)


def get_optimizer_state_dict(model: Any, optimizers: Any, *, options: Optional[StateDictOptions] = None) -> Any:
    """The optimizers' states keyed by parameter FQN."""
    return _impl(backend_of(model), "get_optimizer_state_dict")(model, optimizers, options=options)


def set_optimizer_state_dict(model: Any, optimizers: Any, optim_state_dict: Dict[str, Any], *,
                             options: Optional[StateDictOptions] = None) -> None:
    """Load optimizer states (sharded or full)."""
    return _impl(backend_of(model), "set_optimizer_state_dict")(model, optimizers, optim_state_dict, options=options)


def save_hf(model: Any, folder: Any, adapter: Any = None, **kwargs: Any) -> Any:
    """Export ``model`` as a Hugging Face folder (safetensors shards + ``model.safetensors.index.json``)."""
    return _impl(backend_of(model), "save_hf")(model, folder, adapter, **kwargs)


def load_hf(model: Any, folder: Any, adapter: Any = None, **kwargs: Any) -> Any:
    """Load a Hugging Face folder into ``model`` (each rank reads only its shards; dtypes converted)."""
    return _impl(backend_of(model), "load_hf")(model, folder, adapter, **kwargs)


def this_rank() -> int:
    """This process's global rank (0 without a process group) on the active backend."""
    from hyper_parallel.core import process_group as pg
    return pg.get_rank() if pg.is_initialized() else 0


class ModelState:
    """A model as a :class:`Stateful` (``get_model_state_dict`` / ``set_model_state_dict``): loading fills
    the state dict of the model's current layout in place, then sets it."""

    def __init__(self, model: Any, options: Optional[StateDictOptions] = None) -> None:
        self.model = model
        self.options = options

    def state_dict(self) -> Dict[str, Any]:
        """The model state dict (canonical keys, DTensor shards)."""
        return get_model_state_dict(self.model, options=self.options)

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Load it back (any layout)."""
        set_model_state_dict(self.model, state_dict, options=self.options)


class OptimizerState:
    """One or more optimizers of ``model`` as a :class:`Stateful` (states keyed by parameter FQN, in the
    flattened form by default so that pipeline stages merge; created first if the optimizers never
    stepped, so a checkpoint loads into a fresh optimizer)."""

    def __init__(self, model: Any, optimizers: Any, options: Optional[StateDictOptions] = None) -> None:
        self.model = model
        self.optimizers = optimizers
        self.options = options or StateDictOptions(flatten_optimizer_state_dict=True)

    def state_dict(self) -> Dict[str, Any]:
        """The merged optimizer state dict."""
        return get_optimizer_state_dict(self.model, self.optimizers, options=self.options)

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Load it back (any layout)."""
        set_optimizer_state_dict(self.model, self.optimizers, state_dict, options=self.options)


class PerRank:
    """A :class:`Stateful` whose state differs between ranks (a data loader's position), stored under
    ``rank<r>`` for every rank instead of once. Loading needs the same world size."""

    def __init__(self, obj: Any) -> None:
        if not isinstance(obj, Stateful):
            raise TypeError(f"PerRank(obj): expected an object with state_dict() and load_state_dict(), got "
                            f"{type(obj).__name__}")
        self.obj = obj

    def state_dict(self) -> Dict[str, Any]:
        """``{"rank<r>": obj.state_dict()}``."""
        return {f"rank{this_rank()}": self.obj.state_dict()}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Give this rank's entry back to the object."""
        key = f"rank{this_rank()}"
        if key not in state_dict:
            raise KeyError(f"PerRank: the checkpoint holds no state for {key} (saved with a different world size?)")
        self.obj.load_state_dict(state_dict[key])


class CheckpointManager:
    """Checkpoints of a training run in ``folder``: ``step-<n>`` folders, a ``latest`` pointer, retention.

    Args:
        folder: where the run's checkpoints live (created).
        interval: :meth:`save` writes a checkpoint when ``step % interval == 0`` (or ``last_step``/``force``).
        keep_latest_k: keep the newest ``k`` complete checkpoints (``0``: keep all). The checkpoint
            ``latest`` names and the newest complete one are never deleted.
        async_mode: ``"disabled"`` (blocking saves) or ``"async"`` (stage to host memory, persist in the
            background; the next save waits for the previous one; a background error is raised at the
            next call).
        states: the default state dict to save/load (values: tensors, objects, ``Stateful`` wrappers such
            as ``ModelState``, ``OptimizerState``, ``RNGState``, an LR scheduler, ``PerRank(data_loader)``).
        backend: ``"torch"`` or ``"mindspore"`` (default: decided from ``states``).

    Crash safety: a save is written into a hidden staging folder, fsynced and published by one atomic
    rename; ``latest`` is replaced (atomically) only after that, and retention runs after ``latest``
    moved. A rank killed at any point leaves the previous checkpoint loadable and ``latest`` on it;
    the staging folders of interrupted saves are deleted when the next manager on ``folder`` starts.
    """

    def __init__(self, folder: "str | os.PathLike", interval: int = 1, keep_latest_k: int = 0,
                 async_mode: str = "disabled", *, states: Optional[Dict[str, Any]] = None,
                 backend: Optional[str] = None) -> None:
        if not isinstance(interval, int) or interval <= 0:
            raise ValueError(f"CheckpointManager(interval): expected a positive int, got {interval!r}")
        if not isinstance(keep_latest_k, int) or keep_latest_k < 0:
            raise ValueError(f"CheckpointManager(keep_latest_k): expected an int >= 0 (0 keeps all), got "
                             f"{keep_latest_k!r}")
        if async_mode not in ASYNC_MODES:
            raise ValueError(f"CheckpointManager(async_mode): expected one of {ASYNC_MODES}, got {async_mode!r}")
        if backend is not None:
            from hyper_parallel.platform import get_platform
            backend = get_platform(backend).name  # validates the name
        self.folder = os.path.abspath(os.fspath(folder))
        self.interval = interval
        self.keep_latest_k = keep_latest_k
        self.async_mode = async_mode
        self.states = states
        self.backend = backend or backend_of(states)
        self._pending = None
        self.skipped: list = []
        self.is_coordinator = bool(_impl(self.backend, "coordinator")())
        if self.is_coordinator:
            os.makedirs(self.folder, exist_ok=True)
            remove_staging(self.folder)
        _impl(self.backend, "barrier")()

    # ------------------------------------------------------------------ queries
    def should_save(self, step: int, last_step: bool = False) -> bool:
        """Whether :meth:`save` at ``step`` writes a checkpoint."""
        return should_save(step, self.interval, last_step)

    def checkpoint_path(self, step: int) -> str:
        """Folder of the checkpoint of ``step``."""
        return os.path.join(self.folder, step_dir_name(step))

    def latest_step(self) -> Optional[int]:
        """Step of the checkpoint ``latest`` names (falls back to the newest complete one when the
        pointer is missing or names no complete checkpoint); None when there is none."""
        name = read_latest(self.folder)
        step = parse_step_dir(name) if name else None
        published = list_published_steps(self.folder)
        if step is not None and step in published:
            return step
        return published[-1] if published else None

    # ------------------------------------------------------------------ save / load
    def _states(self, states: Optional[Dict[str, Any]], what: str) -> Dict[str, Any]:
        states = self.states if states is None else states
        if states is None:
            raise ValueError(f"CheckpointManager.{what}: no states given (pass states= here or to the constructor)")
        return states

    def save(self, step: int, states: Optional[Dict[str, Any]] = None, *, last_step: bool = False,
             force: bool = False) -> bool:
        """Save ``states`` as the checkpoint of ``step`` when due (see ``interval``); returns whether it saved.

        Waits for the previous async save first (raising its error, if any).
        """
        if not (force or self.should_save(step, last_step)):
            return False
        states = self._states(states, "save")
        self.wait()
        path = self.checkpoint_path(step)
        if self.async_mode == "async":
            self._pending = _impl(self.backend, "async_save")(states, checkpoint_id=path,
                                                              on_published=lambda: self._published(step))
        else:
            _impl(self.backend, "save")(states, checkpoint_id=path)
            self._published(step)
            _impl(self.backend, "barrier")()  # on every rank, save returns with latest already moved
        return True

    def _published(self, step: int) -> None:
        """After the checkpoint of ``step`` is durable: move ``latest``, then apply retention (coordinator)."""
        if not self.is_coordinator:
            return
        write_latest(self.folder, step_dir_name(step))
        for old in plan_retention(list_published_steps(self.folder), self.keep_latest_k, protect=(step,)):
            shutil.rmtree(self.checkpoint_path(old), ignore_errors=True)

    def load(self, states: Optional[Dict[str, Any]] = None, step: Optional[int] = None) -> Optional[int]:
        """Load the checkpoint of ``step`` (default: the latest) into ``states``; returns the step loaded,
        or None when the folder holds no checkpoint yet (a fresh run).

        Without ``step``, a damaged checkpoint (``CheckpointCorruptError``: a missing or truncated file, a
        checksum mismatch in a header or a chunk) is skipped with a ``RuntimeWarning`` and the previous
        complete one is loaded (``self.skipped`` lists ``(step, reason)``); when all are damaged the error
        names them. With ``step`` (pinned) the error is raised."""
        states = self._states(states, "load")
        self.wait()
        self.skipped = []
        if step is not None:  # pinned: a damaged checkpoint raises CheckpointCorruptError, no fallback
            path = self.checkpoint_path(step)
            if not os.path.isdir(path):
                raise CheckpointError(f"CheckpointManager.load: no checkpoint for step {step} at {path}")
            _impl(self.backend, "load")(states, checkpoint_id=path)
            return step
        agree = _impl(self.backend, "agree")  # rank 0's int (or None) on every rank
        mine = self._candidates() if self.is_coordinator else []
        for i in range(agree(len(mine) if self.is_coordinator else None) or 0):
            candidate = agree(mine[i] if self.is_coordinator else None)
            try:
                _impl(self.backend, "load")(states, checkpoint_id=self.checkpoint_path(candidate))
            except CheckpointCorruptError as exc:
                self.skipped.append((candidate, str(exc)))
                warnings.warn(f"CheckpointManager.load: skipping the damaged checkpoint of step {candidate} ({exc}); "
                              f"trying the previous complete one", RuntimeWarning, stacklevel=2)
                continue
            return candidate
        if self.skipped:
            raise CheckpointCorruptError(self.folder, f"every checkpoint is damaged (steps "
                                                      f"{', '.join(str(s) for s, _ in self.skipped)}); the newest: "
                                                      f"{self.skipped[0][1]}")
        return None

    def _candidates(self) -> list:
        """The steps to try when resuming, newest first: the one ``latest`` names, then the older complete ones."""
        first = self.latest_step()
        if first is None:
            return []
        return [first] + [s for s in reversed(list_published_steps(self.folder)) if s < first]

    def wait(self) -> None:
        """Wait for the pending async save; raise its error (once) if it failed."""
        fut, self._pending = self._pending, None
        if fut is not None:
            try:
                fut.result()
            except Exception as exc:
                raise CheckpointError(f"CheckpointManager: the async save to {fut.checkpoint_id} failed: {exc}") \
                    from exc

    def close(self) -> None:
        """Wait for the pending save (call before the process group is destroyed)."""
        self.wait()
