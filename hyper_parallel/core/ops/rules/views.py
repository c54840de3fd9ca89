# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Views and shape ops: view/reshape/flatten/squeeze..., expand, permutations, narrow/select, getitem, split.

Common facts every rule here relies on:

* these ops are linear in their input, so a ``Partial`` input stays ``Partial``;
* a DTensor's local tensor is its shard, so an op that takes *sizes* (view, reshape, expand ...)
  must be run with the *local* sizes of the output shard: those rules use an expand method that
  reads the local shape of the decided output spec for this rank (the sizes are part of the
  dispatch cache key, so the decision and the local sizes always belong together);
* a shard survives only where the local op on the shard is exactly the shard of the global
  result; everywhere else the input is replicated first (uneven shards are never silently wrong).

View/reshape dim mapping: the input and output shapes are split into groups of dims whose
products match (size-1 dims form their own groups). A shard on the outermost dim of a group
survives on the outermost output dim of the group when each rank's block is exactly the same run
of the group's elements on both sides: always for a dim the view leaves unchanged (even uneven),
and for a merge or split when the sizes divide evenly by the number of shards. A shard on an inner
dim of a merged group, or one that does not line up, is replicated.
"""
from __future__ import annotations

import itertools
from typing import Any, Dict, List, Optional, Sequence, Tuple

from hyper_parallel.core.placement import Partial, Placement, Replicate, Shard, shard_range
from hyper_parallel.core.ops.rule import Decision, OpCall, OpRule, RuleError, normalize_dim

__all__ = ["ViewRule", "ExpandRule", "PermuteRule", "NarrowRule", "SelectRule", "SplitRule", "GetItemRule",
           "SetItemRule", "view_groups", "infer_size", "view_placements", "index_layout", "is_marker",
           "sizes_from_args", "wrap_local"]

Placements = Tuple[Placement, ...]


# ---------------------------------------------------------------------- shared helpers
def is_marker(value: Any) -> bool:
    """True for the ``("__tensor__", slot)`` placeholder of a tensor argument."""
    return isinstance(value, tuple) and len(value) == 2 and value[0] == "__tensor__"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def sizes_from_args(call: OpCall, start: int, name: str) -> Tuple[int, ...]:
    """Sizes given as ``op(x, 2, 3)``, ``op(x, (2, 3))`` or ``op(x, name=(2, 3))``."""
    rest = call.args[start:]
    if len(rest) == 1 and isinstance(rest[0], (list, tuple)):
        rest = tuple(rest[0])
    elif not rest:
        rest = call.kwargs.get(name, ())
        rest = tuple(rest) if isinstance(rest, (list, tuple)) else (rest,)
    if not all(_is_int(s) for s in rest):
        raise call.fail(f"{name} must be integers, got {list(rest)}")
    return tuple(rest)


def infer_size(call: OpCall, sizes: Sequence[int], numel: int) -> Tuple[int, ...]:
    """Resolve one ``-1`` in ``sizes`` for a tensor of ``numel`` elements; clear error when impossible."""
    sizes = list(sizes)
    holes = [i for i, s in enumerate(sizes) if s == -1]
    if len(holes) > 1 or any(s < -1 for s in sizes):
        raise call.fail(f"shape {sizes} is invalid (at most one -1, no other negative size)")
    known = 1
    for s in sizes:
        if s != -1:
            known *= s
    if holes:
        if known == 0 or numel % known:
            raise call.fail(f"shape {sizes} is invalid for input of size {numel}")
        sizes[holes[0]] = numel // known
    elif known != numel:
        raise call.fail(f"shape {sizes} is invalid for input of size {numel}")
    return tuple(sizes)


def view_groups(a: Sequence[int], b: Sequence[int]) -> List[Tuple[List[int], List[int]]]:
    """Groups ``(input dims, output dims)`` with equal products, in order (pure; both numel equal, > 0)."""
    groups: List[Tuple[List[int], List[int]]] = []
    i = j = 0
    while i < len(a) or j < len(b):
        if i < len(a) and a[i] == 1 and (j >= len(b) or b[j] != 1):
            groups.append(([i], []))
            i += 1
            continue
        if j < len(b) and b[j] == 1 and (i >= len(a) or a[i] != 1):
            groups.append(([], [j]))
            j += 1
            continue
        ins, outs, pa, pb = [i], [j], a[i], b[j]
        i, j = i + 1, j + 1
        while pa != pb:
            if pa < pb:
                ins.append(i)
                pa *= a[i]
                i += 1
            else:
                outs.append(j)
                pb *= b[j]
                j += 1
        groups.append((ins, outs))
    return groups


def _nested_ranges(size: int, parts: Sequence[int], scale: int) -> List[Tuple[int, int]]:
    """(offset, length) of every nested shard of a dim of ``size`` split by ``parts`` in order, times ``scale``."""
    ranges = [(0, size)]
    for n in parts:
        ranges = [(start + o, ln) for start, length in ranges for o, ln in
                  (shard_range(length, n, i) for i in range(n))]
    return [(o * scale, ln * scale) for o, ln in ranges]


def _group_targets(in_shape, out_shape) -> Dict[int, Tuple[int, int, int]]:
    """Outermost input dim of each group -> (outermost output dim, inner input size, inner output size)."""
    target = {}
    for ins, outs in view_groups(in_shape, out_shape):
        if ins and outs:
            rest_in = 1
            for k in ins[1:]:
                rest_in *= in_shape[k]
            rest_out = 1
            for j in outs[1:]:
                rest_out *= out_shape[j]
            target[ins[0]] = (outs[0], rest_in, rest_out)
    return target


def view_placements(in_shape: Sequence[int], out_shape: Sequence[int], placements: Placements,
                    mesh_shape: Sequence[int]) -> Tuple[Placements, Placements]:
    """(placements the input needs, output placements) of a view from ``in_shape`` to ``out_shape``.

    A shard of the outermost dim of a group survives when every rank's block of the group's flat
    elements is exactly its block of the output dim (always for an unchanged dim, and for a merge
    or split when the sizes divide evenly); a prefix of nested shards is kept the same way.
    """
    numel = 1
    for s in in_shape:
        numel *= s
    if numel == 0:
        need = tuple(Replicate() if isinstance(p, Shard) else p for p in placements)
        return need, need
    target = _group_targets(in_shape, out_shape)
    need: List[Placement] = []
    out: List[Placement] = []
    parts: Dict[int, List[int]] = {}
    broken = set()
    for d, p in enumerate(placements):
        if not isinstance(p, Shard):
            need.append(p)
            out.append(p)
            continue
        k = p.dim
        tried = parts.get(k, []) + [mesh_shape[d]]
        if k in broken or k not in target or _nested_ranges(in_shape[k], tried, target[k][1]) != \
                _nested_ranges(out_shape[target[k][0]], tried, target[k][2]):
            broken.add(k)
            need.append(Replicate())
            out.append(Replicate())
            continue
        parts[k] = tried
        need.append(p)
        out.append(Shard(target[k][0]))
    return tuple(need), tuple(out)


def _input_placements(call: OpCall, slot: int = 0) -> Placements:
    t = call.tensors[slot]
    return t.placements if t.is_dtensor else (Replicate(),) * call.mesh_ndim


def wrap_local(local, plan, placements: Placements, shape: Sequence[int]):
    """Turn a local result into a DTensor with a spec computed at run time (data-dependent shapes), on the
    backend running the plan (``plan.platform``)."""
    from hyper_parallel.core.spec import DTensorSpec
    return plan.platform.wrap_local(local, DTensorSpec(plan.mesh, tuple(placements), tuple(shape)))


def _local_out_shape(plan) -> Tuple[int, ...]:
    return plan.outs.local_shape(plan.mesh.get_coordinate())


# ---------------------------------------------------------------------- view / reshape family
class ViewRule(OpRule):
    """view, reshape, flatten, unflatten, squeeze, unsqueeze, view_as, reshape_as.

    Options: ``shape`` — how the output shape is given: ``sizes`` (``x.view(2, 3)``, default),
    ``as`` (the second tensor's shape), ``flatten``, ``unflatten``, ``squeeze``, ``unsqueeze``;
    ``mode`` — ``view`` (the local op must be a view) or ``reshape`` (may copy).
    """

    @classmethod
    def allowed_options(cls):
        return ("shape", "mode")

    def __init__(self, op: str, **options) -> None:
        super().__init__(op, **options)
        self.shape_kind = options.get("shape", "sizes")
        self.mode = options.get("mode", "reshape")
        if self.shape_kind not in ("sizes", "as", "flatten", "unflatten", "squeeze", "unsqueeze"):
            raise RuleError(f"{op}: option shape={self.shape_kind!r} is unknown")
        if self.mode not in ("view", "reshape"):
            raise RuleError(f"{op}: option mode={self.mode!r}; expected 'view' or 'reshape'")

    def infer(self, call: OpCall) -> Decision:
        x = call.tensors[0]
        out_shape = self.out_shape(call)
        need, out = view_placements(x.shape, out_shape, _input_placements(call), call.mesh_shape)
        inputs = [need] + [None] * (len(call.tensors) - 1)
        return Decision(inputs=inputs, outputs=(out, out_shape), expand="expand_local_shape")

    def out_shape(self, call: OpCall) -> Tuple[int, ...]:
        """Global output shape of this call."""
        shape = tuple(call.tensors[0].shape)
        numel = 1
        for s in shape:
            numel *= s
        kind = self.shape_kind
        if kind == "sizes":
            if call.args[1:2] and not _is_int(call.args[1]) and not isinstance(call.args[1], (list, tuple)):
                raise call.fail(f"view(dtype) / reinterpreting sizes is not supported on a DTensor "
                                f"(got {call.args[1]!r}); use to_local()")
            return infer_size(call, sizes_from_args(call, 1, "shape" if "shape" in call.kwargs else "size"), numel)
        if kind == "as":
            if len(call.tensors) < 2:
                raise call.fail("expected the other tensor as second argument")
            return infer_size(call, call.tensors[1].shape, numel)
        if kind == "flatten":
            return _flatten_shape(call, shape)
        if kind == "unflatten":
            return _unflatten_shape(call, shape)
        if kind == "squeeze":
            return _squeeze_shape(call, shape)
        return _unsqueeze_shape(call, shape)

    def expand_local_shape(self, func, args, kwargs, plan):  # pylint: disable=unused-argument
        """Run the view with this rank's local output sizes.

        After a redistribution the local input is a fresh tensor whose memory layout is an
        implementation detail (a gathered shard may be non-contiguous), so it is reshaped.
        """
        local = _local_out_shape(plan)
        x = args[0]
        return x.view(local) if self.mode == "view" and not plan.redist else x.reshape(local)


def _flatten_shape(call: OpCall, shape) -> Tuple[int, ...]:
    if not shape:
        return (1,)
    start = normalize_dim(call.arg(1, "start_dim", 0), len(shape), "start_dim")
    end = normalize_dim(call.arg(2, "end_dim", -1), len(shape), "end_dim")
    if start > end:
        raise call.fail(f"start_dim={start} cannot come after end_dim={end}")
    merged = 1
    for s in shape[start:end + 1]:
        merged *= s
    return tuple(shape[:start]) + (merged,) + tuple(shape[end + 1:])


def _unflatten_shape(call: OpCall, shape) -> Tuple[int, ...]:
    dim = normalize_dim(call.arg(1, "dim", 0), len(shape))
    sizes = call.arg(2, "sizes", None)
    if not isinstance(sizes, (list, tuple)) or not sizes:
        raise call.fail(f"sizes must be a non-empty sequence of ints, got {sizes!r}")
    return tuple(shape[:dim]) + infer_size(call, sizes, shape[dim]) + tuple(shape[dim + 1:])


def _squeeze_shape(call: OpCall, shape) -> Tuple[int, ...]:
    dims = call.arg(1, "dim", None)
    if dims is None:
        drop = {i for i, s in enumerate(shape) if s == 1}
    else:
        dims = dims if isinstance(dims, (list, tuple)) else (dims,)
        drop = {normalize_dim(d, len(shape)) for d in dims}
        drop = {d for d in drop if shape and shape[d] == 1}
    return tuple(s for i, s in enumerate(shape) if i not in drop)


def _unsqueeze_shape(call: OpCall, shape) -> Tuple[int, ...]:
    dim = call.arg(1, "dim", None)
    if not _is_int(dim):
        raise call.fail(f"dim must be an int, got {dim!r}")
    dim = normalize_dim(dim, len(shape) + 1)
    return tuple(shape[:dim]) + (1,) + tuple(shape[dim:])


# ---------------------------------------------------------------------- expand / broadcast_to
class ExpandRule(OpRule):
    """expand(*sizes), expand_as(other), broadcast_to(x, shape): broadcast dims are replicated.

    Option ``shape``: ``sizes`` (default) or ``as`` (the second tensor's shape).
    """

    @classmethod
    def allowed_options(cls):
        return ("shape",)

    def infer(self, call: OpCall) -> Decision:
        x = call.tensors[0]
        if self.options.get("shape", "sizes") == "as":
            sizes = tuple(call.tensors[1].shape)
        else:
            sizes = sizes_from_args(call, 1, "size" if "size" in call.kwargs else "shape")
        lead = len(sizes) - x.ndim
        if lead < 0:
            raise call.fail(f"the number of sizes {list(sizes)} is smaller than the tensor's rank {x.ndim}")
        out_shape = []
        for j, s in enumerate(sizes):
            k = j - lead
            if k < 0:
                if s < 0:
                    raise call.fail(f"size -1 is not allowed for the new leading dim {j}")
                out_shape.append(s)
            elif s in (-1, x.shape[k]):
                out_shape.append(x.shape[k])
            elif x.shape[k] == 1:
                out_shape.append(s)
            else:
                raise call.fail(f"cannot expand size {x.shape[k]} of dim {k} to {s}")
        need, out = [], []
        for p in _input_placements(call):
            if isinstance(p, Shard) and x.shape[p.dim] != out_shape[p.dim + lead]:
                p = Replicate()
            need.append(p)
            out.append(Shard(p.dim + lead) if isinstance(p, Shard) else p)
        inputs = [tuple(need)] + [None] * (len(call.tensors) - 1)
        return Decision(inputs=inputs, outputs=(tuple(out), tuple(out_shape)), expand="expand_local_shape")

    def expand_local_shape(self, func, args, kwargs, plan):  # pylint: disable=unused-argument
        """Expand to this rank's local output sizes."""
        return args[0].expand(_local_out_shape(plan))


# ---------------------------------------------------------------------- permutations
def _perm_dims(call: OpCall, ndim: int, kind: str) -> List[int]:
    if kind == "permute":
        dims = sizes_from_args(call, 1, "dims")
        perm = [normalize_dim(d, ndim) for d in dims]
        if sorted(perm) != list(range(ndim)):
            raise call.fail(f"dims {list(dims)} is not a permutation of {ndim} dims")
        return perm
    perm = list(range(ndim))
    if kind == "transpose":
        a = normalize_dim(call.arg(1, "dim0"), ndim, "dim0")
        b = normalize_dim(call.arg(2, "dim1"), ndim, "dim1")
        perm[a], perm[b] = perm[b], perm[a]
    elif kind == "t":
        if ndim > 2:
            raise call.fail(f"expects a tensor with <= 2 dimensions, but got a {ndim}-D tensor")
        perm.reverse()
    elif kind == "T":
        perm.reverse()
    elif kind == "mT":
        if ndim < 2:
            raise call.fail(f"expects a tensor with >= 2 dimensions, got {ndim}")
        perm[-1], perm[-2] = perm[-2], perm[-1]
    else:
        perm = _movedim_perm(call, ndim)
    return perm


def _movedim_perm(call: OpCall, ndim: int) -> List[int]:
    src, dst = call.arg(1, "source"), call.arg(2, "destination")
    src = [src] if _is_int(src) else list(src)
    dst = [dst] if _is_int(dst) else list(dst)
    if len(src) != len(dst):
        raise call.fail(f"source {src} and destination {dst} must have the same number of dims")
    src = [normalize_dim(d, ndim, "source") for d in src]
    dst = [normalize_dim(d, ndim, "destination") for d in dst]
    perm: List[Optional[int]] = [None] * ndim
    for s, d in zip(src, dst):
        perm[d] = s
    rest = iter(k for k in range(ndim) if k not in src)
    return [p if p is not None else next(rest) for p in perm]


class PermuteRule(OpRule):
    """permute, transpose/swapaxes, t, ``.T``, ``.mT``, movedim: shards move with their dims (no communication).

    Option ``kind``: ``permute`` | ``transpose`` | ``t`` | ``T`` | ``mT`` | ``movedim``.
    """

    @classmethod
    def allowed_options(cls):
        return ("kind",)

    def infer(self, call: OpCall) -> Decision:
        x = call.tensors[0]
        perm = _perm_dims(call, x.ndim, self.options.get("kind", "permute"))
        inv = {k: j for j, k in enumerate(perm)}
        pl = _input_placements(call)
        out = tuple(Shard(inv[p.dim]) if isinstance(p, Shard) else p for p in pl)
        return Decision(inputs=[pl], outputs=(out, tuple(x.shape[k] for k in perm)))


# ---------------------------------------------------------------------- narrow / select
def _replicate_dim(pl: Placements, dim: int) -> Placements:
    return tuple(Replicate() if isinstance(p, Shard) and p.dim == dim else p for p in pl)


class NarrowRule(OpRule):
    """narrow(dim, start, length): a sharded ``dim`` is replicated first (local narrow elsewhere). A 0-d
    tensor ``start`` is replicated too: its value is read by the local op at run time (the output shape
    depends on ``length`` only; torch checks the bounds on the replicated ``dim``)."""

    def infer(self, call: OpCall) -> Decision:
        x = call.tensors[0]
        dim = normalize_dim(call.arg(1, "dim"), x.ndim)
        if len(call.tensors) > 1:
            return self._tensor_start(call, dim)
        start, length = call.arg(2, "start"), call.arg(3, "length")
        size = x.shape[dim]
        if start < 0:
            start += size
        if not 0 <= start <= size or length < 0 or start + length > size:
            raise call.fail(f"start ({call.arg(2, 'start')}) + length ({length}) exceeds dimension size ({size})")
        need = _replicate_dim(_input_placements(call), dim)
        shape = list(x.shape)
        shape[dim] = length
        return Decision(inputs=[need], outputs=(need, tuple(shape)))


    @staticmethod
    def _tensor_start(call: OpCall, dim: int) -> Decision:
        x, start_t, length = call.tensors[0], call.tensors[1], call.arg(3, "length")
        if start_t.ndim != 0 or not _is_int(length) or not 0 <= length <= x.shape[dim]:
            raise call.fail(f"a tensor start must be 0-d and length an int in [0, {x.shape[dim]}], got a "
                            f"{start_t.ndim}-d start and length {length!r}")
        need = _replicate_dim(_input_placements(call), dim)
        shape = list(x.shape)
        shape[dim] = length
        start_need = (Replicate(),) * call.mesh_ndim if start_t.is_dtensor else None
        return Decision(inputs=[need, start_need], outputs=(need, tuple(shape)))


class SelectRule(OpRule):
    """select(dim, index): a sharded ``dim`` is replicated first; later shards move down one dim."""

    def infer(self, call: OpCall) -> Decision:
        x = call.tensors[0]
        dim = normalize_dim(call.arg(1, "dim"), x.ndim)
        index = call.arg(2, "index")
        if not _is_int(index) or not -x.shape[dim] <= index < x.shape[dim]:
            raise call.fail(f"index {index!r} is out of range for dimension {dim} of size {x.shape[dim]}")
        need = _replicate_dim(_input_placements(call), dim)
        out = tuple(Shard(p.dim - (p.dim > dim)) if isinstance(p, Shard) else p for p in need)
        return Decision(inputs=[need], outputs=(out, tuple(s for i, s in enumerate(x.shape) if i != dim)))


# ---------------------------------------------------------------------- split / chunk / unbind
def _split_sizes(call: OpCall, size: int, kind: str) -> List[int]:
    if kind == "unbind":
        return [1] * size
    if kind == "chunk":
        chunks = call.arg(1, "chunks")
        if not _is_int(chunks) or chunks <= 0:
            raise call.fail(f"chunks must be a positive int, got {chunks!r}")
        step = -(-size // chunks) if size else 0
        return [min(step, size - i) for i in range(0, size, step)] if step else [0] * chunks
    spec = call.arg(1, "split_size_or_sections", call.kwargs.get("split_size", call.kwargs.get("split_sizes")))
    return _sections(call, spec, size)


def _sections(call: OpCall, spec: Any, size: int) -> List[int]:
    """torch.split sizes for an int ``split_size`` or a list of section sizes."""
    if isinstance(spec, (list, tuple)):
        if sum(spec) != size or any(s < 0 for s in spec):
            raise call.fail(f"split sizes {list(spec)} do not sum to the dimension size {size}")
        return list(spec)
    if not _is_int(spec) or spec <= 0:
        raise call.fail(f"split_size must be a positive int or a list of ints, got {spec!r}")
    return [min(spec, size - i) for i in range(0, size, spec)] if size else [0]


class SplitRule(OpRule):
    """split / split_with_sizes / chunk / unbind: a sharded split dim is replicated; other shards stay.

    Option ``kind``: ``split`` (default) | ``chunk`` | ``unbind``.
    """

    @classmethod
    def allowed_options(cls):
        return ("kind",)

    def infer(self, call: OpCall) -> Decision:
        x = call.tensors[0]
        kind = self.options.get("kind", "split")
        default_dim = 0
        dim = normalize_dim(call.arg(1 if kind == "unbind" else 2, "dim", default_dim), x.ndim)
        need = _replicate_dim(_input_placements(call), dim)
        sizes = _split_sizes(call, x.shape[dim], kind)
        outs = []
        for s in sizes:
            if kind == "unbind":
                pl = tuple(Shard(p.dim - (p.dim > dim)) if isinstance(p, Shard) else p for p in need)
                outs.append((pl, tuple(v for i, v in enumerate(x.shape) if i != dim)))
            else:
                shape = list(x.shape)
                shape[dim] = s
                outs.append((need, tuple(shape)))
        return Decision(inputs=[need], outputs=outs)


# ---------------------------------------------------------------------- __getitem__
def _index_items(index: Any) -> Tuple[Any, ...]:
    if isinstance(index, tuple) and not is_marker(index):
        return index
    return (index,)


def _item_kind(call: OpCall, item: Any) -> str:
    if item is None:
        return "none"
    if item is Ellipsis:
        return "ellipsis"
    if isinstance(item, slice):
        return "slice"
    if _is_int(item):
        return "int"
    if is_marker(item):
        return "tensor"
    if isinstance(item, list) and item and all(_is_int(v) for v in item):
        return "list"
    if isinstance(item, list) and item and all(isinstance(v, bool) for v in item):
        return "boollist"
    raise call.fail(f"index item {item!r} is not supported on a DTensor (use ints, slices, None, Ellipsis, "
                    f"tensors or flat lists of ints/bools)")


def index_layout(ndim: int, kinds: Sequence[str], consumed: Sequence[int], adv_ndim: int):
    """Pure layout of ``x[items]``.

    ``kinds``: one of int/slice/none/ellipsis/adv per item; ``consumed``: input dims each item
    addresses (adv: the index tensor's rank for a boolean mask, else 1); ``adv_ndim``: rank of the
    broadcast advanced-index block. Returns ``(dims, adv_at, out_ndim)``: ``dims[k]`` is
    ``(item position, output dim or None)`` for every input dim ``k`` (implicit trailing dims get
    item position ``None``), and ``adv_at`` the output dim where the advanced block starts.
    """
    explicit = sum(c for kd, c in zip(kinds, consumed) if kd != "ellipsis")
    if sum(kd == "ellipsis" for kd in kinds) > 1:
        raise RuleError("an index can only have a single Ellipsis (...)")
    if explicit > ndim:
        raise RuleError(f"too many indices for a tensor of dimension {ndim}")
    separated = _separated(kinds)
    dims: List[Tuple[Optional[int], Optional[int]]] = []
    out = adv_ndim if separated else 0
    adv_at = 0 if separated else None
    for i, (kd, c) in enumerate(zip(kinds, consumed)):
        if kd == "none":
            out += 1
        elif kd == "adv" and adv_at is None:
            adv_at, out = out, out + adv_ndim
        out = _address(dims, i, kd, ndim - explicit if kd == "ellipsis" else c, out)
    while len(dims) < ndim:
        dims.append((None, out))
        out += 1
    return dims, adv_at, out


def _separated(kinds: Sequence[str]) -> bool:
    """True when advanced indices are not adjacent (their block then goes first, as in NumPy)."""
    adv_pos = [i for i, kd in enumerate(kinds) if kd == "adv"]
    return bool(adv_pos) and adv_pos[-1] - adv_pos[0] + 1 != len(adv_pos)


def _address(dims: list, pos: int, kind: str, count: int, out: int) -> int:
    """Record the ``count`` input dims item ``pos`` addresses; returns the next output dim."""
    for _ in range(count):
        if kind in ("slice", "ellipsis"):
            dims.append((pos, out))
            out += 1
        else:
            dims.append((pos, None))
    return out


def _full_slice(item: Any) -> bool:
    return isinstance(item, slice) and item.start is None and item.stop is None and item.step in (None, 1)


class GetItemRule(OpRule):
    """``x[index]`` with ints, slices, None, Ellipsis and (bool/long) index tensors or lists.

    A shard survives on dims taken whole (``:``, Ellipsis, trailing); a dim that is indexed, sliced
    or addressed by an index tensor is replicated first. Index tensors are replicated. Without
    index tensors the output spec is static; with them the output shape may depend on data (a bool
    mask) and on the index dtype (which the cache key does not hold), so the requirements are taken
    over both dtype readings and the output spec is computed from the actual index at run time.
    """

    def infer(self, call: OpCall) -> Decision:
        x = call.tensors[0]
        items = _index_items(call.arg(1, "indices"))
        kinds = [_item_kind(call, it) for it in items]
        pl = _input_placements(call)
        readings = self._readings(call, items, kinds)
        keep = None
        for consumed, adv_ndim in readings:
            dims, _, _ = self._layout(call, x.ndim, kinds, consumed, adv_ndim)
            whole = {k for k, (pos, _) in enumerate(dims) if pos is None or kinds[pos] == "ellipsis"
                     or _full_slice(items[pos])}
            keep = whole if keep is None else keep & whole
        need = tuple(p if not isinstance(p, Shard) or p.dim in keep else Replicate() for p in pl)
        inputs = [need] + [(Replicate(),) * call.mesh_ndim] * (len(call.tensors) - 1)
        if "tensor" in kinds:
            return Decision(inputs=inputs, outputs=None, expand="expand_dynamic")
        consumed, adv_ndim = readings[0]
        dims, adv_at, out_ndim = self._layout(call, x.ndim, kinds, consumed, adv_ndim)
        shape = _static_out_shape(call, x.shape, items, kinds, dims, adv_at, out_ndim)
        out = tuple(Shard(dims[p.dim][1]) if isinstance(p, Shard) else p for p in need)
        return Decision(inputs=inputs, outputs=(out, shape))

    @staticmethod
    def _layout(call, ndim, kinds, consumed, adv_ndim):
        lk = ["adv" if kd in ("tensor", "list", "boollist") else kd for kd in kinds]
        try:
            return index_layout(ndim, lk, consumed, adv_ndim)
        except RuleError as exc:
            raise call.fail(str(exc)) from None

    @staticmethod
    def _readings(call: OpCall, items, kinds) -> List[Tuple[List[int], int]]:
        """Every (consumed dims per item, advanced block rank) the index may mean (dtype unknown)."""
        options = []
        for it, kd in zip(items, kinds):
            if kd == "tensor":
                t = call.tensors[it[1]]
                options.append({(1, t.ndim), (t.ndim, 1)})
            elif kd in ("list", "boollist"):
                options.append({(1, 1)})
            else:
                options.append({(0 if kd in ("none", "ellipsis") else 1, 0)})
        out = []
        for combo in itertools.product(*[sorted(o) for o in options]):
            out.append(([c for c, _ in combo], max([r for _, r in combo] + [0])))
        return out

    def expand_dynamic(self, func, args, kwargs, plan):
        """Index locally, then derive the output spec from the actual index tensors."""
        out = func(*args, **kwargs)
        x = args[0]
        items = _index_items(args[1] if len(args) > 1 else kwargs["indices"])
        kinds, consumed, ranks = [], [], []
        for it in items:
            kd = _runtime_kind(it)
            kinds.append(kd)
            if kd == "adv" and isinstance(it, list):
                consumed.append(1)
                ranks.append(1)
            elif kd == "adv":
                is_bool = str(it.dtype) == "torch.bool"
                consumed.append(it.dim() if is_bool else 1)
                ranks.append(1 if is_bool else it.dim())
            else:
                consumed.append(0 if kd in ("none", "ellipsis") else 1)
        dims, _, _ = index_layout(x.dim(), kinds, consumed, max(ranks + [0]))
        need = plan.decision.inputs[0]
        shape = list(out.shape)
        placements = []
        for p in need:
            if isinstance(p, Shard):
                j = dims[p.dim][1]
                shape[j] = plan.call.tensors[0].shape[p.dim]
                p = Shard(j)
            placements.append(p)
        return wrap_local(out, plan, placements, shape)


def _runtime_kind(item: Any) -> str:
    if item is None:
        return "none"
    if item is Ellipsis:
        return "ellipsis"
    if isinstance(item, slice):
        return "slice"
    if _is_int(item):
        return "int"
    return "adv"


def _static_out_shape(call, shape, items, kinds, dims, adv_at, out_ndim) -> Tuple[int, ...]:
    out = [1] * out_ndim
    lengths = [sum(it) if kd == "boollist" else len(it) for it, kd in zip(items, kinds) if kd in ("list", "boollist")]
    adv = max(lengths, default=1)
    if any(n not in (1, adv) for n in lengths):
        raise call.fail(f"index lists of lengths {lengths} cannot be broadcast together")
    for k, (pos, j) in enumerate(dims):
        if j is None:
            _check_index(call, items[pos], kinds[pos], shape[k], k)
        elif pos is not None and kinds[pos] == "slice":
            out[j] = len(range(*items[pos].indices(shape[k])))
        else:
            out[j] = shape[k]
    if adv_at is not None:
        out[adv_at] = adv
    return tuple(out)


def _check_index(call, item, kind, size, dim) -> None:
    if kind == "int" and not -size <= item < size:
        raise call.fail(f"index {item} is out of bounds for dimension {dim} with size {size}")
    if kind == "list" and any(not -size <= v < size for v in item):
        raise call.fail(f"index list {item} is out of bounds for dimension {dim} with size {size}")
    if kind == "boollist" and len(item) != size:
        raise call.fail(f"boolean index of length {len(item)} does not match dimension {dim} of size {size}")


# ---------------------------------------------------------------------- __setitem__
def _whole(items, kinds, dims, k: int) -> bool:
    pos = dims[k][0]
    return pos is None or kinds[pos] == "ellipsis" or _full_slice(items[pos])


class SetItemRule(OpRule):
    """``x[index] = value`` in place (``Tensor.__setitem__``); the target keeps its placement.

    Per mesh dim of the target:

    * a shard on a dim the index takes whole: a value spanning that dim is sharded the same way, a
      broadcast value is replicated (its gradient is then summed over the mesh dim);
    * a shard on a dim addressed by an int or a slice: every rank writes the part of the region it
      holds (the value is replicated and narrowed locally); a dim addressed by an index tensor or
      list cannot be written in place and is refused with a clear error;
    * ``Partial(sum)``: a tensor value is made partial locally, a scalar is written on the first
      coordinate only (zero elsewhere); ``Partial(avg)``: every rank writes the same value.
    """

    def infer(self, call: OpCall) -> Decision:
        x = call.tensors[0]
        if not x.is_dtensor:
            raise call.fail("writing a DTensor value into a plain tensor is not supported; make the target a DTensor")
        items = _index_items(call.arg(1, "indices"))
        kinds = [_item_kind(call, it) for it in items]
        value = call.arg(2, "values")
        v = call.tensors[value[1]] if is_marker(value) else None
        layouts = [GetItemRule._layout(call, x.ndim, kinds, c, r)  # pylint: disable=protected-access
                   for c, r in GetItemRule._readings(call, items, kinds)]  # pylint: disable=protected-access
        extra: Dict[str, Any] = {"sync": [], "zero": [], "cut": {}, "whole": {}, "region": None}
        if "tensor" not in kinds:
            extra["region"] = _static_out_shape(call, x.shape, items, kinds, *layouts[0])
        need_v = [self._mesh_dim(call, d, p, (items, kinds, layouts), v, extra) for d, p in enumerate(x.placements)]
        inputs: List[Optional[Placements]] = [(Replicate(),) * call.mesh_ndim for _ in call.tensors]
        inputs[0] = x.placements
        if v is not None:
            inputs[v.slot] = tuple(need_v)
        special = extra["sync"] or extra["zero"] or extra["cut"]
        return Decision(inputs=inputs, outputs=None, expand="expand_setitem" if special else None, extra=extra)

    @staticmethod
    def _mesh_dim(call: OpCall, d: int, p: Placement, index, v, extra) -> Placement:
        """The value's placement on mesh dim ``d`` (fills ``extra``)."""
        items, kinds, layouts = index
        if isinstance(p, Partial):
            if p.reduce_op not in ("sum", "avg"):
                raise call.fail(f"writing into a {p.short()} target is not supported; redistribute it first")
            if p.reduce_op == "sum":
                if v is None:
                    extra["zero"].append(d)
                return p
            if v is not None:
                extra["sync"].append(d)
            return Replicate()
        if not isinstance(p, Shard):
            return Replicate()
        k = p.dim
        if all(_whole(items, kinds, lay[0], k) for lay in layouts):
            extra["whole"][k] = layouts[0][0][k][1]
            return _value_shard(call, k, layouts, v, d, extra)
        pos = layouts[0][0][k][0]
        if "tensor" in kinds or kinds[pos] not in ("int", "slice"):
            raise call.fail(f"the target is sharded on dim {k}, which the index addresses with a tensor or list; "
                            f"redistribute the target (or use masked_fill/index_put on local shards)")
        extra["cut"][k] = (pos, layouts[0][0][k][1])
        if v is not None:
            extra["sync"].append(d)
        return Replicate()

    def expand_setitem(self, func, args, kwargs, plan):  # pylint: disable=unused-argument
        """Write this rank's part: local index/value for cut dims, zero scalars, gradient sums."""
        x, index, value = args[0], args[1], args[2]
        extra = plan.decision.extra
        coord = plan.mesh.get_coordinate()
        is_tensor = hasattr(value, "requires_grad")
        if not is_tensor and any(coord[d] for d in extra["zero"]):
            value = type(value)(0)
        if is_tensor and extra["sync"]:
            plat = plan.platform
            for d in extra["sync"]:
                value = plat.grad_all_reduce(value, plan.mesh.get_group(d))
        if extra["cut"]:
            index, value = _local_cut(plan, x, index, value, is_tensor)
            if index is None:
                return None
        return func(x, index, value)


def _value_shard(call: OpCall, k: int, layouts, v, d: int, extra) -> Placement:
    """Placement of the value for a target shard on a dim the index takes whole."""
    if v is None:
        return Replicate()
    from_right = {lay[2] - lay[0][k][1] for lay in layouts}
    if len(from_right) != 1:
        raise call.fail(f"the target is sharded on dim {k}, whose place in the written region depends on the "
                        f"index dtype; redistribute the target first")
    vdim = v.ndim - from_right.pop()
    if vdim >= 0 and v.shape[vdim] == call.tensors[0].shape[k]:
        return Shard(vdim)
    if vdim < 0 or v.shape[vdim] == 1:
        extra["sync"].append(d)
        return Replicate()
    raise call.fail(f"value of shape {list(v.shape)} cannot be broadcast to the region of target dim {k} "
                    f"(size {call.tensors[0].shape[k]})")


def _slice_part(sl: slice, size: int, off: int, n: int) -> Tuple[slice, int, int]:
    """(local slice, first region position, count) of global slice ``sl`` within the local range [off, off+n)."""
    start, stop, step = sl.indices(size)
    lo, hi = max(start, off), min(stop, off + n)
    first = start + -(-(lo - start) // step) * step
    count = max(0, -(-(hi - first) // step))
    if not count:
        return slice(0, 0), 0, 0
    return slice(first - off, first - off + (count - 1) * step + 1, step), (first - start) // step, count


def _local_cut(plan, x, index, value, is_tensor):
    """Index and value restricted to this rank's part of the target on the cut (sharded, addressed) dims."""
    t = plan.call.tensors[0]
    from hyper_parallel.core.spec import DTensorSpec
    local, offset = DTensorSpec(plan.mesh, t.placements, t.shape).local_shape_and_offset(plan.mesh.get_coordinate())
    items = list(_index_items(index))
    narrows, empty = [], False
    for k, (pos, j) in plan.decision.extra["cut"].items():
        it = items[pos]
        if isinstance(it, slice):
            items[pos], p0, count = _slice_part(it, t.shape[k], offset[k], local[k])
            narrows.append((j, p0, count))
            continue
        i = it + t.shape[k] if it < 0 else it
        owned = offset[k] <= i < offset[k] + local[k]
        items[pos] = i - offset[k] if owned else slice(0, 0)
        empty = empty or not owned
    index = tuple(items)
    if not is_tensor:
        return (None if empty else index), value
    region = list(plan.decision.extra["region"])
    for k, j in plan.decision.extra["whole"].items():  # dims kept whole hold this rank's shard of the value
        region[j] = local[k]
    value = value.expand(region)
    if empty:  # nothing to write here, but the value stays in the graph (its gradient sum is collective)
        return index, value.flatten()[:0].reshape(x[index].shape)
    for j, p0, count in narrows:
        value = value.narrow(j, p0, count)
    return index, value
