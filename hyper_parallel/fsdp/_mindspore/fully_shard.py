# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``fully_shard`` on MindSpore ``nn.Cell`` models (PyNative), with the torch API and semantics.

Each ``fully_shard`` cell is one *unit*: its parameters (those not owned by a nested unit) are replaced
by ``Parameter`` s holding this rank's ``Shard(0)`` chunk (``torch.chunk`` sizes, uneven and empty chunks
allowed), laid out in one padded flat buffer per dtype (:class:`hyper_parallel.fsdp.api.FlatLayout`, the
torch layout). The layout is recorded on the owning cell (``_hp_param_specs``), so ``tp.param_dtensor``,
the MindSpore optimizers (``parameter_specs``) and ``hyper_parallel.checkpoint`` see the sharded
parameters as DTensors.

The unit's ``construct`` is wrapped. On entry the unit concatenates its local shards into the flat buffer
and all-gathers it with :class:`FlatGather`, an autograd function of MindSpore's PyNative tape whose
backward is the whole gradient path of torch's post-backward hook: cast to ``reduce_dtype``, add what
gradient accumulation without sync kept, one reduce-scatter of the flat gradient over the shard group
(HSDP: then one all-reduce over the replicate group), ``factor / dp_size`` scaling, cast back to the
parameter dtype. The gathered parameters are installed on the owning cells for the duration of the
forward (an instance attribute shadows the ``Parameter``; this is the "parameter hook migration":
MindSpore has no forward pre-hook that may replace parameters in every mode, and a ``Parameter``
cannot be re-pointed at a tensor the tape tracks), then removed. The gradients that
``mindspore.value_and_grad(fn, None, weights)`` returns for the sharded parameters are therefore the
reduced, averaged shard gradients, as torch's ``param.grad`` after backward.

Pitfalls of that migration, documented in ``docs/fsdp.md``: the gather must run inside the function
being differentiated (it is an op of the tape), so every forward gathers again (``unshard()`` installs
gathered values for reading, e.g. evaluation), except after a backward told ``set_is_last_backward(False)``,
which keeps the gathered buffers for the next forward; the tape would keep the gathered parameters that
backward reads until the unit's backward, like any saved activation, so a unit that reshards after forward
(``reshard_after_forward`` True or an int > 1; never the outermost unit, as on torch) runs its forward under
``mindspore.saved_tensors_hooks``: the tape keeps a small record in place of each gathered parameter, and
backward all-gathers the unit again (once, on first use, or earlier from ``set_modules_to_backward_prefetch``)
and hands the parameters out; with an int ``1 < k <`` shard size the unit keeps this rank's ``1/k`` of the
gathered buffer after forward and backward gathers within its ``k``-rank group, as on torch. Units inside a
recompute cell (``activation.checkpoint_wrapper``) or a cell with its own saved-tensor hooks leave their saved
tensors to MindSpore, whose innermost hooks win. MindSpore's CPU collectives are synchronous, so prefetching
orders the gathers without overlapping them.
"""
from __future__ import annotations

import types
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import mindspore as ms
from mindspore import mint, nn, ops
# MindSpore's PyNative custom-autograd base (the one platform/mindspore/collectives.py uses)
from mindspore.common._grad_function import _Function  # pylint: disable=import-error,no-name-in-module
from mindspore.graph.api import _pynative_executor  # pylint: disable=import-error,no-name-in-module

from hyper_parallel.core.spec import DTensorSpec
from hyper_parallel.fsdp.api import (FlatLayout, MixedPrecisionPolicy, OffloadPolicy, dtype_groups,
                                     post_forward_group_size, resolve_reduce_dtype)
from hyper_parallel.fsdp.units import (STATE_ATTR, check_fully_shard_args, check_shardable, collect_unit_params,
                                       fsdp_class, prefetch_units, require_unit, sharded_param_spec)
from hyper_parallel.platform.mindspore import collectives as C

__all__ = ["fully_shard", "FSDPModule", "FlatGather", "UnshardHandle"]

_STATE_ATTR = STATE_ATTR
_SPECS_ATTR = "_hp_param_specs"
_FLOATS = (ms.float16, ms.float32, ms.float64, ms.bfloat16)
#: counters of ``FSDPModule.fsdp_stats()``
STATS = ("all_gathers", "backward_all_gathers", "reduce_scatters", "kept_local", "freed_after_forward")
#: (address, shape, dtype) of a gathered parameter in a forward that reshards -> (unit, bucket, index)
_GATHERED: Dict[tuple, tuple] = {}


def _saved_key(t) -> tuple:
    return (t.data_ptr(), tuple(t.shape), t.dtype)


class _Saved:  # pylint: disable=too-few-public-methods
    """What the tape keeps for a gathered parameter of a resharding unit: where to find it again."""

    __slots__ = ("unit", "bucket", "index")

    def __init__(self, unit: "_Unit", bucket: int, index: int) -> None:
        self.unit, self.bucket, self.index = unit, bucket, index


def _pack(t):
    """Saved-tensor pack hook: a gathered parameter of a resharding unit is kept as a :class:`_Saved`."""
    hit = _GATHERED.get(_saved_key(t)) if isinstance(t, ms.Tensor) else None
    if hit is None:
        return t
    unit = hit[0]
    unit.packed += 1
    unit.stats["freed_after_forward"] += 1
    return _Saved(*hit)


def _unpack(obj):
    """Saved-tensor unpack hook: gather a resharded unit again (once per backward) and hand its parameter."""
    if isinstance(obj, _Saved):
        return obj.unit.backward_param(obj.bucket, obj.index)
    return obj


# ---------------------------------------------------------------------- parameters and buckets
class _Entry:  # pylint: disable=too-few-public-methods
    """One managed parameter: where it is registered, its unit-local full shape and its shard."""

    __slots__ = ("fqn", "owners", "shape", "dtype", "requires_grad", "tp_spec", "sharded", "spec", "name")

    def __init__(self, fqn: str, owners: List[Tuple[nn.Cell, str]], param: ms.Parameter, tp_spec) -> None:
        self.fqn = fqn
        self.owners = owners
        self.shape = tuple(param.shape)
        self.dtype = param.dtype
        self.requires_grad = param.requires_grad
        self.tp_spec = tp_spec
        self.name = param.name
        self.sharded: Optional[ms.Parameter] = None
        self.spec: Optional[DTensorSpec] = None


class _Bucket:
    """The parameters of one dtype in a unit: one flat buffer, one all-gather, one reduce-scatter."""

    def __init__(self, unit: "_Unit", dtype, entries: List[_Entry]) -> None:
        self.unit = unit
        self.dtype = dtype
        self.entries = entries
        self.layout = FlatLayout([e.shape for e in entries], unit.shard_size)
        mp = unit.mp
        self.compute_dtype = mp.param_dtype if mp.param_dtype is not None else dtype
        self.reduce_dtype = resolve_reduce_dtype(mp, self.compute_dtype)
        self.acc = None  # full flat gradient kept by backward passes without gradient sync
        self.kept = None  # gathered buffer kept between backwards told set_is_last_backward(False)
        self.last_gathered = None  # the gathered buffer of the forward being set up
        self.pf_shard = None  # reshard_after_forward=k: this rank's 1/k of the gathered buffer until backward

    def flat_shard(self):
        """This rank's shards, each padded to its slot, concatenated (differentiable)."""
        lay, me = self.layout, self.unit.index
        pieces = []
        for i, e in enumerate(self.entries):
            n = lay.local_numel(i, me)
            # an empty shard is concatenated too: the flat buffer must depend on the parameters on every
            # rank, or MindSpore skips this rank's backward of the gather (and its reduce-scatter)
            pieces.append(e.sharded.reshape(-1))
            if lay.slots[i] > n:
                pieces.append(mint.zeros((lay.slots[i] - n,), dtype=self.dtype))
        return pieces[0] if len(pieces) == 1 else mint.cat(pieces, 0)

    def unflatten(self, gathered) -> List[Any]:
        """The full parameters from the rank-major gathered buffer (differentiable)."""
        lay, world = self.layout, self.unit.shard_size
        table = gathered.reshape(world, lay.total)
        out = []
        for i, e in enumerate(self.entries):
            block = mint.narrow(table, 1, lay.offsets[i], lay.slots[i]) if lay.slots[i] != lay.total else table
            rows = block.reshape(world * lay.rows[i], lay.inner[i])
            if rows.shape[0] != e.shape[0]:
                rows = mint.narrow(rows, 0, 0, e.shape[0])
            # a tensor of its own, not a view of the gathered buffer: the tape saves a view under another
            # address, and the saved-tensor pack hook recognises a gathered parameter by its address
            out.append(rows.reshape(e.shape).copy())
        return out

    def reduce(self, grad, flat_dtype):
        """The gradient of this rank's flat shard from the gradient of the gathered buffer."""
        unit = self.unit
        g = grad.astype(self.reduce_dtype) if grad.dtype != self.reduce_dtype else grad
        if self.acc is not None:
            g = g + self.acc
            self.acc = None
        if unit.is_last_backward:  # the step's last backward: the unit reshards
            self.kept = None
        if not unit.is_last_backward or not unit.requires_grad_sync:
            self.acc = g
            unit.stats["kept_local"] += 1
            return mint.zeros((self.layout.total,), dtype=flat_dtype)
        total, world = self.layout.total, unit.shard_size
        shard = C.raw_reduce_scatter(g, "sum", unit.shard_group, 0, (total,) * world, unit.index)
        if unit.replicate_group is not None:
            shard = C.raw_all_reduce(shard, "sum", unit.replicate_group)
        unit.stats["reduce_scatters"] += 1
        shard = shard * (unit.scale / unit.dp_size)
        return shard.astype(flat_dtype) if shard.dtype != flat_dtype else shard


class FlatGather(_Function):  # pylint: disable=abstract-method  # forward(ctx, ...) form
    """All-gather of a unit's flat shard (cast to the compute dtype first). Adjoint: the FSDP gradient
    reduction of :meth:`_Bucket.reduce` (reduce-scatter, HSDP all-reduce, averaging, accumulation)."""

    @staticmethod
    def forward(ctx, flat, bucket):  # pylint: disable=arguments-differ
        """Gather the rank-major flat buffer of every rank of the shard group."""
        ctx.bucket = bucket
        ctx.flat_dtype = flat.dtype
        unit = bucket.unit
        if bucket.kept is not None:  # still gathered since a backward that was not the last one
            return bucket.kept
        x = flat.astype(bucket.compute_dtype) if flat.dtype != bucket.compute_dtype else flat
        unit.stats["all_gathers"] += 1
        total = bucket.layout.total
        out = C.raw_all_gather(x, unit.shard_group, 0, (total,) * unit.shard_size)
        if not unit.is_last_backward:
            bucket.kept = out
        return out

    @staticmethod
    def backward(ctx, grad):  # pylint: disable=arguments-differ
        """Reduce the gathered buffer's gradient to this rank's flat shard gradient."""
        return ctx.bucket.reduce(grad, ctx.flat_dtype), None


# ---------------------------------------------------------------------- the unit
class _Unit:  # pylint: disable=too-many-instance-attributes
    """The FSDP state of one ``fully_shard`` cell."""

    def __init__(self, cell: nn.Cell, entries: List[_Entry], mesh, mp: MixedPrecisionPolicy, k: int) -> None:
        self.cell = cell
        self.entries = entries
        self.mesh = mesh
        self.mp = mp
        self.post_forward_k = k
        coord = mesh.get_coordinate()
        if coord is None:
            raise ValueError(f"fully_shard(mesh): this rank is not part of {mesh}")
        self.shard_group = mesh.get_group(mesh.ndim - 1)
        self.shard_size = mesh.shape[-1]
        self.index = coord[-1]
        self.replicate_group = mesh.get_group(0) if mesh.ndim == 2 and mesh.shape[0] > 1 else None
        self.pf_group, self.pf_position = _post_forward_group(mesh, k) if 1 < k < self.shard_size else (None, 0)
        self.dp_size = mesh.size()
        self.scale = 1.0
        self.requires_grad_sync = True
        self.is_last_backward = True
        self.forward_prefetch: List["_Unit"] = []
        self.backward_prefetch: List["_Unit"] = []
        self.prefetched: Optional[List[Any]] = None
        self.manual: Optional[List[Any]] = None
        self.under_recompute = False  # set by the root's forward: a recompute cell frees this unit already
        self.packed = 0  # saved gathered parameters of this unit's forwards not yet unpacked by backward
        self.backward_fulls: Optional[List[List[Any]]] = None  # the parameters gathered again in backward
        self.pre_backward_done = False
        self.stats = dict.fromkeys(STATS, 0)
        self.buckets = [_Bucket(self, d, [entries[i] for i in idx]) for d, idx in
                        dtype_groups([e.dtype for e in entries])]

    def gather(self) -> List[Tuple[_Entry, Any]]:
        """(entry, gathered full parameter) for every managed parameter (ops of the autograd tape)."""
        out = []
        for b in self.buckets:
            gathered = FlatGather.apply(b.flat_shard(), b)
            b.last_gathered = gathered
            out.extend(zip(b.entries, b.unflatten(gathered)))
        return out

    def keep_post_forward(self) -> None:
        """``reshard_after_forward=k`` (1 < k < shard size): keep this rank's ``1/k`` of each gathered buffer
        (its part for the ``k``-rank post-forward group), so that backward gathers within that group only."""
        for b in self.buckets:
            if b.last_gathered is not None:
                off, length = b.layout.post_forward_range(self.post_forward_k, self.pf_position)
                b.pf_shard = ops.stop_gradient(mint.narrow(b.last_gathered, 0, off, length)).copy()

    def install(self, fulls: Iterable[Tuple[_Entry, Any]]) -> None:
        """Shadow each sharded ``Parameter`` with its gathered value on every owning cell."""
        for e, full in fulls:
            for owner, leaf in e.owners:
                owner.__dict__[leaf] = full

    def reshards_after_forward(self, is_root: bool) -> bool:
        """Whether this forward's saved gathered parameters are dropped and gathered again in backward."""
        return (self.post_forward_k > 1 and not is_root and not self.under_recompute
                and self.is_last_backward and all(b.kept is None for b in self.buckets))

    def register_saved(self, fulls: Sequence[Tuple[_Entry, Any]]) -> None:
        """Make the saved-tensor pack hook recognise this forward's gathered parameters."""
        where = {id(e): (bi, i) for bi, b in enumerate(self.buckets) for i, e in enumerate(b.entries)}
        for e, full in fulls:
            _GATHERED[_saved_key(full)] = (self, *where[id(e)])

    def unregister_saved(self, fulls: Sequence[Tuple[_Entry, Any]]) -> None:
        """The gathered parameters of this forward are no longer recognised (their addresses may be reused)."""
        for _, full in fulls:
            _GATHERED.pop(_saved_key(full), None)

    def backward_param(self, bucket: int, index: int):
        """A saved gathered parameter for backward: all-gathers the unit again on first use."""
        if self.backward_fulls is None:
            self.backward_gather()
        full = self.backward_fulls[bucket][index]
        self.packed -= 1
        if self.packed <= 0:  # every saved parameter of the unit handed out: drop the gathered copies
            self.packed = 0
            self.backward_fulls = None
        return full

    def backward_gather(self) -> None:
        """All-gather the unit's parameters again for its backward (outside the autograd tape)."""
        fulls = []
        for b in self.buckets:
            if b.pf_shard is not None:  # reshard_after_forward=k: gather within the k-rank group
                k = self.post_forward_k
                gathered = C.raw_all_gather(b.pf_shard, self.pf_group, 0, (b.pf_shard.shape[0],) * k)
                b.pf_shard = None
            else:
                flat = ops.stop_gradient(b.flat_shard())
                x = flat.astype(b.compute_dtype) if flat.dtype != b.compute_dtype else flat
                gathered = C.raw_all_gather(x, self.shard_group, 0, (b.layout.total,) * self.shard_size)
            fulls.append(b.unflatten(gathered))
        self.stats["backward_all_gathers"] += 1
        self.backward_fulls = fulls

    def pre_backward(self) -> None:
        """The first gradient of this unit's outputs arrived: all-gather the backward-prefetch targets."""
        if self.pre_backward_done:
            return
        self.pre_backward_done = True
        for target in self.backward_prefetch:
            if target.packed > 0 and target.backward_fulls is None:
                target.backward_gather()

    def uninstall(self) -> None:
        """The sharded ``Parameter`` s are what the owning cells see again."""
        for e in self.entries:
            for owner, leaf in e.owners:
                owner.__dict__.pop(leaf, None)


def _post_forward_group(mesh, k: int) -> Tuple[Any, int]:
    """This rank's ``k``-rank post-forward group (consecutive ranks along the shard dim, in mesh order) and its
    position there; every group is created on its members."""
    from hyper_parallel.core.process_group import get_or_create_group
    me = C._my_rank()  # pylint: disable=protected-access
    mine = (None, 0)
    for ranks in mesh.topology.groups_along(mesh.ndim - 1):
        for start in range(0, len(ranks), k):
            sub = tuple(ranks[start:start + k])
            if me in sub:
                mine = (get_or_create_group(sub, platform="mindspore"), sub.index(me))
    return mine


def _units_below(cell: nn.Cell) -> List[_Unit]:
    out = []
    for _, sub in cell.cells_and_names():
        st = sub.__dict__.get(_STATE_ATTR)
        if st is not None and st.unit is not None:
            out.append(st.unit)
    return out


class _State:  # pylint: disable=too-few-public-methods
    """Per-cell FSDP state (``unit`` is None for a cell without parameters of its own)."""

    depth = [0]  # number of fully_shard constructs running (0: a new forward, or a recomputation, begins)

    def __init__(self, cell: nn.Cell, unit: Optional[_Unit], mp: MixedPrecisionPolicy) -> None:
        self.cell = cell
        self.unit = unit
        self.mp = mp


def _cast(tree: Any, dtype) -> Any:
    if isinstance(tree, ms.Tensor) and tree.dtype in _FLOATS:
        return tree.astype(dtype) if tree.dtype != dtype else tree
    if isinstance(tree, tuple):
        return tuple(_cast(t, dtype) for t in tree)
    if isinstance(tree, list):
        return [_cast(t, dtype) for t in tree]
    if isinstance(tree, dict):
        return {k: _cast(v, dtype) for k, v in tree.items()}
    return tree


def _frees_saved_tensors(cell: nn.Cell) -> bool:
    """Whether MindSpore already handles the saved tensors of ``cell`` (recompute or saved-tensor hooks)."""
    return (getattr(cell, "_recompute_cell", None) is not None
            or getattr(cell, "_saved_tensors_pack_hook", None) is not None)


def _begin_forward(root: nn.Cell) -> None:
    """A new forward (or a recomputation) of the outermost unit: drop stale prefetches and backward
    gathers, and mark the units that a recompute cell (or a cell's saved-tensor hooks) covers, whose
    saved tensors FSDP must leave to MindSpore (the innermost saved-tensor hooks win)."""
    def walk(cell: nn.Cell, covered: bool) -> None:
        covered = covered or _frees_saved_tensors(cell)
        st = cell.__dict__.get(_STATE_ATTR)
        if st is not None and st.unit is not None:
            u = st.unit
            u.prefetched, u.backward_fulls, u.packed, u.under_recompute = None, None, 0, covered
        for child in cell._cells.values():  # pylint: disable=protected-access
            if child is not None:
                walk(child, covered)

    walk(root, False)


def _hook_outputs(out: Any, unit: _Unit) -> None:
    """Register the unit's pre-backward (backward prefetch) on its floating-point outputs."""
    def hook(_grad):
        unit.pre_backward()

    for t in _tensors(out):
        if t.dtype in _FLOATS:
            t.register_hook(hook)


def _tensors(tree: Any) -> List[Any]:
    if isinstance(tree, ms.Tensor):
        return [tree]
    if isinstance(tree, (tuple, list)):
        return [t for x in tree for t in _tensors(x)]
    if isinstance(tree, dict):
        return [t for x in tree.values() for t in _tensors(x)]
    return []


def _unit_forward(unit: _Unit, is_root: bool, run) -> Any:
    """Gather (or take the prefetched / kept gather), prefetch, run ``run()`` with the gathered parameters
    installed; a resharding unit runs it under saved-tensor hooks that drop its gathered parameters from
    the tape (they are gathered again in backward)."""
    fulls, unit.prefetched = (unit.prefetched or unit.gather()), None
    unit.backward_fulls, unit.pre_backward_done = None, False
    for b in unit.buckets:
        b.pf_shard = None
    for target in unit.forward_prefetch:
        if target.prefetched is None:
            target.prefetched = target.gather()
    unit.install(fulls)
    grad = _pynative_executor.requires_grad()
    reshard = grad and unit.reshards_after_forward(is_root)
    if reshard and unit.pf_group is not None:
        unit.keep_post_forward()
    for b in unit.buckets:
        b.last_gathered = None
    try:
        if not reshard:
            out = run()
        else:
            unit.register_saved(fulls)
            try:
                with ms.saved_tensors_hooks(_pack, _unpack):
                    out = run()
            finally:
                unit.unregister_saved(fulls)
    finally:
        unit.uninstall()
        if unit.manual is not None:  # unsharded by hand: keep the values readable
            unit.install(unit.manual)
    if grad:
        _hook_outputs(out, unit)
    return out


def _wrap_construct(cell: nn.Cell) -> None:
    inner = cell.construct

    def construct(self, *args, **kwargs):
        state: _State = self.__dict__[_STATE_ATTR]
        is_root = _State.depth[0] == 0
        if is_root:  # a new forward (or a recomputation)
            _begin_forward(self)
        mp = state.mp
        if mp.cast_forward_inputs and mp.param_dtype is not None:
            args, kwargs = _cast((args, kwargs), mp.param_dtype)
        _State.depth[0] += 1
        try:
            if state.unit is None:
                out = inner(*args, **kwargs)
            else:
                out = _unit_forward(state.unit, is_root, lambda: inner(*args, **kwargs))
        finally:
            _State.depth[0] -= 1
        if mp.output_dtype is not None:
            out = _cast(out, mp.output_dtype)
        return out

    cell.construct = types.MethodType(construct, cell)


# ---------------------------------------------------------------------- FSDPModule
class UnshardHandle:
    """Returned by ``FSDPModule.unshard(async_op=True)``; MindSpore's CPU collectives are synchronous, so the
    gather is done when it is returned and ``wait()`` only returns."""

    def wait(self) -> None:
        """Nothing left to wait for."""


class FSDPModule:
    """Mixin added to every cell passed to ``fully_shard`` (``FSDP<Class>``), MindSpore flavour."""

    def _fsdp_units(self, recurse: bool) -> List[_Unit]:
        if recurse:
            return _units_below(self)  # type: ignore[arg-type]
        unit = self.__dict__[_STATE_ATTR].unit
        return [unit] if unit is not None else []

    def unshard(self, async_op: bool = False) -> Optional[UnshardHandle]:
        """All-gather this cell's parameters (outside autograd) and register them unsharded for reading
        until :meth:`reshard` (a forward still gathers on the tape, so its gradients stay right)."""
        for unit in self._fsdp_units(False):
            with_grad = unit.gather()
            unit.manual = [(e, ops.stop_gradient(full)) for e, full in with_grad]
            unit.install(unit.manual)
        return UnshardHandle() if async_op else None

    def reshard(self) -> None:
        """Register the sharded parameters again and drop the unsharded values."""
        for unit in self._fsdp_units(False):
            unit.manual = None
            unit.uninstall()

    def set_requires_gradient_sync(self, requires_gradient_sync: bool, *, recurse: bool = True) -> None:
        """When False, backward keeps the unsharded flat gradients locally (no reduce-scatter) and returns
        zero gradients for the shards; the next backward with True adds what was kept and reduces the sum
        once (gradient accumulation without communication: sum the returned gradients as usual)."""
        for unit in self._fsdp_units(recurse):
            unit.requires_grad_sync = bool(requires_gradient_sync)

    def set_gradient_scaling_factor(self, factor: float, *, recurse: bool = True) -> None:
        """Multiply the reduced gradients by ``factor`` on top of the data-parallel average."""
        if not isinstance(factor, (int, float)) or isinstance(factor, bool):
            raise TypeError(f"set_gradient_scaling_factor(factor): expected a number, got {factor!r}")
        for unit in self._fsdp_units(recurse):
            unit.scale = float(factor)

    def set_is_last_backward(self, is_last_backward: bool, *, recurse: bool = True) -> None:
        """Whether the next backward is the last one of the step (default True). When False, that backward
        reduces nothing (it keeps the unsharded flat gradients locally and returns zero shard gradients, as
        without gradient sync) and the units stay gathered: the next forward reuses the gathered buffers
        without an all-gather and nothing is resharded after forward. The next backward with True adds what
        was kept, reduces the sum once and reshards (pipeline microbatches)."""
        for unit in self._fsdp_units(recurse):
            unit.is_last_backward = bool(is_last_backward)

    def set_modules_to_forward_prefetch(self, modules: List["FSDPModule"]) -> None:
        """All-gather ``modules`` right after this cell's own all-gather in forward (their forward then
        uses that gather)."""
        require_unit(self, "set_modules_to_forward_prefetch").forward_prefetch = prefetch_units(
            modules, "set_modules_to_forward_prefetch", nn.Cell, "cell")

    def set_modules_to_backward_prefetch(self, modules: List["FSDPModule"]) -> None:
        """All-gather ``modules`` again in this cell's pre-backward (when the first gradient of its outputs
        arrives) instead of when their own backward first reads a parameter. Only units that resharded after
        forward gather in backward; MindSpore's CPU collectives are synchronous, so this orders the gathers
        without overlapping them."""
        require_unit(self, "set_modules_to_backward_prefetch").backward_prefetch = prefetch_units(
            modules, "set_modules_to_backward_prefetch", nn.Cell, "cell")

    def fsdp_stats(self) -> Dict[str, int]:
        """Counts of this cell's units so far: ``all_gathers`` (forward), ``backward_all_gathers`` (units
        gathered again in backward after resharding), ``reduce_scatters``, ``kept_local`` (backwards without
        reduction) and ``freed_after_forward`` (gathered parameters dropped from the tape after forward)."""
        out = dict.fromkeys(STATS, 0)
        for unit in self._fsdp_units(True):
            for k, v in unit.stats.items():
                out[k] += v
        return out


# ---------------------------------------------------------------------- fully_shard
def _collect(cell: nn.Cell, ignored_params) -> List[_Entry]:
    found = collect_unit_params(cell, params=lambda c: c._params.items(),  # pylint: disable=protected-access
                                children=lambda c: c._cells.items(),  # pylint: disable=protected-access
                                ignored=ignored_params or ())
    entries = []
    for p, owners, fqn in found:
        check_shardable(fqn, len(p.shape))
        owner, leaf = owners[0]
        entries.append(_Entry(fqn, owners, p, owner.__dict__.get(_SPECS_ATTR, {}).get(leaf)))
    return entries


def _spec_for(e: _Entry, mesh) -> DTensorSpec:
    """The global spec of a sharded parameter (plain FSDP, HSDP, or TP x FSDP)."""
    return sharded_param_spec(e.fqn, e.shape, e.tp_spec, mesh, C._my_rank())  # pylint: disable=protected-access


def _shard_parameters(unit: _Unit) -> None:
    for b in unit.buckets:
        for i, e in enumerate(b.entries):
            owner, leaf = e.owners[0]
            param = owner._params[leaf]  # pylint: disable=protected-access
            rows = b.layout.local_shape(i, unit.index)[0]
            data = param.value()
            if rows == 0:  # an empty chunk (may start past the end: MindSpore's narrow refuses that)
                data = mint.zeros((0,) + tuple(e.shape[1:]), dtype=data.dtype)
            elif rows != e.shape[0]:
                data = mint.narrow(data, 0, b.layout.rows[i] * unit.index, rows)
            e.sharded = ms.Parameter(data.copy(), name=e.name, requires_grad=e.requires_grad)
            e.spec = _spec_for(e, unit.mesh)
            for o, name in e.owners:
                setattr(o, name, e.sharded)
                o.__dict__.setdefault(_SPECS_ATTR, {})[name] = e.spec


def _default_mesh():
    import hyper_parallel as hp
    from hyper_parallel.platform import get_platform
    return hp.init_device_mesh("cpu", (get_platform("mindspore").get_world_size(),), platform="mindspore")


_NO_OFFLOAD = ("fully_shard(offload_policy=CPUOffloadPolicy()) is not supported on MindSpore because its CPU "
               "backend keeps every tensor in host memory already (nothing to offload) and device placement of "
               "MindSpore Parameters is not per tensor; use OffloadPolicy()")


def _check_mesh(mesh) -> None:
    if mesh.ndim not in (1, 2):
        raise ValueError(f"fully_shard(mesh): expected a 1-D mesh (FSDP) or a 2-D (replicate, shard) mesh (HSDP), "
                         f"got {mesh.ndim}-D {mesh}")


def fully_shard(module: nn.Cell, *, mesh=None, reshard_after_forward: Any = True,
                mp_policy: Optional[MixedPrecisionPolicy] = None, offload_policy: Optional[OffloadPolicy] = None,
                ignored_params: Optional[Sequence[ms.Parameter]] = None) -> nn.Cell:
    """Shard ``module``'s parameters (those not already managed by a nested ``fully_shard``) over the
    data-parallel mesh dim and wrap its ``construct`` (FSDP2 semantics on MindSpore; see the module doc).

    Args:
        module: the ``nn.Cell``; its class becomes ``FSDP<Class>`` (an :class:`FSDPModule`).
        mesh: a 1-D ``DeviceMesh`` (FSDP) or a 2-D one (replicate, shard) for HSDP; default: the world.
        reshard_after_forward: True, False or an int dividing the shard group size (validated as on
            torch; see the module doc for what frees memory on MindSpore).
        mp_policy: :class:`MixedPrecisionPolicy` (compute, reduce and output dtypes).
        offload_policy: ``OffloadPolicy()`` only (CPU offload has no meaning on MindSpore's CPU backend).
        ignored_params: parameters to leave alone (neither sharded nor reduced).

    Returns the same cell. Parameters that TP already sharded (a 1-D TP mesh, slices of one named 2-D
    mesh with ``mesh``) are sharded again on dim 0 of their local shard.
    """
    mp_policy = MixedPrecisionPolicy() if mp_policy is None else mp_policy
    offload_policy = OffloadPolicy() if offload_policy is None else offload_policy
    mesh = _default_mesh() if mesh is None else mesh
    check_fully_shard_args(module, nn.Cell, "a mindspore.nn.Cell", mp_policy, offload_policy, _NO_OFFLOAD)
    _check_mesh(mesh)
    k = post_forward_group_size(reshard_after_forward, mesh.shape[-1])
    entries = _collect(module, ignored_params)
    unit = _Unit(module, entries, mesh, mp_policy, k) if entries else None
    if unit is not None:
        _shard_parameters(unit)
    module.__dict__[_STATE_ATTR] = _State(module, unit, mp_policy)
    _wrap_construct(module)
    module.__class__ = fsdp_class(type(module), FSDPModule)
    return module
