# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Public API of context parallelism (``hyper_parallel.cp``).

* :func:`context_parallel` — torch's context manager (``mesh, buffers, buffer_seq_dims,
  no_restore_buffers``) plus ``method`` and ``load_balance``: the listed buffers are sharded in place
  along their sequence dims (load-balanced), and inside the block
  ``torch.nn.functional.scaled_dot_product_attention`` runs distributed attention over the CP group
  on any device, CPU included. Buffers are restored on exit unless listed in ``no_restore_buffers``.
* :func:`context_parallel_shard` / :func:`context_parallel_unshard` — shard tensors the same way
  (new tensors) / gather results back in the original order.
* The module styles (``ContextParallel``, ``AsyncContextParallel``, DSA styles) live in
  :mod:`hyper_parallel.cp.style`.

A MindSpore mesh goes to :mod:`hyper_parallel.cp._mindspore.attention`: the same three functions (``ring``,
``allgather``, ``alltoall``; head-tail / contiguous / per-document balancing); there a model's attention asks
``hyper_parallel.cp._mindspore.attention.active()`` for the CP attention (the MindSpore Llama does), buffers are
sharded with ``Tensor.assign_value``, and ``async_op`` is refused (MindSpore's CPU collectives are synchronous).
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Union

from hyper_parallel.cp.load_balance import LoadBalancer

__all__ = ["context_parallel", "context_parallel_shard", "context_parallel_unshard"]

LoadBalance = Union[None, str, LoadBalancer]


def _impl(mesh: Any):
    """The backend module of ``mesh`` 's platform."""
    if getattr(mesh, "platform", None) == "mindspore":
        from hyper_parallel.cp._mindspore import attention  # pylint: disable=import-outside-toplevel
        return attention
    from hyper_parallel.cp._torch import context  # pylint: disable=import-outside-toplevel
    return context


def context_parallel(mesh, buffers: Optional[Sequence[Any]] = None, buffer_seq_dims: Optional[Sequence[int]] = None,
                     no_restore_buffers: Optional[Sequence[Any]] = None, method: str = "ring",
                     load_balance: LoadBalance = "headtail", *, async_op: bool = False):
    """Context manager: CP attention over the 1-D ``mesh`` inside the block.

    Args:
        mesh: the 1-D CP mesh (slice a multi-dim mesh: ``mesh["cp"]``).
        buffers: tensors to shard in place (input ids, labels, position ids, masks ...).
        buffer_seq_dims: the sequence dim of each buffer (same length as ``buffers``).
        no_restore_buffers: buffers (by identity) left sharded on exit.
        method: ``"ring"`` (P2P K/V rotation), ``"allgather"`` (gather K/V), ``"alltoall"`` (Ulysses:
            sequence <-> heads) or ``"auto"`` (:func:`hyper_parallel.cp.select.select_method`).
        load_balance: ``"headtail"`` (default, zig-zag), ``None``/``"none"`` (contiguous) or a
            :class:`~hyper_parallel.cp.load_balance.LoadBalancer` such as ``PerDocumentHeadTail(doc_lengths)``.
        async_op: post each block's exchange before computing the previous one (ring, allgather), as
            :class:`~hyper_parallel.cp.style.AsyncContextParallel`.

    Inside the block q, k, v given to SDPA must be this rank's shards ``[B, H, S/c, E]`` in the
    same layout as the buffers (e.g. computed from the sharded input ids); position ids for RoPE
    must come from a sharded buffer. Sequence lengths not divisible by the layout's multiple
    (``2c`` for head-tail) raise ``SequenceLengthError`` (no silent padding).
    """
    impl = _impl(mesh)
    if impl.__name__.endswith("_mindspore.attention"):
        if async_op:
            raise ValueError("context_parallel(async_op=True): MindSpore's CPU collectives are synchronous; "
                             "nothing to overlap (use async_op=False)")
        return impl.context_parallel(mesh, buffers, buffer_seq_dims, no_restore_buffers, method, load_balance)
    return impl.context_parallel(mesh, buffers, buffer_seq_dims, no_restore_buffers, method, load_balance,
                                 async_op=async_op)


def context_parallel_shard(mesh, buffers: Sequence[Any], seq_dims: Sequence[int],
                           load_balance: LoadBalance = "headtail") -> List[Any]:
    """This rank's CP shards of ``buffers`` (new tensors; differentiable)."""
    return _impl(mesh).context_parallel_shard(mesh, buffers, seq_dims, load_balance)


def context_parallel_unshard(mesh, buffers: Sequence[Any], seq_dims: Sequence[int],
                             load_balance: LoadBalance = "headtail") -> List[Any]:
    """Gather CP shards back into whole tensors in the original order (differentiable)."""
    return _impl(mesh).context_parallel_unshard(mesh, buffers, seq_dims, load_balance)
