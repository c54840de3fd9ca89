# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``replicate`` on MindSpore ``nn.Cell`` models: data parallel with full parameters on every rank and the
gradient all-reduce overlapped with backward (torch's ``replicate`` / DDP, for MindSpore's functional autograd).

The parameters (in reverse registration order, the order backward produces their gradients) are laid into
buckets of at most ``bucket_cap_mb`` (one dtype each). Every parameter gets a tensor hook
(``Parameter.register_hook``); when the last gradient of a bucket arrives during backward, the bucket's
gradients are flattened, divided by the data-parallel size, and their all-reduce over the mesh's group is
*started* (``mindspore.mint.distributed.all_reduce(..., async_op=True)``); backward goes on with the next
layers. ``value_and_grad`` returns this rank's local gradients as usual; :meth:`ReplicateModule.reduce_gradients`
then waits on the handles and returns the averaged gradients in the caller's parameter order (a bucket whose
hooks did not all fire -- a parameter without a gradient in this backward -- is reduced there, synchronously,
from the gradients passed in). ``overlap=False`` launches every bucket there instead (the baseline of the
measurement in ``docs/mindspore.md``); :meth:`ReplicateModule.remove_gradient_hooks` (for a backward under
``mindspore.jit``) leaves every bucket to it; such a graph can return the buckets already flat
(:func:`pack_gradients`, the loss at the end of the last) for :meth:`ReplicateModule.reduce_packed`: one
all-reduce per bucket and one split, no per-parameter op before them. Gradient accumulation:
``set_requires_gradient_sync(False)`` keeps each micro-batch's gradients locally (summed); the next
synchronised backward reduces the sums.

On CPU (``mccl``) the collective runs on the calling thread even with ``async_op=True``; the overlap pays on
devices whose communication runs on its own stream (``hccl``/``nccl``). Results equal the one-process
gradients of the whole batch (tests: ``tests/st/mindspore/replicate_checks.py``).
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import mindspore as ms
from mindspore import mint, nn

from hyper_parallel.platform.mindspore import collectives as C

__all__ = ["replicate", "replicated", "ReplicateModule", "pack_gradients"]

_STATE = "_hp_replicate_state"


class _Bucket:  # pylint: disable=too-few-public-methods
    """Parameters whose gradients are all-reduced together."""

    def __init__(self, index: int, params: List[ms.Parameter]) -> None:
        self.index = index
        self.params = params
        self.grads: Dict[int, Any] = {}
        self.sizes = [int(p.size) for p in params]  # each parameter's span in the flat buffer, in order
        self.flat = None
        self.handle = None
        self.started_during_backward = False


class _State:  # pylint: disable=too-many-instance-attributes
    def __init__(self, params: List[ms.Parameter], group, bucket_bytes: int, overlap: bool) -> None:
        self.group = group
        self.size = group.size
        self.overlap = overlap
        self.requires_sync = True
        self.acc: Dict[int, Any] = {}
        self.buckets: List[_Bucket] = []
        self.where: Dict[int, _Bucket] = {}
        self.launch_order: List[int] = []
        self.reduced: List[Any] = []  # the last reduction's averaged flat buckets (gradients only)
        cur: List[ms.Parameter] = []
        used = 0
        for p in reversed(params):
            nbytes = int(p.size) * p.itemsize
            if cur and (used + nbytes > bucket_bytes or p.dtype != cur[0].dtype):
                self._add(cur)
                cur, used = [], 0
            cur.append(p)
            used += nbytes
        if cur:
            self._add(cur)
        self.handles = [p.register_hook(self._hook(p)) for p in params]

    def _add(self, params: List[ms.Parameter]) -> None:
        b = _Bucket(len(self.buckets), params)
        self.buckets.append(b)
        for p in params:
            self.where[id(p)] = b

    def _hook(self, param: ms.Parameter):
        def hook(grad):
            key = id(param)
            if not self.requires_sync:
                self.acc[key] = grad if key not in self.acc else self.acc[key] + grad
                return grad
            bucket = self.where[key]
            bucket.grads[key] = grad + self.acc.pop(key) if key in self.acc else grad
            if self.overlap and len(bucket.grads) == len(bucket.params):
                self._launch(bucket, during_backward=True)
            return grad
        return hook

    def _launch(self, bucket: _Bucket, during_backward: bool, extra: Any = None) -> None:
        parts = [bucket.grads[id(p)].reshape(-1) for p in bucket.params]
        flat = mint.cat(parts if extra is None else parts + [extra.reshape(-1).astype(parts[0].dtype)]) / self.size
        self._start(bucket, flat, during_backward)

    def _start(self, bucket: _Bucket, flat: Any, during_backward: bool) -> None:
        """Start the all-reduce (sum) of ``bucket`` 's flat buffer, already divided by the group size."""
        bucket.flat = flat
        bucket.started_during_backward = during_backward
        self.launch_order.append(bucket.index)
        if self.size == 1:
            return
        try:
            bucket.handle = mint.distributed.all_reduce(flat, group=C._group_arg(self.group),  # noqa  # pylint: disable=W0212
                                                        async_op=True)
        except RuntimeError as exc:
            raise C._fail("replicate gradient all_reduce", self.group, exc) from exc  # pylint: disable=W0212

    def finish(self, params: Sequence[ms.Parameter], grads: Sequence[Any], extra: Any = None):
        """Launch what backward did not, wait on every bucket, split the averages back per parameter. ``extra``
        (a tensor of values to average over the ranks, e.g. the loss) travels at the end of the last bucket
        launched here if that bucket's dtype holds it without loss (float32, float64 or ``extra``'s own), else in
        an all-reduce of its own (also when backward launched every bucket); returns ``(grads, extra average as a
        1-D tensor)`` then, else the gradients."""
        carrier = self._launch_pending(params, grads, extra)
        tail = None
        if extra is not None and carrier is None:
            tail = C.raw_all_reduce(extra.reshape(-1), "avg", self.group)
        reduced, carried = self.collect(params, carrier)
        return reduced if extra is None else (reduced, carried if tail is None else tail)

    def finish_packed(self, params: Sequence[ms.Parameter], flats: Sequence[Any], extra: bool):
        """All-reduce the flat buffers :func:`pack_gradients` built (one per bucket, in bucket order, ``extra``
        values at the end of the last); returns ``(grads, extra average or None)``."""
        if len(flats) != len(self.buckets):
            raise ValueError(f"reduce_packed: {len(flats)} flat buffers for {len(self.buckets)} buckets")
        for b, flat in zip(self.buckets, flats):
            self._start(b, flat, during_backward=False)
        return self.collect(params, self.buckets[-1] if extra else None)

    def collect(self, params: Sequence[ms.Parameter], carrier: Optional[_Bucket]):
        """Wait on every bucket and split the averages back per parameter (``mint.split``: one op per bucket);
        returns ``(gradients in the order of params, the values after the gradients in carrier's buffer)``."""
        out: Dict[int, Any] = {}
        self.reduced = []
        tail = None
        for b in self.buckets:
            if b.handle is not None:
                b.handle.wait()
            total, n = int(b.flat.size), sum(b.sizes)
            chunks = mint.split(b.flat, b.sizes if total == n else b.sizes + [total - n])
            for p, chunk in zip(b.params, chunks):
                out[id(p)] = chunk.reshape(tuple(p.shape))
            self.reduced.append(b.flat if total == n else b.flat[:n])
            if b is carrier:
                tail = chunks[-1]
            b.grads, b.flat, b.handle = {}, None, None
        missing = [p.name for p in params if id(p) not in out]
        if missing:
            raise ValueError(f"reduce_gradients: parameters not replicated by this module: {missing}")
        return [out[id(p)] for p in params], tail

    def _launch_pending(self, params: Sequence[ms.Parameter], grads: Sequence[Any], extra: Any) -> Optional[_Bucket]:
        """Launch the buckets backward did not (overlap off, a parameter without gradient, a compiled backward),
        ``extra`` at the end of the last one if its dtype holds ``extra``; returns that bucket (else None)."""
        given = {id(p): g for p, g in zip(params, grads)}
        pending = [b for b in self.buckets if b.flat is None]
        carrier = None
        if extra is not None and pending and pending[-1].params[0].dtype in (ms.float32, ms.float64, extra.dtype):
            carrier = pending[-1]
        for b in pending:
            for p in b.params:
                key = id(p)
                if key not in b.grads:
                    g = given.get(key)
                    g = mint.zeros(tuple(p.shape), dtype=p.dtype) if g is None else g
                    b.grads[key] = g + self.acc.pop(key) if key in self.acc else g
            self._launch(b, during_backward=False, extra=extra if b is carrier else None)
        return carrier

    def scaled(self, params: Sequence[ms.Parameter], factor: float) -> List[Any]:
        """The last reduction's gradients times ``factor``: one multiply per flat bucket, then the split."""
        if not self.reduced:
            raise RuntimeError("scale_reduced_gradients: no gradients were reduced yet (call reduce_gradients first)")
        out: Dict[int, Any] = {}
        self.reduced = [flat * factor for flat in self.reduced]
        for b, flat in zip(self.buckets, self.reduced):
            for p, chunk in zip(b.params, mint.split(flat, b.sizes)):
                out[id(p)] = chunk.reshape(tuple(p.shape))
        return [out[id(p)] for p in params]

    def layout(self, params: Sequence[ms.Parameter]) -> List[List[int]]:
        """Per bucket, the positions in ``params`` of its parameters (flat-buffer order)."""
        where = {id(p): i for i, p in enumerate(params)}
        missing = [p.name for b in self.buckets for p in b.params if id(p) not in where]
        if missing:
            raise ValueError(f"gradient_layout: replicated parameters missing from params: {missing}")
        return [[where[id(p)] for p in b.params] for b in self.buckets]


class ReplicateModule:
    """Mixed into a cell by :func:`replicate` (its class becomes ``Replicate<Class>``)."""

    def _replicate_state(self) -> _State:
        return self.__dict__[_STATE]

    def reduce_gradients(self, params: Sequence[ms.Parameter], grads: Sequence[Any], extra: Any = None):
        """The data-parallel average of ``grads`` (what ``value_and_grad(fn, None, params)`` returned on this
        rank), in the order of ``params``: waits on the all-reduces backward started, launches the rest.
        ``extra``: a tensor of values (e.g. this rank's loss) averaged over the ranks in the same all-reduce as
        the last bucket launched here (no collective and no host copy of its own; its own all-reduce when
        backward started every bucket or that bucket is half precision); then the result is ``(gradients,
        averaged extra as a 1-D tensor)``."""
        if len(params) != len(grads):
            raise ValueError(f"reduce_gradients: {len(params)} parameters but {len(grads)} gradients")
        return self._replicate_state().finish(params, grads, extra)

    def gradient_layout(self, params: Sequence[ms.Parameter]) -> Tuple[Tuple[int, ...], ...]:
        """For :func:`pack_gradients` (in a compiled graph): per bucket, the positions in ``params`` of its
        parameters, in flat-buffer order (every replicated parameter must be in ``params``)."""
        return tuple(tuple(idx) for idx in self._replicate_state().layout(params))

    def packs_extra(self) -> bool:
        """Whether the last bucket's dtype holds float32 values (the loss) without loss: float32 or float64."""
        return self._replicate_state().buckets[-1].params[0].dtype in (ms.float32, ms.float64)

    def reduce_packed(self, params: Sequence[ms.Parameter], flats: Sequence[Any], extra: bool = False):
        """:meth:`reduce_gradients` for gradients a compiled graph already packed (:func:`pack_gradients`, one
        flat buffer per bucket, divided by the group size): one all-reduce per buffer, no per-parameter op before
        it; returns ``(averaged gradients in the order of params, the averaged extra values as a 1-D tensor, or
        None without extra)``."""
        return self._replicate_state().finish_packed(params, flats, extra)

    def reduced_grad_sq_norm(self):
        """The squared 2-norm of the gradients the last :meth:`reduce_gradients` returned (every bucketed
        parameter's), as a float32 device scalar: one reduction per flat bucket, no per-parameter op and no host
        copy (gradient clipping's norm; equal on every rank, so no collective either). The flat buckets stay
        referenced until the next reduction (the returned gradients are views of them anyway)."""
        flats = self._replicate_state().reduced
        if not flats:
            raise RuntimeError("reduced_grad_sq_norm: no gradients were reduced yet (call reduce_gradients first)")
        total = None
        for flat in flats:
            sq = (flat.astype(ms.float32) ** 2).sum()
            total = sq if total is None else total + sq
        return total

    def scale_reduced_gradients(self, params: Sequence[ms.Parameter], factor: float) -> List[Any]:
        """The gradients the last reduction returned times ``factor``, in the order of ``params`` (gradient
        clipping): one multiply per flat bucket instead of one per parameter."""
        return self._replicate_state().scaled(params, factor)

    def set_requires_gradient_sync(self, requires_gradient_sync: bool) -> None:
        """False: backward keeps the gradients locally (summed over micro-batches) and starts no all-reduce;
        the next backward with True reduces the sums."""
        self._replicate_state().requires_sync = bool(requires_gradient_sync)

    def remove_gradient_hooks(self) -> int:
        """Remove the per-parameter gradient hooks, for a backward compiled by ``mindspore.jit`` (which would
        compile the hooks' Python into the graph and cannot). Afterwards nothing starts during backward:
        :meth:`reduce_gradients` all-reduces, bucket by bucket, the gradients it is given, and summing
        micro-batches' gradients is the caller's (``set_requires_gradient_sync`` has no effect). Returns how
        many hooks were removed."""
        st = self._replicate_state()
        n = len(st.handles)
        for handle in st.handles:
            handle.remove()
        st.handles, st.requires_sync = [], True
        return n

    def replicate_stats(self) -> Dict[str, Any]:
        """``buckets`` (parameter names per bucket) and ``launched``: ``[(bucket, during_backward)]`` of the
        last reduction, in launch order."""
        st = self._replicate_state()
        return {"buckets": [[p.name for p in b.params] for b in st.buckets],
                "launched": [(i, st.buckets[i].started_during_backward) for i in st.launch_order[-len(st.buckets):]]}


def pack_gradients(grads: Sequence[Any], layout: Tuple[Tuple[int, ...], ...], size: int, extra: Any = None):
    """Inside a compiled step (``mindspore.jit``): the flat buffers :meth:`ReplicateModule.reduce_packed`
    all-reduces -- per bucket of ``layout`` (:meth:`ReplicateModule.gradient_layout`) its gradients flattened and
    concatenated, divided by the data-parallel ``size``; ``extra`` (e.g. the loss; only where
    :meth:`ReplicateModule.packs_extra`) at the end of the last buffer, cast to its dtype."""
    flats = []
    last = len(layout) - 1
    for k, idx in enumerate(layout):
        parts = [grads[i].reshape(-1) for i in idx]
        if extra is not None and k == last:
            parts = parts + [extra.reshape(-1).astype(parts[0].dtype)]
        flats.append(mint.cat(parts) / size)
    return tuple(flats)


_CLASSES: Dict[type, type] = {}


def _default_group():
    import hyper_parallel as hp  # pylint: disable=import-outside-toplevel
    from hyper_parallel.platform import get_platform  # pylint: disable=import-outside-toplevel
    world = get_platform("mindspore").get_world_size()
    return hp.init_device_mesh("cpu", (world,), platform="mindspore").get_group(0)


def replicate(module: nn.Cell, mesh=None, *, bucket_cap_mb: float = 25.0, overlap: bool = True,
              broadcast_parameters: bool = True) -> nn.Cell:
    """Data-parallel ``module`` over the 1-D ``mesh`` (default: the world), gradients all-reduced in buckets
    started during backward (see the module doc). ``broadcast_parameters``: copy mesh rank 0's parameters to
    every rank first (as DDP does). Returns the same cell, now a :class:`ReplicateModule`."""
    if not isinstance(module, nn.Cell):
        raise TypeError(f"replicate(module): expected a mindspore.nn.Cell, got {type(module).__name__}")
    if _STATE in module.__dict__:
        raise ValueError(f"replicate(module): {type(module).__name__} is already replicated")
    if not isinstance(bucket_cap_mb, (int, float)) or isinstance(bucket_cap_mb, bool) or bucket_cap_mb <= 0:
        raise ValueError(f"replicate(bucket_cap_mb={bucket_cap_mb!r}): expected a positive number of MiB")
    if mesh is not None and mesh.ndim != 1:
        raise ValueError(f"replicate(mesh): expected a 1-D data-parallel mesh, got {mesh.ndim}-D {mesh}")
    group = _default_group() if mesh is None else mesh.get_group(0)
    params = [p for p in module.get_parameters() if p.requires_grad]
    if broadcast_parameters and group.size > 1:
        for p in params:
            p.set_data(C.raw_broadcast(p.value().copy(), group.ranks[0], group))
    module.__dict__[_STATE] = _State(params, group, int(bucket_cap_mb * 2 ** 20), overlap)
    cls = type(module)
    if cls not in _CLASSES:
        _CLASSES[cls] = type(f"Replicate{cls.__name__}", (cls, ReplicateModule), {})
    module.__class__ = _CLASSES[cls]
    return module


def replicated(module: Any) -> Optional[ReplicateModule]:
    """``module`` if :func:`replicate` was applied to it, else None."""
    return module if isinstance(module, ReplicateModule) else None
