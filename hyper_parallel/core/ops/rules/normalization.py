# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Normalisation and softmax: softmax/log_softmax, layer_norm, rms_norm, group_norm, batch_norm.

The statistics of a normalisation couple every element of the normalised dims, so a mesh dim that
shards one of them is requested Replicate (the dispatcher gathers it); shards of the other dims are
kept, and ``Partial`` inputs are reduced first (normalisation is not linear). Affine parameters
(weight, bias) are requested Replicate; the dispatcher then all-reduces their gradients over the
mesh dims where the output is sharded.

batch_norm normalises per channel (dim 1) over every other dim. With a channel-sharded input the
parameters and running statistics are requested ``Shard(0)`` on that mesh dim (the input stays
sharded); in training mode the running statistics are updated in place, so a running statistic
whose placement would have to change is refused with a clear error instead of updating a copy.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from hyper_parallel.core.placement import Placement, Replicate, Shard, shard_range
from hyper_parallel.core.ops.rules.reductions import checked_dim
from hyper_parallel.core.ops.rule import Decision, OpCall, OpRule, TensorArg

__all__ = ["SoftmaxRule", "LastDimsNormRule", "GroupNormRule", "BatchNormRule", "legacy_softmax_dim"]


def legacy_softmax_dim(ndim: int) -> int:
    """The dim ``F.softmax(x, dim=None)`` picks (PyTorch's deprecated implicit choice)."""
    return 0 if ndim in (0, 1, 3) else 1


def _keep_except(t: TensorArg, mesh_ndim: int, coupled) -> Tuple[Placement, ...]:
    """``t``'s placements with shards of ``coupled`` dims and every Partial replaced by Replicate."""
    out = []
    for d in range(mesh_ndim):
        p = t.placements[d] if t.is_dtensor else Replicate()
        out.append(p if isinstance(p, Shard) and p.dim not in coupled else Replicate())
    return tuple(out)


def _marker_slot(value: Any) -> Optional[int]:
    """Slot of a tensor placeholder, else None."""
    if isinstance(value, (tuple, list)) and len(value) == 2 and value[0] == "__tensor__":
        return value[1]
    return None


class SoftmaxRule(OpRule):
    """softmax / log_softmax along ``dim`` (option ``legacy_dim: true`` for ``F.*``, where dim may be None)."""

    @classmethod
    def allowed_options(cls):
        return ("legacy_dim",)

    def infer(self, call: OpCall) -> Decision:
        if len(call.tensors) != 1:
            raise call.fail(f"expected one tensor argument, got {len(call.tensors)}")
        t = call.tensors[0]
        dim = call.arg(1, "dim")
        if dim is None and self.options.get("legacy_dim"):
            dim = legacy_softmax_dim(t.ndim)
        if not isinstance(dim, int) or isinstance(dim, bool):
            raise call.fail(f"dim must be an int, got {dim!r}")
        dim = checked_dim(call.op, dim, t.ndim)
        need = _keep_except(t, call.mesh_ndim, {dim})
        return Decision(inputs=[need], outputs=(need, tuple(t.shape)))


class LastDimsNormRule(OpRule):
    """layer_norm / rms_norm over the last ``len(normalized_shape)`` dims; weight and bias replicated."""

    def infer(self, call: OpCall) -> Decision:
        t = call.tensors[0]
        if _marker_slot(call.arg(0, "input")) != 0:
            raise call.fail("the normalised input must be a tensor (the first argument)")
        normalized = call.arg(1, "normalized_shape")
        if isinstance(normalized, int) and not isinstance(normalized, bool):
            normalized = (normalized,)
        if not isinstance(normalized, (tuple, list)) or _marker_slot(normalized) is not None:
            raise call.fail(f"normalized_shape must be a list of ints, got {normalized!r}")
        k = len(normalized)
        if k > t.ndim or tuple(t.shape[t.ndim - k:]) != tuple(normalized):
            raise call.fail(f"normalized_shape {list(normalized)} does not match the trailing dims of input "
                            f"shape {list(t.shape)}")
        need = _keep_except(t, call.mesh_ndim, set(range(t.ndim - k, t.ndim)))
        inputs = [need] + [(Replicate(),) * call.mesh_ndim] * (len(call.tensors) - 1)
        return Decision(inputs=inputs, outputs=(need, tuple(t.shape)))


class GroupNormRule(OpRule):
    """group_norm: statistics per (sample, group), so only the batch dim (0) may stay sharded."""

    def infer(self, call: OpCall) -> Decision:
        t = call.tensors[0]
        if _marker_slot(call.arg(0, "input")) != 0:
            raise call.fail("the normalised input must be a tensor (the first argument)")
        need = _keep_except(t, call.mesh_ndim, set(range(1, t.ndim)))
        inputs = [need] + [(Replicate(),) * call.mesh_ndim] * (len(call.tensors) - 1)
        return Decision(inputs=inputs, outputs=(need, tuple(t.shape)))


def _channel_shard(p: Placement, chunks: List[int], n: int) -> Tuple[bool, List[int]]:
    """(keep ``p`` as a channel shard, channel counts after it): a split that leaves a rank without channels
    is not kept (torch's batch_norm fails on zero channels), the channels are gathered on that mesh dim."""
    if not (isinstance(p, Shard) and p.dim == 1):
        return False, chunks
    split = [shard_range(c, n, i)[1] for c in chunks for i in range(n)]
    if min(split) == 0:
        return False, chunks
    return True, split


# positional index of each tensor parameter: F.batch_norm / torch.batch_norm (aten order)
_BN_PARAMS = {"functional": (("running_mean", 1), ("running_var", 2), ("weight", 3), ("bias", 4)),
              "aten": (("weight", 1), ("bias", 2), ("running_mean", 3), ("running_var", 4))}


class BatchNormRule(OpRule):
    """batch_norm: per-channel statistics over every dim but 1.

    Option ``signature``: ``functional`` (``F.batch_norm(input, running_mean, running_var, weight, bias,
    training, ...)``, the default) or ``aten`` (``torch.batch_norm(input, weight, bias, running_mean,
    running_var, training, ...)``).
    """

    @classmethod
    def allowed_options(cls):
        return ("signature",)

    def __init__(self, op: str, **options) -> None:
        super().__init__(op, **options)
        self.signature = options.get("signature", "functional")
        if self.signature not in _BN_PARAMS:
            raise ValueError(f"{op}: option signature={self.signature!r}; expected one of {sorted(_BN_PARAMS)}")

    def infer(self, call: OpCall) -> Decision:
        t = call.tensors[0]
        if _marker_slot(call.arg(0, "input")) != 0 or t.ndim < 2:
            raise call.fail("input must be a tensor of at least 2 dims (N, C, ...)")
        training = bool(call.arg(5, "training", False))
        roles = self._roles(call, _BN_PARAMS[self.signature])
        in_need: List[Placement] = []
        param_need: List[Placement] = []
        chunks = [t.shape[1]]  # channel counts of the shards so far (torch's batch_norm needs >= 1 per rank)
        for d in range(call.mesh_ndim):
            p = t.placements[d] if t.is_dtensor else Replicate()
            channel, chunks = _channel_shard(p, chunks, call.mesh_shape[d])
            p = p if channel or not (isinstance(p, Shard) and p.dim == 1) else Replicate()
            if training and not channel:
                in_need.append(Replicate())  # batch statistics need the whole (N, *spatial) extent
            else:
                in_need.append(p if isinstance(p, Shard) else Replicate())
            param_need.append(Shard(0) if channel else Replicate())
        inputs: List[Any] = [None] * len(call.tensors)
        inputs[0] = tuple(in_need)
        for name, slot in roles.items():
            inputs[slot] = tuple(param_need)
            if training and name.startswith("running_"):
                self._check_inplace_stat(call, name, call.tensors[slot], tuple(param_need))
        return Decision(inputs=inputs, outputs=(tuple(in_need), tuple(t.shape)))

    @staticmethod
    def _roles(call: OpCall, params) -> Dict[str, int]:
        roles = {}
        for name, index in params:
            slot = _marker_slot(call.arg(index, name))
            if slot is not None:
                roles[name] = slot
        return roles

    @staticmethod
    def _check_inplace_stat(call: OpCall, name: str, stat: TensorArg, need) -> None:
        current = stat.placements if stat.is_dtensor else (Replicate(),) * call.mesh_ndim
        if tuple(current) != tuple(need):
            got = [p.short() for p in current]
            want = [p.short() for p in need]
            raise call.fail(f"training mode updates {name} in place, but it is {got} and the input layout needs "
                            f"{want}; redistribute {name} (and the module's buffers) to {want} first")
