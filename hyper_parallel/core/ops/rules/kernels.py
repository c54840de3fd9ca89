# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Rules of the library's fused ops (``hyper_parallel.kernels.*``; the C++ kernels are in ``csrc/``).

* ``rms_norm(x, weight=None, eps)``: shardable on every dim but the normalised last one; ``Partial``
  inputs are reduced (normalisation is not linear); ``weight`` replicated (its gradient is all-reduced by
  the dispatcher where the output is sharded).
* ``swiglu(gate, up)``: element-wise (``ElementwiseRule`` in the YAML).
* ``apply_rotary_emb``: ``RotaryRule`` (``rules/attention.py``).
* ``moe_permute(tokens [T, H], expert_idx [T, K], E)``: the order of the rows is global (a stable sort
  over all tokens), so the token dim is gathered; the hidden dim may stay sharded (the permuted rows and
  ``tokens`` share it). ``expert_idx`` and the index outputs are replicated.
* ``moe_unpermute(permuted [R, H], row_map [T, K], probs)``: hidden dim shardable as above; ``row_map``
  and ``probs`` replicated.
* ``sinkhorn(logits [..., n, m], ...)``: every batch dim shardable; the two matrix dims are coupled
  (row and column sums), so their shards are gathered; ``Partial`` reduced.
"""
from __future__ import annotations

from typing import Set, Tuple

from hyper_parallel.core.placement import Placement, Replicate, Shard
from hyper_parallel.core.ops.rule import Decision, OpCall, OpRule, TensorArg

__all__ = ["FusedRmsNormRule", "MoePermuteRule", "MoeUnpermuteRule", "SinkhornRule"]


def _keep(t: TensorArg, mesh_ndim: int, allowed: Set[int]) -> Tuple[Placement, ...]:
    """``t``'s placements keeping only shards of ``allowed`` dims (everything else Replicate)."""
    out = []
    for d in range(mesh_ndim):
        p = t.placements[d] if t.is_dtensor else Replicate()
        out.append(p if isinstance(p, Shard) and p.dim in allowed else Replicate())
    return tuple(out)


def _replicated(call: OpCall) -> Tuple[Placement, ...]:
    return (Replicate(),) * call.mesh_ndim


class FusedRmsNormRule(OpRule):
    """``hyper_parallel.kernels.rms_norm``: every dim but the last may stay sharded."""

    def infer(self, call: OpCall) -> Decision:
        x = call.tensors[0]
        if x.ndim < 1:
            raise call.fail("x must have at least one dim")
        need = _keep(x, call.mesh_ndim, set(range(x.ndim - 1)))
        inputs = [need] + [_replicated(call)] * (len(call.tensors) - 1)
        return Decision(inputs=inputs, outputs=(need, tuple(x.shape)))


class SinkhornRule(OpRule):
    """``hyper_parallel.kernels.sinkhorn``: batch dims shardable, the matrix dims gathered."""

    def infer(self, call: OpCall) -> Decision:
        x = call.tensors[0]
        if x.ndim < 2:
            raise call.fail(f"logits must be [..., n, m], got {x.ndim} dims")
        need = _keep(x, call.mesh_ndim, set(range(x.ndim - 2)))
        return Decision(inputs=[need], outputs=(need, tuple(x.shape)))


class MoePermuteRule(OpRule):
    """``hyper_parallel.kernels.moe_permute``: hidden-dim shards kept, the token dim gathered."""

    def infer(self, call: OpCall) -> Decision:
        if len(call.tensors) != 2:
            raise call.fail(f"expected tokens and expert_idx, got {len(call.tensors)} tensors")
        tokens, idx = call.tensors
        if tokens.ndim != 2 or idx.ndim != 2:
            raise call.fail(f"expected tokens [T, H] and expert_idx [T, K], got {list(tokens.shape)} and "
                            f"{list(idx.shape)}")
        num_experts = call.arg(2, "num_experts")
        if not isinstance(num_experts, int) or isinstance(num_experts, bool):
            raise call.fail(f"num_experts must be an int, got {num_experts!r}")
        need = _keep(tokens, call.mesh_ndim, {1})
        rows = tokens.shape[0] * idx.shape[1]
        rep = _replicated(call)
        return Decision(inputs=[need, rep],
                        outputs=[(need, (rows, tokens.shape[1])), (rep, tuple(idx.shape)), (rep, (num_experts,))])


class MoeUnpermuteRule(OpRule):
    """``hyper_parallel.kernels.moe_unpermute``: hidden-dim shards of ``permuted`` kept."""

    def infer(self, call: OpCall) -> Decision:
        permuted, row_map = call.tensors[0], call.tensors[1]
        if permuted.ndim != 2 or row_map.ndim != 2:
            raise call.fail(f"expected permuted [R, H] and row_map [T, K], got {list(permuted.shape)} and "
                            f"{list(row_map.shape)}")
        need = _keep(permuted, call.mesh_ndim, {1})
        inputs = [need] + [_replicated(call)] * (len(call.tensors) - 1)
        return Decision(inputs=inputs, outputs=(need, (row_map.shape[0], permuted.shape[1])))
