# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Selective activation checkpointing on torch: non-reentrant ``torch.utils.checkpoint`` + SAC modes.

torch's selective checkpointing (``create_selective_checkpoint_contexts``) is a pair of dispatch
modes sharing one cache: in forward, each op's output is cached when the policy keeps it; in the
recompute, a cached op returns its cached output instead of running. Its storage format, keys and
replay (``_CachedTorchDispatchMode``) are used as they are; this module's pair extends them where
our stack needs more:

* **Eager c10d collectives.** Our DTensor, FSDP and MoE communicate with ``torch.distributed``
  calls, which reach the dispatcher as in-place ops (``c10d.allreduce_``, ``c10d._allgather_base_``,
  ``c10d._reduce_scatter_base_``, ``c10d.alltoall_base_`` ...) that write their first argument and
  return an unfinished ``Work``. torch's cache would keep an alias of a buffer the collective has not
  written yet and replay nothing into the recomputed buffer. Here a kept collective's ``Work`` is
  waited, the written tensors are copied into the cache, and the replay copies them into the
  recompute's buffers and returns the finished ``Work`` — so no collective runs in backward.
* **MUST_SWAP.** An output the policy swaps is cached as a swap handle of the region's
  :class:`SwapManager` record (disk or pinned host memory) and brought back, one layer ahead, when
  the recompute replays it.
* **Our policies** (:class:`OpPolicy`, decided once per op overload) and torch-style policy
  functions ``(ctx, op, *args, **kwargs) -> CheckpointPolicy | bool`` (ours or torch's enum).

Eager only: under ``torch.compile`` use torch's own ``create_selective_checkpoint_contexts``.
"""
from __future__ import annotations

import functools
import itertools
from collections import defaultdict
from typing import Any, Callable, Dict, Optional

import torch
from torch.utils import checkpoint as _tc
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

from hyper_parallel.activation.policy import (C10D_INPLACE_FIRST_ARG, CheckpointPolicy, OpPolicy, PolicyError,
                                              resolve_policy)
from hyper_parallel.platform.torch import recompute as _recompute

__all__ = ["checkpoint", "checkpoint_wrapper", "selective_checkpoint_contexts", "op_name", "TrimMemo"]

_OP_NAMES: Dict[Any, str] = {}
_C10D_FIRST = frozenset(C10D_INPLACE_FIRST_ARG)
_MUTATED: Dict[Any, Optional[tuple]] = {}
_REGION_IDS = itertools.count()


def op_name(func) -> str:
    """``"aten.mm.default"`` style name of an op overload (cached)."""
    name = _OP_NAMES.get(func)
    if name is None:
        name = str(func) if isinstance(func, torch._ops.OpOverload) else f"hop.{getattr(func, '__name__', func)}"
        _OP_NAMES[func] = name
    return name


def _mutated_args(func) -> Optional[tuple]:
    """Positions of the arguments a communication op writes, or None for every other op."""
    hit = _MUTATED.get(func, False)
    if hit is not False:
        return hit
    hit = None
    ns = getattr(func, "namespace", "")
    if ns == "c10d":
        base = ".".join(op_name(func).split(".")[:2])
        hit = (0,) if base in _C10D_FIRST else ()
    elif ns.startswith("_c10d_functional"):
        args = func._schema.arguments
        pos = tuple(i for i, a in enumerate(args) if a.alias_info is not None and a.alias_info.is_write)
        hit = pos if pos else None
    _MUTATED[func] = hit
    return hit


def _written(func, args, kwargs, positions) -> list:
    leaves = []
    for i in positions:
        value = args[i] if i < len(args) else kwargs[func._schema.arguments[i].name]
        leaves.extend(t for t in tree_flatten(value)[0] if isinstance(t, torch.Tensor))
    return leaves


def _wait_works(out) -> None:
    for w in tree_flatten(out)[0]:
        if isinstance(w, torch._C.ScriptObject) and hasattr(w, "wait"):
            w.wait()


class _InplaceEntry:
    """Cache entry of a kept communication op: copies of what it wrote, and how its output maps to them."""

    __slots__ = ("values", "slots", "spec")

    def __init__(self, func, args, kwargs, out, positions) -> None:
        _wait_works(out)
        written = _written(func, args, kwargs, positions)
        with torch.no_grad():
            self.values = [t.detach().clone() for t in written]
        flat, self.spec = tree_flatten(out)
        slots = []
        for x in flat:
            idx = next((k for k, t in enumerate(written) if t is x), None) if isinstance(x, torch.Tensor) else None
            slots.append(("arg", idx) if idx is not None else ("const", x))
        self.slots = slots

    def replay(self, func, args, kwargs):
        """Write the cached values into this call's buffers; return what the op returned."""
        written = _written(func, args, kwargs, _mutated_args(func))
        if len(written) != len(self.values):
            raise RuntimeError(f"selective checkpoint: {op_name(func)} wrote {len(self.values)} tensors in forward "
                               f"but {len(written)} in the recompute")
        with torch.no_grad():
            for t, v in zip(written, self.values):
                t.copy_(v)
        flat = [written[v] if kind == "arg" else v for kind, v in self.slots]
        return tree_unflatten(flat, self.spec)


class _SwapEntry:
    """Cache entry of a swapped output: a swap handle, restored on replay (``get_val`` like torch's entries)."""

    __slots__ = ("engine", "handle")

    def __init__(self, engine, handle) -> None:
        self.engine = engine
        self.handle = handle

    def get_val(self, allow_cache_entry_mutation):  # pylint: disable=unused-argument
        """The restored tensor."""
        return self.engine.unpack(self.handle)


class TrimMemo:
    """Cache positions ``(op, call index)`` that the last recompute of a region never replayed: with
    early stop, the recompute ends at the last saved tensor, so the outputs of the ops after it (the
    down projection feeding only the residual add, for example) were cached for nothing. The next
    forward does not cache them; if a later recompute does reach one, it recomputes it and the
    position is cached again from then on. Communication ops are never trimmed."""

    __slots__ = ("skip",)

    def __init__(self) -> None:
        self.skip: set = set()

    def update(self, storage, needed: set) -> None:
        """After a recompute: keep skipping what was not needed, add what was cached but not replayed."""
        skip = self.skip - needed
        for key, entries in storage.items():
            for idx, entry in entries.items():
                if entry is not _tc._CONSUMED and entry is not _tc._RECOMPUTE and not isinstance(entry, _InplaceEntry):
                    skip.add((key, idx))
        self.skip = skip


class _Region:
    """One checkpointed call: its policy, trim memo, and the swap record of its ``MUST_SWAP`` outputs."""

    __slots__ = ("decide", "table", "memo", "needed", "manager", "group", "rid", "engine", "in_recompute", "exclude")

    def __init__(self, decide: Callable, manager, group: Optional[str], memo: Optional[TrimMemo] = None) -> None:
        self.decide = decide
        self.table: Optional[Dict[Any, CheckpointPolicy]] = getattr(decide, "table", None)
        self.memo = memo
        self.needed: set = set()
        self.manager = manager
        self.group = group
        self.rid: Optional[int] = None
        self.engine = None
        self.in_recompute = False
        self.exclude: frozenset = frozenset()

    def swap_entry(self, x):
        """Cache entry for output ``x`` of a ``MUST_SWAP`` op."""
        if not isinstance(x, torch.Tensor):
            return _tc._VersionWrapper(x)
        if self.rid is None:
            raise PolicyError("selective checkpoint: the policy returned MUST_SWAP but the region has no swap group")
        handle = self.engine.pack_for(self.rid, _tc._detach_helper(x), self.exclude)
        if isinstance(handle, torch.Tensor):
            return _tc._VersionWrapper(handle)
        return _SwapEntry(self.engine, handle)


_IGNORED = _tc.SAC_IGNORED_OPS
_PARAM_COMM = _recompute._DEPTH  # > 0 inside parameter_communication(): FSDP unshards, passed through
_RECOMPUTE = _tc._RECOMPUTE
_CONSUMED = _tc._CONSUMED
_VersionWrapper = _tc._VersionWrapper
_detach = _tc._detach_helper
_storage_key = _tc._sac_storage_key


class _CachingMode(_tc._CachingTorchDispatchMode):
    """Forward half: runs each op, asks the region's policy, caches kept outputs (see the module doc).

    The dispatch methods are written out (torch's storage format and entries, no ``super()`` call)
    and not wrapped for dynamo: this pair is eager-only and runs on every op of the region."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False

    def __init__(self, region: _Region, storage) -> None:
        super().__init__(None, storage)
        self.region = region

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = {} if kwargs is None else kwargs
        out = func(*args, **kwargs)
        if func in _IGNORED or _PARAM_COMM[0]:
            return out
        key = _storage_key(func, args)
        idx = self.func_counter[key]
        self.func_counter[key] = idx + 1
        region = self.region
        decision = region.table.get(func) if region.table is not None else None
        if decision is None:
            decision = region.decide(func, args, kwargs, out)
        positions = _mutated_args(func)
        if not decision.keeps_output or (positions is None and region.memo is not None
                                         and (key, idx) in region.memo.skip):
            self.storage[key][idx] = _RECOMPUTE
            return out
        if positions is not None:
            self.storage[key][idx] = _InplaceEntry(func, args, kwargs, out, positions)
        elif decision is CheckpointPolicy.MUST_SWAP:
            self.storage[key][idx] = tree_map(self.region.swap_entry, out)
        elif type(out) is torch.Tensor:  # pylint: disable=unidiomatic-typecheck
            self.storage[key][idx] = _VersionWrapper(_detach(out))
        else:
            self.storage[key][idx] = tree_map(lambda x: _VersionWrapper(_detach(x)), out)
        return out


class _ReplayMode(_tc._CachedTorchDispatchMode):
    """Recompute half: torch's replay (same storage and entries), plus the replay of kept
    communication ops; finishes the region's swap record when the recompute ends."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False

    def __init__(self, region: _Region, storage) -> None:
        super().__init__(None, storage, False)
        self.region = region

    def __enter__(self):
        self.region.in_recompute = True
        return super().__enter__()

    def __exit__(self, *exc):
        region = self.region
        region.in_recompute = False
        if region.memo is not None:
            region.memo.update(self.storage, region.needed)
        if region.rid is not None:
            # the recompute is over (finished or stopped early): entries it did not replay are not
            # needed by backward; release the record's files and buffers now
            region.manager.finish_record(region.rid)
            region.rid = None
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = {} if kwargs is None else kwargs
        if func in _IGNORED or _PARAM_COMM[0]:
            return func(*args, **kwargs)
        key = _storage_key(func, args)
        idx = self.func_counter[key]
        self.func_counter[key] = idx + 1
        entries = self.storage.get(key)
        entry = entries.get(idx) if entries is not None else None
        if entry is None:
            raise RuntimeError(f"selective checkpoint: {func} (call {idx}) ran in the recompute but not in forward; "
                               f"{_tc._SAC_MISMATCH_MSG}")
        if entry is _RECOMPUTE:
            memo = self.region.memo
            if memo is not None and (key, idx) in memo.skip:
                self.region.needed.add((key, idx))
            return func(*args, **kwargs)
        if entry is _CONSUMED:
            raise RuntimeError("selective checkpoint: backward ran a second time through a checkpointed region; "
                               "it can run backward only once")
        entries[idx] = _CONSUMED
        if isinstance(entry, _InplaceEntry):
            return entry.replay(func, args, kwargs)
        if isinstance(entry, _VersionWrapper):
            return entry.get_val(False)
        return tree_map(lambda x: x.get_val(False), entry)


def _decider(policy) -> Callable:
    """``(func, args, kwargs, out) -> CheckpointPolicy`` for an OpPolicy or a torch-style policy function."""
    if isinstance(policy, OpPolicy):
        cache: Dict[Any, CheckpointPolicy] = {}

        def decide(func, args, kwargs, out):  # pylint: disable=unused-argument
            hit = cache[func] = policy.decide(op_name(func))
            return hit
        decide.table = cache  # the modes look decisions up here first
        return decide

    def decide_fn(func, args, kwargs, out):
        ctx = _tc.SelectiveCheckpointContext(is_recompute=False, op_output=out)
        return CheckpointPolicy.coerce(policy(ctx, func, *args, **kwargs), f"policy function result for {func}")
    return decide_fn


def selective_checkpoint_contexts(policy, manager=None, group: Optional[str] = None, memo: Optional[TrimMemo] = None):
    """``context_fn`` for ``torch.utils.checkpoint.checkpoint(use_reentrant=False)``: our caching and
    replay modes for ``policy`` (an :class:`OpPolicy`, a list of op names, or a policy function).
    Returns ``(forward_mode, recompute_mode)``; ``forward_mode.region`` carries the swap record.
    ``memo`` (a :class:`TrimMemo` kept across steps) stops caching what recomputes never replay."""
    region = _Region(_decider(resolve_policy(policy)), manager, group, memo)
    storage: Dict[Any, Dict[int, Any]] = defaultdict(dict)
    return _CachingMode(region, storage), _ReplayMode(region, storage)


def _needs_swap(policy) -> bool:
    return isinstance(policy, OpPolicy) and policy.swaps


def _excluded_storages(fn) -> frozenset:
    """Storage pointers of ``fn``'s parameters and buffers (never swapped)."""
    module = fn if isinstance(fn, torch.nn.Module) else getattr(fn, "__self__", None)
    if not isinstance(module, torch.nn.Module):
        return frozenset()
    from hyper_parallel.activation._torch.swap import module_storages
    return module_storages(module)


def checkpoint(fn: Callable, *args, policy=None, manager=None, group: Optional[str] = None,
               memo: Optional[TrimMemo] = None, **kwargs):
    """Run ``fn(*args, **kwargs)`` without keeping its activations, recomputing them in backward.

    ``policy``: ``None``/``"full"`` (recompute everything: torch's plain non-reentrant checkpoint),
    ``"op"`` (:func:`op_policy`: keep matmul/attention outputs and collectives), a list of op names,
    an :class:`OpPolicy`, or a policy function. Outputs of ``MUST_SWAP`` ops go to ``manager`` (a
    :class:`SwapManager`; default: the process-wide one) under swap group ``group``. Other keyword
    arguments of ``torch.utils.checkpoint.checkpoint`` (``preserve_rng_state``, ``determinism_check``,
    ``debug``, ``early_stop``) are passed through; the rest go to ``fn``. ``memo``: a
    :class:`TrimMemo` reused across calls of the same region (``checkpoint_wrapper`` keeps one).
    """
    policy = resolve_policy(policy, "checkpoint(policy)")
    if isinstance(policy, OpPolicy) and not policy.needs_dispatch:
        return _tc.checkpoint(fn, *args, use_reentrant=False, **kwargs)
    if not torch.is_grad_enabled():
        return fn(*args, **kwargs)
    swaps = _needs_swap(policy)
    if swaps and manager is None:
        from hyper_parallel.activation._torch.swap import default_manager
        manager = default_manager()
    region_box: list = []

    def context_fn():
        fwd, rec = selective_checkpoint_contexts(policy, manager, group, memo)
        region_box.append(fwd.region)
        return fwd, rec

    if not swaps:
        return _tc.checkpoint(fn, *args, use_reentrant=False, context_fn=context_fn, **kwargs)
    return _checkpoint_with_swap(fn, args, kwargs, context_fn, region_box, manager, group)


def _checkpoint_with_swap(fn, args, kwargs, context_fn, region_box, manager, group):
    from hyper_parallel.activation._torch.swap import TorchSwapEngine
    engine = manager.attach(TorchSwapEngine)
    name = group or f"checkpoint{next(_REGION_IDS)}"
    exclude = _excluded_storages(fn)

    def run(*a, **k):
        region = region_box[-1]
        if region.in_recompute:
            return fn(*a, **k)
        region.engine, region.exclude = engine, exclude
        region.rid = manager.open_record(name)
        try:
            out = fn(*a, **k)
        except BaseException:
            manager.discard_record(region.rid)
            raise
        manager.close_record(region.rid)
        return out
    return _tc.checkpoint(run, *args, use_reentrant=False, context_fn=context_fn, **kwargs)


def _checkpointed_forward(orig_forward, policy, manager, group, memo, *args, **kwargs):
    return checkpoint(orig_forward, *args, policy=policy, manager=manager, group=group, memo=memo, **kwargs)


def checkpoint_wrapper(module: torch.nn.Module, policy=None, *, manager=None, group: Optional[str] = None):
    """Checkpoint ``module``'s forward with ``policy`` (see :func:`checkpoint`), in place.

    The module is returned, not wrapped in a new one: parameter names (state dicts, TP plans, FSDP)
    stay unchanged, and the module's own hooks (``fully_shard``'s unshard, TP's input layouts) run
    outside the checkpointed region, so they are neither recomputed nor cached.
    """
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"checkpoint_wrapper(module): expected a torch.nn.Module, got {type(module).__name__}")
    kinds = module.__dict__.get("_hp_activation", ())
    if "checkpoint" in kinds:
        raise ValueError(f"checkpoint_wrapper: {type(module).__name__} is already checkpointed")
    resolved = resolve_policy(policy, "checkpoint_wrapper(policy)")
    module.forward = functools.partial(_checkpointed_forward, module.forward, resolved, manager, group, TrimMemo())
    module.__dict__["_hp_activation"] = tuple(kinds) + ("checkpoint",)
    return module
