# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Indexing ops: gather/take_along_dim, scatter/scatter_add/index_add, index_select, masked ops, one_hot, embedding.

Shared facts: index tensors are integers, so they are never ``Partial``; the indexed data is
linear in the op, so a ``Partial`` data input stays ``Partial`` when the indices are replicated.
A dim the indices address must be whole on the data side (replicated), except where the op can
combine shards exactly:

* scatter_add / index_add with the *indices* sharded along the indexed dim: every rank adds its
  share of the contributions to a locally-partial copy of ``input`` -> ``Partial(sum)``;
* embedding with a vocabulary-sharded weight (``Shard(0)``): each rank looks up the ids in its
  vocabulary range and zeroes the others -> ``Partial(sum)``.

Ops whose output shape depends on data (``masked_select``, ``one_hot`` without ``num_classes``)
replicate their inputs and get their output spec from the local result at run time.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from hyper_parallel.core.placement import Partial, Placement, Replicate, Shard
from hyper_parallel.core.ops.rules.views import is_marker, wrap_local
from hyper_parallel.core.ops.rule import Decision, OpCall, OpRule, TensorArg, broadcast_shapes, normalize_dim

__all__ = ["GatherRule", "ScatterRule", "IndexSelectRule", "MaskedScatterRule", "MaskedSelectRule", "OneHotRule",
           "EmbeddingRule"]

Placements = Tuple[Placement, ...]
_R = Replicate()


def _pl(t: Optional[TensorArg], d: int) -> Placement:
    if t is None or not t.is_dtensor:
        return _R
    return t.placements[d]


def _linear_partial(p: Placement) -> bool:
    return isinstance(p, Partial) and p.reduce_op in ("sum", "avg")


def _tensor_at(call: OpCall, index: int, name: str) -> Optional[TensorArg]:
    value = call.arg(index, name)
    return call.tensors[value[1]] if is_marker(value) else None


def _need_list(call: OpCall) -> List[List[Placement]]:
    return [[_R] * call.mesh_ndim for _ in call.tensors]


# ---------------------------------------------------------------------- gather / take_along_dim
class GatherRule(OpRule):
    """gather(input, dim, index) and take_along_dim(input, indices, dim) (``kind: take_along_dim``).

    Per mesh dim: an index shard on the gathered dim keeps the output sharded (input replicated);
    a shard on another dim stays when input and index have the same size there (or one of them
    broadcasts, for take_along_dim); a ``Partial`` input stays partial; otherwise replicate.
    """

    @classmethod
    def allowed_options(cls):
        return ("kind",)

    def infer(self, call: OpCall) -> Decision:
        take = self.options.get("kind") == "take_along_dim"
        x = _tensor_at(call, 0, "input")
        idx = _tensor_at(call, 1 if take else 2, "indices" if take else "index")
        if x is None or idx is None:
            raise call.fail("expected tensor input and index arguments")
        dim = call.arg(2, "dim", None) if take else call.arg(1, "dim")
        if dim is None:  # take_along_dim over the flattened input
            need = tuple(p if _linear_partial(p) else _R for p in (_pl(x, d) for d in range(call.mesh_ndim)))
            return Decision(inputs=[need, (_R,) * call.mesh_ndim], outputs=(need, tuple(idx.shape)))
        if x.ndim != idx.ndim:
            raise call.fail(f"index has {idx.ndim} dims but input has {x.ndim}; they must have the same rank")
        dim = normalize_dim(dim, x.ndim)
        out_shape = self._out_shape(call, x, idx, dim, take)
        need = _need_list(call)
        out = []
        for d in range(call.mesh_ndim):
            px, pi = self._choose(x, idx, d, dim, out_shape)
            need[x.slot][d], need[idx.slot][d] = px, pi
            out.append(pi if isinstance(pi, Shard) else px)
        return Decision(inputs=[tuple(n) for n in need], outputs=(tuple(out), out_shape))

    @staticmethod
    def _out_shape(call, x, idx, dim, take) -> Tuple[int, ...]:
        if not take:
            for k in range(x.ndim):
                if k != dim and idx.shape[k] > x.shape[k]:
                    raise call.fail(f"size of index {list(idx.shape)} exceeds input {list(x.shape)} at dim {k}")
            return tuple(idx.shape)
        a = [1 if k == dim else s for k, s in enumerate(x.shape)]
        b = [1 if k == dim else s for k, s in enumerate(idx.shape)]
        try:
            shape = list(broadcast_shapes(a, b))
        except ValueError as exc:
            raise call.fail(str(exc)) from None
        shape[dim] = idx.shape[dim]
        return tuple(shape)

    @staticmethod
    def _choose(x: TensorArg, idx: TensorArg, d: int, dim: int, out_shape) -> Tuple[Placement, Placement]:
        """(input, index) placements on mesh dim ``d``; dims other than ``dim`` index positionally."""
        px, pi = (x.placements[d] if x.is_dtensor else _R), (idx.placements[d] if idx.is_dtensor else _R)
        if isinstance(pi, Shard):
            k = pi.dim
            if k == dim:
                return _R, pi
            if idx.shape[k] == out_shape[k] and x.shape[k] in (out_shape[k], 1):
                return (Shard(k) if x.shape[k] == out_shape[k] else _R), pi
        if isinstance(px, Shard) and px.dim != dim:
            k = px.dim
            if x.shape[k] == out_shape[k] and idx.shape[k] in (out_shape[k], 1):
                return px, (Shard(k) if idx.shape[k] == out_shape[k] else _R)
        return (px if _linear_partial(px) else _R), _R


# ---------------------------------------------------------------------- scatter / scatter_add / index_add
def _all_replicated(call: OpCall, shape) -> Decision:
    """Every tensor input replicated, one replicated output of ``shape``."""
    rep = (_R,) * call.mesh_ndim
    return Decision(inputs=[rep] * len(call.tensors), outputs=(rep, tuple(shape)))


class ScatterRule(OpRule):
    """scatter (``mode: set``), scatter_add (``mode: add``) and index_add (``mode: index_add``).

    Per mesh dim: a shard on a dim other than ``dim`` stays when input, index and src have the same
    size there; for the additive modes, indices sharded along ``dim`` give ``Partial(sum)``
    (``input`` made partial locally); a ``Partial`` input/src (the other made partial locally) stays
    partial when the op is linear in them (no scalar ``value``, no multiplicative ``reduce``).
    """

    @classmethod
    def allowed_options(cls):
        return ("mode",)

    def infer(self, call: OpCall) -> Decision:
        mode = self.options.get("mode", "set")
        x = _tensor_at(call, 0, "input")
        dim = call.arg(1, "dim")
        idx = _tensor_at(call, 2, "index")
        src = _tensor_at(call, 3, "source" if mode == "index_add" else "src")
        if x is None or idx is None or not isinstance(dim, int):
            raise call.fail("expected (input, dim, index, src/value) with tensor input and index")
        if x.ndim == 0:  # a 0-d input: nothing to shard, every input whole
            return _all_replicated(call, tuple(x.shape))
        dim = normalize_dim(dim, x.ndim)
        if mode == "index_add" and (src is None or idx.ndim > 1):
            raise call.fail("index_add needs a 1-D index and a source tensor")
        linear = self._linear(call, src)
        need = _need_list(call)
        out = []
        for d in range(call.mesh_ndim):
            out.append(self._mesh_dim(d, mode, dim, x, idx, src, linear, need))
        return Decision(inputs=[tuple(n) for n in need], outputs=(tuple(out), tuple(x.shape)))

    @staticmethod
    def _linear(call: OpCall, src: Optional[TensorArg]) -> bool:
        if src is None:
            return False  # a scalar value would be written on every rank
        return call.kwargs.get("reduce") in (None, "add", "sum")

    @staticmethod
    def _aligned(mode: str, k: int, dim: int, x, idx, src) -> bool:
        """True when input dim ``k`` can be sharded the same way on input, index and src."""
        if k == dim:
            return False
        if mode == "index_add":
            return src.shape[k] == x.shape[k]
        return idx.shape[k] == x.shape[k] and (src is None or src.shape[k] == x.shape[k])

    def _mesh_dim(self, d, mode, dim, x, idx, src, linear, need) -> Placement:
        """Output placement on mesh dim ``d``; fills ``need`` for the inputs."""
        k = self._aligned_shard(d, mode, dim, x, idx, src)
        if k is not None:
            need[x.slot][d] = Shard(k)
            need[idx.slot][d] = Shard(k) if mode != "index_add" else _R
            if src is not None:
                need[src.slot][d] = Shard(k)
            return Shard(k)
        if mode in ("add", "index_add") and linear and self._contributions_sharded(d, mode, dim, x, idx, src):
            px = _pl(x, d)
            target = px if px == Partial("sum") else Partial("sum")
            need[x.slot][d], need[idx.slot][d], need[src.slot][d] = target, _pl(idx, d), Shard(dim)
            return target
        partials = {_pl(t, d) for t in (x, src) if _linear_partial(_pl(t, d))}
        if linear and len(partials) == 1:
            target = next(iter(partials))
            need[x.slot][d] = need[src.slot][d] = target
            return target
        return _R

    def _aligned_shard(self, d, mode, dim, x, idx, src) -> Optional[int]:
        """A dim (other than ``dim``) some input is sharded on that all inputs can share, else None."""
        for t in (x, idx, src):
            p = _pl(t, d)
            if not isinstance(p, Shard) or (mode == "index_add" and t is idx):
                continue  # index_add's index dim 0 maps to `dim`, handled by the additive case
            if self._aligned(mode, p.dim, dim, x, idx, src):
                return p.dim
        return None

    @staticmethod
    def _contributions_sharded(d, mode, dim, x, idx, src) -> bool:
        """True when the index is sharded along the indexed dim, so each rank adds a share of the updates."""
        pi = _pl(idx, d)
        if not isinstance(pi, Shard) or isinstance(_pl(x, d), Shard):
            return False
        return pi.dim == (0 if mode == "index_add" else dim) and src.shape[dim] == idx.shape[pi.dim]


# ---------------------------------------------------------------------- index_select
class IndexSelectRule(OpRule):
    """index_select(input, dim, index): an index shard shards the output along ``dim`` (input replicated)."""

    def infer(self, call: OpCall) -> Decision:
        x = _tensor_at(call, 0, "input")
        idx = _tensor_at(call, 2, "index")
        if x is None or idx is None or idx.ndim > 1:
            raise call.fail("expected a tensor input and a 1-D (or 0-D) index tensor")
        if x.ndim == 0:  # a 0-d input: nothing to shard
            return _all_replicated(call, ())
        dim = normalize_dim(call.arg(1, "dim"), x.ndim)
        need = _need_list(call)
        out = []
        for d in range(call.mesh_ndim):
            px, pi = _pl(x, d), _pl(idx, d)
            if isinstance(px, Shard) and px.dim != dim:
                need[x.slot][d] = px
                out.append(px)
            elif isinstance(pi, Shard) and idx.ndim == 1:
                need[idx.slot][d] = pi
                out.append(Shard(dim))
            elif _linear_partial(px):
                need[x.slot][d] = px
                out.append(px)
            else:
                out.append(_R)
        shape = list(x.shape)
        shape[dim] = idx.shape[0] if idx.ndim else 1
        return Decision(inputs=[tuple(n) for n in need], outputs=(tuple(out), tuple(shape)))


# ---------------------------------------------------------------------- masked ops
class MaskedScatterRule(OpRule):
    """masked_scatter(input, mask, source): the mask decides which source element lands where, which
    depends on the global order, so everything is replicated; ``Partial`` input/source stay partial."""

    def infer(self, call: OpCall) -> Decision:
        x, mask, src = (_tensor_at(call, 0, "input"), _tensor_at(call, 1, "mask"), _tensor_at(call, 2, "source"))
        if x is None or mask is None or src is None:
            raise call.fail("expected tensor input, mask and source")
        try:
            shape = broadcast_shapes(x.shape, mask.shape)
        except ValueError as exc:
            raise call.fail(str(exc)) from None
        need = _need_list(call)
        out = []
        for d in range(call.mesh_ndim):
            partials = {_pl(t, d) for t in (x, src) if _linear_partial(_pl(t, d))}
            target = next(iter(partials)) if len(partials) == 1 else _R
            need[x.slot][d] = need[src.slot][d] = target
            out.append(target)
        return Decision(inputs=[tuple(n) for n in need], outputs=(tuple(out), shape))


class MaskedSelectRule(OpRule):
    """masked_select(input, mask): a data-dependent 1-D output; inputs replicated (a Partial input stays)."""

    def infer(self, call: OpCall) -> Decision:
        x, mask = _tensor_at(call, 0, "input"), _tensor_at(call, 1, "mask")
        if x is None or mask is None:
            raise call.fail("expected tensor input and mask")
        need = _need_list(call)
        for d in range(call.mesh_ndim):
            px = _pl(x, d)
            need[x.slot][d] = px if _linear_partial(px) else _R
        return Decision(inputs=[tuple(n) for n in need], outputs=None, expand="expand_dynamic")

    def expand_dynamic(self, func, args, kwargs, plan):
        """Select locally; the output length is read from the local result."""
        out = func(*args, **kwargs)
        x = _tensor_at(plan.call, 0, "input")
        return wrap_local(out, plan, plan.decision.inputs[x.slot], tuple(out.shape))


# ---------------------------------------------------------------------- one_hot
class OneHotRule(OpRule):
    """one_hot(tensor, num_classes): shards stay, the class dim is whole. ``num_classes=-1`` (from the
    data) replicates the input and reads the class count from the local result."""

    def infer(self, call: OpCall) -> Decision:
        x = call.tensors[0]
        classes = call.arg(1, "num_classes", -1)
        need = tuple(p if isinstance(p, Shard) else _R for p in (_pl(x, d) for d in range(call.mesh_ndim)))
        if classes == -1:
            return Decision(inputs=[(_R,) * call.mesh_ndim], outputs=None, expand="expand_dynamic")
        return Decision(inputs=[need], outputs=(need, tuple(x.shape) + (classes,)))

    def expand_dynamic(self, func, args, kwargs, plan):
        """One-hot of the replicated input; the class count comes from the data."""
        out = func(*args, **kwargs)
        return wrap_local(out, plan, (_R,) * plan.mesh.ndim, tuple(out.shape))


# ---------------------------------------------------------------------- embedding
class EmbeddingRule(OpRule):
    """F.embedding(input, weight, ...) (``kind: functional``) and torch.embedding(weight, indices, ...)
    (``kind: aten``).

    Per mesh dim: weight ``Shard(0)`` (vocabulary-parallel) -> ids replicated, output
    ``Partial(sum)`` through an expand that masks ids outside this rank's rows; weight ``Shard(1)``
    -> output sharded on its last dim; weight ``Partial`` -> output partial; weight replicated ->
    the output follows the ids' shard. ``max_norm`` (it renormalises rows in place) needs everything
    replicated; ``scale_grad_by_freq`` needs replicated ids and no vocabulary split.
    """

    @classmethod
    def allowed_options(cls):
        return ("kind",)

    def _args(self, call_like) -> Dict[str, Any]:
        """Weight, ids and options of a call (OpCall or local args), by name."""
        arg = call_like.arg if isinstance(call_like, OpCall) else call_like
        if self.options.get("kind", "functional") == "aten":
            pad = arg(2, "padding_idx", -1)
            return {"weight": arg(0, "weight"), "ids": arg(1, "indices"), "padding_idx": None if pad < 0 else pad,
                    "max_norm": None, "scale": arg(3, "scale_grad_by_freq", False), "sparse": arg(4, "sparse", False)}
        return {"ids": arg(0, "input"), "weight": arg(1, "weight"), "padding_idx": arg(2, "padding_idx", None),
                "max_norm": arg(3, "max_norm", None), "scale": arg(5, "scale_grad_by_freq", False),
                "sparse": arg(6, "sparse", False)}

    def infer(self, call: OpCall) -> Decision:
        a = self._args(call)
        if not (is_marker(a["weight"]) and is_marker(a["ids"])):
            raise call.fail("expected tensor ids and weight")
        w, ids = call.tensors[a["weight"][1]], call.tensors[a["ids"][1]]
        if w.ndim != 2:
            raise call.fail(f"weight must be 2-D (num_embeddings, dim), got shape {list(w.shape)}")
        if a["sparse"]:
            raise call.fail("sparse=True is not supported on DTensors (sparse gradients of a sharded weight)")
        need = _need_list(call)
        out = [self._mesh_dim(a, w, ids, d, need) for d in range(call.mesh_ndim)]
        vocab = any(need[w.slot][d] == Shard(0) for d in range(call.mesh_ndim))
        shape = tuple(ids.shape) + (w.shape[1],)
        return Decision(inputs=[tuple(n) for n in need], outputs=(tuple(out), shape),
                        expand="expand_vocab" if vocab else None)

    @staticmethod
    def _mesh_dim(a: Dict[str, Any], w: TensorArg, ids: TensorArg, d: int, need) -> Placement:
        """Output placement on mesh dim ``d``; fills ``need`` for weight and ids."""
        pw, pi = _pl(w, d), _pl(ids, d)
        if a["max_norm"] is not None:
            pw = pi = _R
        if a["scale"]:  # gradient scaled by id frequencies: needs every id and whole rows on each rank
            pi = _R
            pw = _R if pw == Shard(0) else pw
        if isinstance(pw, Shard) or _linear_partial(pw):
            need[w.slot][d], need[ids.slot][d] = pw, _R
            if pw == Shard(0):
                return Partial("sum")
            return Shard(ids.ndim) if isinstance(pw, Shard) else pw
        pi = pi if isinstance(pi, Shard) else _R
        need[w.slot][d], need[ids.slot][d] = _R, pi
        return pi
