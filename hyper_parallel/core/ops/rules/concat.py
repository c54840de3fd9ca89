# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Concatenation, padding, repetition and triangle/flip/roll/diagonal ops.

Every op here is linear in its tensor input(s), so ``Partial`` stays ``Partial`` where the op adds
no constant (a constant pad value other than 0 reduces a ``Partial`` input first). A dim that the
op rearranges across shard boundaries (the cat dim, a padded, repeated, flipped or rolled dim) is
replicated first; other shards stay. ``tril``/``triu`` keep any sharding: the local op runs with
the diagonal shifted by this shard's row and column offsets.
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

from hyper_parallel.core.placement import Partial, Placement, Replicate, Shard
from hyper_parallel.core.ops.rules.views import sizes_from_args, wrap_local
from hyper_parallel.core.ops.rule import Decision, OpCall, OpRule, TensorArg, normalize_dim

__all__ = ["ConcatRule", "PadRule", "RepeatRule", "RepeatInterleaveRule", "TriangleRule", "FlipRule", "RollRule",
           "DiagonalRule", "DiagEmbedRule"]

Placements = Tuple[Placement, ...]


def _placements(call: OpCall, t: TensorArg) -> Placements:
    return t.placements if t.is_dtensor else (Replicate(),) * call.mesh_ndim


def _replicate_dims(pl: Placements, dims) -> Placements:
    return tuple(Replicate() if isinstance(p, Shard) and p.dim in dims else p for p in pl)


def _no_partial(pl: Placements) -> Placements:
    return tuple(Replicate() if isinstance(p, Partial) else p for p in pl)


def _one_input(call: OpCall, need: Placements, out: Placements, shape, expand: Optional[str] = None) -> Decision:
    return Decision(inputs=[need] + [None] * (len(call.tensors) - 1), outputs=(out, tuple(shape)), expand=expand)


# ---------------------------------------------------------------------- cat / stack
class ConcatRule(OpRule):
    """cat/concat (``kind: cat``) and stack (``kind: stack``) of a sequence of tensors.

    Per mesh dim: the first input sharded on a dim other than the cat dim sets the shard for all
    inputs; else all-``Partial`` inputs (plain/replicated ones made partial locally) stay partial;
    else everything is replicated. A shard on the cat dim is replicated first.
    """

    @classmethod
    def allowed_options(cls):
        return ("kind",)

    def infer(self, call: OpCall) -> Decision:
        stack = self.options.get("kind", "cat") == "stack"
        tensors = call.tensors
        if not tensors:
            raise call.fail("expected a non-empty sequence of tensors")
        ref = tensors[0]
        out_ndim = ref.ndim + (1 if stack else 0)
        dim = normalize_dim(call.arg(1, "dim", 0), out_ndim)
        shape = self._out_shape(call, tensors, dim, stack)
        need: List[List[Placement]] = [[Replicate()] * call.mesh_ndim for _ in tensors]
        out: List[Placement] = []
        for d in range(call.mesh_ndim):
            target = self._target(call, d, dim, stack)
            for i, t in enumerate(tensors):
                cur = _placements(call, t)[d]
                need[i][d] = cur if isinstance(target, Partial) and isinstance(cur, Partial) else target
            out.append(Shard(target.dim + (stack and target.dim >= dim)) if isinstance(target, Shard) else target)
        return Decision(inputs=[tuple(n) for n in need], outputs=(tuple(out), shape))

    @staticmethod
    def _out_shape(call: OpCall, tensors, dim: int, stack: bool) -> Tuple[int, ...]:
        ref = tuple(tensors[0].shape)
        total = 0
        for t in tensors:
            same = tuple(t.shape) == ref if stack else (t.ndim == len(ref) and all(
                a == b for k, (a, b) in enumerate(zip(t.shape, ref)) if k != dim))
            if not same:
                raise call.fail(f"tensor {t.slot} has shape {list(t.shape)}, incompatible with {list(ref)} "
                                f"along dim {dim}")
            total += 0 if stack else t.shape[dim]
        if stack:
            return ref[:dim] + (len(tensors),) + ref[dim:]
        return ref[:dim] + (total,) + ref[dim + 1:]

    @staticmethod
    def _target(call: OpCall, d: int, dim: int, stack: bool) -> Placement:
        partial_ops = set()
        sharded = False
        for t in call.tensors:
            p = _placements(call, t)[d]
            if isinstance(p, Shard):
                sharded = True
                if stack or p.dim != dim:
                    return p
            elif isinstance(p, Partial):
                partial_ops.add(p.reduce_op)
        if not sharded and len(partial_ops) == 1 and next(iter(partial_ops)) in ("sum", "avg"):
            return Partial(next(iter(partial_ops)))
        return Replicate()


# ---------------------------------------------------------------------- pad
class PadRule(OpRule):
    """``F.pad(x, pad, mode, value)``: padded dims are replicated; a nonzero constant reduces ``Partial``."""

    def infer(self, call: OpCall) -> Decision:
        x = call.tensors[0]
        pad = call.arg(1, "pad")
        if not isinstance(pad, (list, tuple)) or len(pad) % 2 or len(pad) // 2 > x.ndim:
            raise call.fail(f"pad must be a sequence of 2*k ints with k <= {x.ndim}, got {pad!r}")
        mode = call.arg(2, "mode", "constant")
        value = call.arg(3, "value", None)
        shape = list(x.shape)
        padded = set()
        for i in range(len(pad) // 2):
            k = x.ndim - 1 - i
            left, right = pad[2 * i], pad[2 * i + 1]
            if left or right:
                padded.add(k)
            shape[k] += left + right
            if shape[k] < 0:
                raise call.fail(f"padding {pad} makes dim {k} of size {x.shape[k]} negative")
        if mode != "constant":  # reflect/replicate/circular kernels refuse empty dims: no rank may get an empty shard
            padded |= {d for d in range(x.ndim) if any(x.shape[d] < n for n in call.mesh_shape)}
        need = _replicate_dims(_placements(call, x), padded)
        if mode == "constant" and value not in (None, 0, 0.0):
            need = _no_partial(need)
        return _one_input(call, need, need, shape)


# ---------------------------------------------------------------------- repeat / tile / repeat_interleave
class RepeatRule(OpRule):
    """repeat(*sizes) and tile(dims) (``kind: tile`` pads short ``dims`` with 1s): repeated dims are replicated."""

    @classmethod
    def allowed_options(cls):
        return ("kind",)

    def infer(self, call: OpCall) -> Decision:
        x = call.tensors[0]
        reps = sizes_from_args(call, 1, "dims" if self.options.get("kind") == "tile" else "repeats")
        if self.options.get("kind") == "tile" and len(reps) < x.ndim:
            reps = (1,) * (x.ndim - len(reps)) + reps
        lead = len(reps) - x.ndim
        if lead < 0:
            raise call.fail(f"number of repeat dims {len(reps)} can not be smaller than the tensor's rank {x.ndim}")
        shape = tuple(r * s for r, s in zip(reps, (1,) * lead + tuple(x.shape)))
        need = _replicate_dims(_placements(call, x), {k for k in range(x.ndim) if reps[k + lead] != 1})
        out = tuple(Shard(p.dim + lead) if isinstance(p, Shard) else p for p in need)
        return _one_input(call, need, out, shape)


class RepeatInterleaveRule(OpRule):
    """repeat_interleave(x, repeats, dim=None, output_size=None).

    ``dim=None`` flattens: everything is replicated. An int ``repeats`` keeps a shard of ``dim`` when
    it divides evenly; a tensor ``repeats`` (data-dependent sizes) replicates ``dim`` and the
    output spec is computed from the local result.
    """

    def infer(self, call: OpCall) -> Decision:
        if call.arg(1, "repeats") is None:
            raise call.fail("only repeat_interleave(x, repeats, dim) is supported (not the repeats-only form)")
        x = call.tensors[0]
        repeats = call.arg(1, "repeats")
        dim = call.arg(2, "dim", None)
        pl = _placements(call, x)
        rep_need = [(Replicate(),) * call.mesh_ndim] * (len(call.tensors) - 1)
        if dim is None:
            need = _replicate_dims(pl, range(x.ndim))
            if _is_marker(repeats):
                return Decision(inputs=[need] + rep_need, outputs=None, expand="expand_dynamic")
            numel = 1
            for s in x.shape:
                numel *= s
            return Decision(inputs=[need], outputs=(need, (numel * repeats,)))
        dim = normalize_dim(dim, x.ndim)
        if _is_marker(repeats):
            need = _replicate_dims(pl, {dim})
            return Decision(inputs=[need] + rep_need, outputs=None, expand="expand_dynamic")
        parts = 1
        for d, p in enumerate(pl):
            if isinstance(p, Shard) and p.dim == dim:
                parts *= call.mesh_shape[d]
        need = _replicate_dims(pl, {dim}) if x.shape[dim] % parts else pl
        shape = list(x.shape)
        shape[dim] *= repeats
        return _one_input(call, need, need, shape)

    def expand_dynamic(self, func, args, kwargs, plan):
        """Run locally; sharded dims keep the input's global size, the repeated dim its local one."""
        out = func(*args, **kwargs)
        shape = list(out.shape)
        for p in plan.decision.inputs[0]:
            if isinstance(p, Shard):
                shape[p.dim] = plan.call.tensors[0].shape[p.dim]
        return wrap_local(out, plan, plan.decision.inputs[0], shape)


def _is_marker(value) -> bool:
    return isinstance(value, tuple) and len(value) == 2 and value[0] == "__tensor__"


# ---------------------------------------------------------------------- tril / triu
class TriangleRule(OpRule):
    """tril/triu(x, diagonal): any placement works; sharded matrix dims shift the local diagonal."""

    def infer(self, call: OpCall) -> Decision:
        x = call.tensors[0]
        if x.ndim < 2:
            raise call.fail(f"input tensor must have at least 2 dimensions, got {x.ndim}")
        pl = _placements(call, x)
        shifted = any(isinstance(p, Shard) and p.dim >= x.ndim - 2 for p in pl)
        return _one_input(call, pl, pl, x.shape, "expand_shifted" if shifted else None)

    def expand_shifted(self, func, args, kwargs, plan):
        """Local tril/triu with ``diagonal + row offset - column offset`` of this shard."""
        from hyper_parallel.core.spec import DTensorSpec
        x = plan.call.tensors[0]
        spec = DTensorSpec(plan.mesh, plan.decision.inputs[0], x.shape)
        _, offset = spec.local_shape_and_offset(plan.mesh.get_coordinate())
        diagonal = args[1] if len(args) > 1 else kwargs.get("diagonal", 0)
        return func(args[0], diagonal + offset[-2] - offset[-1])


# ---------------------------------------------------------------------- flip / roll
class FlipRule(OpRule):
    """flip(dims) / fliplr / flipud (``kind``): flipped dims are replicated."""

    @classmethod
    def allowed_options(cls):
        return ("kind",)

    def infer(self, call: OpCall) -> Decision:
        x = call.tensors[0]
        kind = self.options.get("kind", "flip")
        if kind == "fliplr":
            dims: Sequence[int] = (1,)
        elif kind == "flipud":
            dims = (0,)
        else:
            dims = sizes_from_args(call, 1, "dims")
        dims = {normalize_dim(d, x.ndim) for d in dims}
        need = _replicate_dims(_placements(call, x), dims)
        return _one_input(call, need, need, x.shape)


class RollRule(OpRule):
    """roll(shifts, dims): rolled dims (all of them when ``dims`` is None) are replicated."""

    def infer(self, call: OpCall) -> Decision:
        x = call.tensors[0]
        dims = call.arg(2, "dims", None)
        if dims is None or dims == () or dims == []:
            rolled = set(range(x.ndim))
        else:
            rolled = {normalize_dim(d, x.ndim) for d in (dims if isinstance(dims, (list, tuple)) else (dims,))}
        need = _replicate_dims(_placements(call, x), rolled)
        return _one_input(call, need, need, x.shape)


# ---------------------------------------------------------------------- diagonal / diag_embed
class DiagonalRule(OpRule):
    """diagonal(offset, dim1, dim2): the two dims are replicated; the diagonal becomes the last dim."""

    def infer(self, call: OpCall) -> Decision:
        x = call.tensors[0]
        offset = call.arg(1, "offset", 0)
        d1 = normalize_dim(call.arg(2, "dim1", 0), x.ndim, "dim1")
        d2 = normalize_dim(call.arg(3, "dim2", 1), x.ndim, "dim2")
        if d1 == d2:
            raise call.fail(f"diagonal dimensions cannot be identical {d1}, {d2}")
        need = _replicate_dims(_placements(call, x), {d1, d2})
        s1, s2 = x.shape[d1], x.shape[d2]
        diag = max(0, min(s1, s2 - offset) if offset >= 0 else min(s1 + offset, s2))
        rest = [k for k in range(x.ndim) if k not in (d1, d2)]
        out = tuple(Shard(rest.index(p.dim)) if isinstance(p, Shard) else p for p in need)
        return _one_input(call, need, out, tuple(x.shape[k] for k in rest) + (diag,))


class DiagEmbedRule(OpRule):
    """diag_embed(offset, dim1, dim2): the last input dim (the diagonal) is replicated."""

    def infer(self, call: OpCall) -> Decision:
        x = call.tensors[0]
        if x.ndim < 1:
            raise call.fail("input must have at least 1 dimension")
        offset = call.arg(1, "offset", 0)
        d1 = normalize_dim(call.arg(2, "dim1", -2), x.ndim + 1, "dim1")
        d2 = normalize_dim(call.arg(3, "dim2", -1), x.ndim + 1, "dim2")
        if d1 == d2:
            raise call.fail(f"diagonal dimensions cannot be identical {d1}, {d2}")
        need = _replicate_dims(_placements(call, x), {x.ndim - 1})
        rest = [k for k in range(x.ndim + 1) if k not in (d1, d2)]
        shape = [0] * (x.ndim + 1)
        for k, j in enumerate(rest):
            shape[j] = x.shape[k]
        shape[d1] = shape[d2] = x.shape[-1] + abs(offset)
        out = tuple(Shard(rest[p.dim]) if isinstance(p, Shard) else p for p in need)
        return _one_input(call, need, out, shape)
