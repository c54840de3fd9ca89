# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The backend interface: everything the core needs from a framework, and nothing more.

The core (mesh, DTensor execution, redistribute executor) calls only these methods. A backend
implements them on its own tensors and process groups; where a backend lacks a primitive it
emulates it and documents the cost. All collectives act on *local* tensors along a tensor
dimension and take the list of per-rank sizes along that dimension, so uneven shards (including
empty ones) are handled by the backend, not by the caller.

Differentiable primitives follow one gradient convention (see ``docs/design/gradients.md``): the
local gradient of a tensor is the shard of the global gradient for ``Shard``, the full global
gradient for ``Replicate`` and ``Partial(sum)``, and ``1/n`` of it for ``Partial(avg)``.
Each primitive names its adjoint.
"""
from __future__ import annotations

import os
from abc import ABC, abstractmethod
from datetime import timedelta
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

__all__ = ["Platform", "CollectiveError", "P2POp", "CollectiveHandle", "CompletedHandle", "collective_timeout_seconds",
           "record_collective_timeout", "TIMEOUT_ENV_VAR", "check_all_to_all_splits"]


class P2POp(NamedTuple):
    """One point-to-point operation for :meth:`Platform.batch_isend_irecv`.

    ``op`` is ``"send"`` or ``"recv"``; ``peer`` the other side's *global* rank; ``tensor`` the data to
    send or the buffer to receive into; ``tag`` distinguishes messages between the same pair."""

    op: str
    tensor: Any
    peer: int
    group: Any = None
    tag: int = 0


TIMEOUT_ENV_VAR = "HYPER_PARALLEL_COLLECTIVE_TIMEOUT"
_TIMEOUTS: Dict[str, float] = {}


def record_collective_timeout(backend: str, timeout: Union[None, float, timedelta]) -> None:
    """Remember the collective timeout ``backend``'s ``init_process_group`` received (for error messages)."""
    if timeout is not None:
        _TIMEOUTS[backend] = timeout.total_seconds() if isinstance(timeout, timedelta) else float(timeout)


def collective_timeout_seconds(backend: str) -> float:
    """The collective timeout in force on ``backend``: what its ``init_process_group`` received, else
    ``$HYPER_PARALLEL_COLLECTIVE_TIMEOUT`` or 600 s."""
    if backend in _TIMEOUTS:
        return _TIMEOUTS[backend]
    return float(os.environ.get(TIMEOUT_ENV_VAR, "600"))


class CollectiveError(RuntimeError):
    """A collective failed (peer died, timeout, transport error); the message names the collective,
    the group and the configured timeout."""


class CollectiveHandle(ABC):
    """An asynchronous collective in flight: ``wait()`` blocks until it completes and returns its result."""

    @abstractmethod
    def wait(self) -> Any:
        """Complete the collective and return its result (a second call returns the same result)."""


class CompletedHandle(CollectiveHandle):
    """A collective that already ran synchronously (backends without asynchronous collectives)."""

    __slots__ = ("result",)

    def __init__(self, result: Any) -> None:
        self.result = result

    def wait(self) -> Any:
        return self.result


class Platform(ABC):
    """Abstract backend. One instance per framework, obtained with ``get_platform()``."""

    name: str = "abstract"

    # ------------------------------------------------------------------ process groups
    @abstractmethod
    def init_process_group(self, backend: Optional[str] = None, *, rank: Optional[int] = None,
                           world_size: Optional[int] = None, init_method: Optional[str] = None,
                           timeout: Optional[timedelta] = None) -> None:
        """Initialise the default (world) group; a no-op when already initialised."""

    @abstractmethod
    def is_initialized(self) -> bool:
        """True once the world group exists."""

    @abstractmethod
    def destroy_process_group(self, group: Any = None) -> None:
        """Destroy ``group`` (default: everything)."""

    @abstractmethod
    def get_rank(self, group: Any = None) -> int:
        """Global rank (or rank inside ``group``)."""

    @abstractmethod
    def get_world_size(self, group: Any = None) -> int:
        """World size (or size of ``group``)."""

    @abstractmethod
    def new_group(self, ranks: Sequence[int]) -> Any:
        """Create a group over ``ranks``; must be called by every rank of the world, in the same order."""

    @abstractmethod
    def get_process_group_ranks(self, group: Any) -> Tuple[int, ...]:
        """Global ranks of ``group`` in group order."""

    @abstractmethod
    def get_backend(self, group: Any = None) -> str:
        """Communication backend name of ``group`` (``gloo``, ``nccl``, ``mccl`` …)."""

    @abstractmethod
    def default_device_type(self) -> str:
        """``cuda``/``npu`` when an accelerator is in use, else ``cpu``."""

    # ------------------------------------------------------------------ tensors
    @abstractmethod
    def is_tensor(self, obj: Any) -> bool:
        """True for this framework's tensors."""

    @abstractmethod
    def narrow(self, x: Any, dim: int, start: int, length: int) -> Any:
        """View of ``length`` elements of ``x`` along ``dim`` from ``start``."""

    @abstractmethod
    def zeros_like(self, x: Any) -> Any:
        """A zero tensor like ``x``."""

    def output_shapes(self, op: str, args: Sequence[Any], kwargs: Dict[str, Any],
                      shapes: Sequence[Tuple[int, ...]]) -> Optional[List[Tuple[int, ...]]]:
        """Global output shapes of registry op ``op`` called with ``args``/``kwargs`` in which the marker
        ``("__tensor__", slot)`` stands for a tensor of ``shapes[slot]`` (computed without data), or None when
        this backend cannot tell (then a rule that needs them runs the call replicated). Default: None."""
        del op, args, kwargs, shapes  # a backend without data-free shape inference cannot tell

    # ------------------------------------------------------------------ DTensor and random state
    #: this backend's DTensor class and its ``distribute_tensor(tensor, device_mesh, placements, **kwargs)``;
    #: the backend's ``dtensor.py`` sets both on its platform object when it is imported
    dtensor_type: Optional[type] = None
    distribute_tensor: Optional[Callable[..., Any]] = None
    #: ``wrap_local(local, spec)``: a fresh local tensor holding this rank's shard of ``spec`` as a DTensor
    #: (set with the two above; op expands with data-dependent output shapes use it)
    wrap_local: Optional[Callable[[Any, Any], Any]] = None

    @abstractmethod
    def manual_seed(self, seed: int) -> None:
        """Seed the framework's default random generator (``hyper_parallel.manual_seed`` calls it)."""

    # ------------------------------------------------------------------ modules (data, read by the features)
    #: the framework's module class (``torch.nn.Module``, ``mindspore.nn.Cell``)
    module_type: type = type(None)
    #: the method of a module listing ``(dotted name, sub-module)`` for itself (name ``""``) and every descendant
    submodules_method: str = ""
    #: what a sub-module is called in messages (``submodule``, ``sub-cell``)
    submodule_word: str = "submodule"

    # ------------------------------------------------------------------ differentiable collectives
    @abstractmethod
    def all_gather(self, x: Any, group: Any, dim: int, sizes: Sequence[int], index: int,
                   grad_partial: bool = False) -> Any:
        """Concatenate the ranks' ``x`` along ``dim`` (S -> R). Adjoint: take own chunk of the
        gradient, or reduce-scatter it when ``grad_partial`` (the consumer's gradient is partial)."""

    @abstractmethod
    def chunk(self, x: Any, dim: int, sizes: Sequence[int], index: int, group: Any) -> Any:
        """Keep chunk ``index`` of ``x`` along ``dim`` (R -> S, local). Adjoint: all-gather."""

    @abstractmethod
    def all_reduce(self, x: Any, op: str, group: Any) -> Any:
        """Reduce ``x`` over the group (P -> R). Adjoint: identity (sum), 1/n (avg), argmax mask (max/min)."""

    @abstractmethod
    def reduce_scatter(self, x: Any, op: str, group: Any, dim: int, sizes: Sequence[int], index: int) -> Any:
        """Reduce and keep chunk ``index`` along ``dim`` (P -> S). Adjoint: all-gather."""

    @abstractmethod
    def all_to_all(self, x: Any, group: Any, split_dim: int, concat_dim: int, split_sizes: Sequence[int],
                   concat_sizes: Sequence[int], index: int) -> Any:
        """Move sharding from ``concat_dim`` to ``split_dim`` (S(c) -> S(s)). Adjoint: the inverse all-to-all."""

    @abstractmethod
    def make_partial(self, x: Any, op: str, index: int, group_size: int) -> Any:
        """R -> P locally (sum: coordinate 0 keeps ``x``, others zero). Adjoint: identity (x n for avg)."""

    @abstractmethod
    def grad_all_reduce(self, x: Any, group: Any) -> Any:
        """Identity forward, all-reduce(sum) of the gradient (a replicated input feeding sharded work)."""

    @abstractmethod
    def scale_grad(self, x: Any, factor: float) -> Any:
        """Identity forward, gradient multiplied by ``factor`` (keeps a ``grad_partial`` promise)."""

    @abstractmethod
    def broadcast(self, x: Any, src: int, group: Any) -> Any:
        """Broadcast ``x`` from global rank ``src`` (not differentiable); returns ``x``."""

    @abstractmethod
    def barrier(self, group: Any = None) -> None:
        """Block until every rank of ``group`` arrives."""

    # ------------------------------------------------------------------ point to point (not differentiable)
    @abstractmethod
    def batch_isend_irecv(self, ops: Sequence[P2POp]) -> List[Any]:
        """Post the sends and receives of ``ops`` (one neighbour pair per call) and return one handle per op.

        ``handle.wait()`` blocks until that op completes and returns the received tensor for a ``recv``
        (``None`` for a ``send``); a failed or timed-out transfer raises :class:`CollectiveError`. Callers
        issue one call per neighbour pair, pairs in one fixed global order, so two processes never both
        wait in a send. A backend without native point-to-point emulates it (see its documentation)."""

    # ------------------------------------------------------------------ uneven all-to-all (expert parallel)
    @abstractmethod
    def all_to_all_single(self, x: Any, group: Any, output_split_sizes: Sequence[int],
                          input_split_sizes: Sequence[int]) -> Any:
        """Uneven all-to-all along dim 0 (differentiable): rows ``[sum(in[:j]), sum(in[:j+1]))`` of ``x``
        go to rank ``j`` of ``group``; the result concatenates, in rank order, the
        ``output_split_sizes[j]`` rows rank ``j`` sent here. Split sizes may be zero. Adjoint: the
        same exchange with the two split lists swapped."""

    def all_to_all_single_start(self, x: Any, group: Any, output_split_sizes: Sequence[int],
                                input_split_sizes: Sequence[int]) -> CollectiveHandle:
        """Start :meth:`all_to_all_single` and return a handle whose ``wait()`` gives the result, so
        that independent work runs while the exchange is in flight. Differentiable through the
        handle's result. This default runs the exchange synchronously (backends without
        asynchronous collectives); backends that have them override it."""
        return CompletedHandle(self.all_to_all_single(x, group, output_split_sizes, input_split_sizes))


def check_all_to_all_splits(n: int, rows: int, output_split_sizes: Sequence[int],
                            input_split_sizes: Sequence[int]) -> None:
    """Clear errors for ``all_to_all_single`` split sizes that do not fit a group of ``n`` ranks and an input
    of ``rows`` rows (every backend checks the same way)."""
    if len(input_split_sizes) != n or len(output_split_sizes) != n:
        raise ValueError(f"all_to_all_single: expected {n} input and output split sizes (one per rank of the group), "
                         f"got {list(input_split_sizes)} and {list(output_split_sizes)}")
    if sum(input_split_sizes) != rows:
        raise ValueError(f"all_to_all_single: input_split_sizes {list(input_split_sizes)} sum to "
                         f"{sum(input_split_sizes)} but the input has {rows} rows")
