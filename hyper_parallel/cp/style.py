# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Context-parallel module styles for ``parallelize_module``.

``parallelize_module(model, cp_mesh, {"model.layers.*.self_attn": ContextParallel()})`` makes every
``F.scaled_dot_product_attention`` call inside those modules' forward run as CP attention over the
1-D ``cp_mesh`` (the module code is unchanged). The module's inputs must already be this rank's
sequence shards in the style's layout (``context_parallel_shard`` or ``context_parallel``'s buffers).

* :class:`ContextParallel` (``method``: ring / allgather / alltoall / auto; ``load_balance``).
* :class:`AsyncContextParallel`: the next block's exchange is posted before the current block is
  computed (ring: every step, forward and backward; allgather: the own block is computed while the
  gather is in flight).
* DSA (DeepSeek sparse attention): :class:`DSAIndexerContextParallel` (indexer scores of local
  queries against gathered indexer keys), :class:`DSAIndexerLossContextParallel` (the indexer's KL
  loss), :class:`DSASparseAttentionContextParallel` / :class:`AsyncDSASparseAttentionContextParallel`
  (sparse attention over the selected keys of gathered K/V; the async one overlaps the V gather
  with the score computation). Each is ``ContextParallel`` restricted to those ops.
* :class:`LinearAttentionContextParallel`: a linear-attention (Gated DeltaNet) module over a contiguous
  split: the conv halo and the recurrent state pass from rank to rank (``hyper_parallel.cp._torch.linear``).
"""
from __future__ import annotations

from typing import Optional, Sequence, Union

from hyper_parallel.cp.load_balance import LoadBalancer, make_load_balancer
from hyper_parallel.tp.style import ParallelStyle

__all__ = ["ContextParallel", "AsyncContextParallel", "LinearAttentionContextParallel", "DSAIndexerContextParallel",
           "DSAIndexerLossContextParallel",
           "DSASparseAttentionContextParallel", "AsyncDSASparseAttentionContextParallel"]

_METHODS = ("ring", "allgather", "alltoall", "auto")


class ContextParallel(ParallelStyle):
    """CP attention for the SDPA / DSA calls inside a module's forward."""

    is_async = False
    default_ops: Optional[Sequence[str]] = None

    def __init__(self, *, method: str = "ring", load_balance: Union[None, str, LoadBalancer] = "headtail",
                 ops: Optional[Sequence[str]] = None, impl: Optional[str] = None) -> None:
        if method not in _METHODS:
            raise ValueError(f"{type(self).__name__}(method={method!r}): expected one of {_METHODS}")
        if self.is_async and method == "alltoall":
            raise ValueError(f"{type(self).__name__}: method 'alltoall' has no asynchronous variant; use 'ring' or "
                             "'allgather'")
        make_load_balancer(load_balance)  # validate now, not at the first forward
        self.method = method
        self.load_balance = load_balance
        self.ops = tuple(ops) if ops is not None else self.default_ops
        self.impl = impl

    def apply(self, module, device_mesh):
        """Hook ``module``'s forward (see the module docstring); returns ``module``."""
        if getattr(device_mesh, "platform", None) == "mindspore":
            raise RuntimeError(f"{type(self).__name__}: the CP module styles are implemented for the torch "
                               "backend only; on MindSpore use hyper_parallel.cp.context_parallel (docs/cp.md, "
                               "'Backends')")
        from hyper_parallel.cp._torch.context import install_style
        # importing the DSA module registers its ops with the CP mode
        import hyper_parallel.cp._torch.dsa  # pylint: disable=unused-import
        install_style(module, device_mesh, self)
        return module

    def __repr__(self) -> str:
        return f"{type(self).__name__}(method={self.method!r}, load_balance={self.load_balance!r})"


class AsyncContextParallel(ContextParallel):
    """:class:`ContextParallel` with the next block's exchange overlapping the current block's compute."""

    is_async = True


class DSAIndexerContextParallel(ContextParallel):
    """DSA indexer scores of local queries against all (gathered) indexer keys."""

    default_ops = ("dsa_index_scores",)

    def __init__(self, *, load_balance: Union[None, str, LoadBalancer] = "headtail") -> None:
        super().__init__(method="allgather", load_balance=load_balance)


class DSAIndexerLossContextParallel(ContextParallel):
    """The DSA indexer's KL loss for local queries (keys gathered)."""

    default_ops = ("dsa_indexer_loss",)

    def __init__(self, *, load_balance: Union[None, str, LoadBalancer] = "headtail") -> None:
        super().__init__(method="allgather", load_balance=load_balance)


class DSASparseAttentionContextParallel(ContextParallel):
    """DSA sparse attention: local queries over their selected keys of the gathered K/V."""

    default_ops = ("dsa_sparse_attention",)

    def __init__(self, *, load_balance: Union[None, str, LoadBalancer] = "headtail") -> None:
        super().__init__(method="allgather", load_balance=load_balance)


class AsyncDSASparseAttentionContextParallel(DSASparseAttentionContextParallel):
    """:class:`DSASparseAttentionContextParallel` with the V gather overlapping the score computation."""

    is_async = True


class LinearAttentionContextParallel(ParallelStyle):
    """CP of a linear-attention module that has a ``context_parallel`` hook (Qwen3.5's Gated DeltaNet): the
    sequence is split contiguously (shard the inputs with ``load_balance=None``); each rank runs its chunks
    with the previous rank's recurrent state and conv halo and passes its own on (see
    ``hyper_parallel.cp._torch.linear``)."""

    def apply(self, module, device_mesh):
        """Set ``module.context_parallel``; returns ``module``."""
        if getattr(device_mesh, "platform", None) == "mindspore":
            raise RuntimeError("LinearAttentionContextParallel: context parallelism is implemented for the torch "
                               "backend only (docs/cp.md, 'Backends')")
        if not hasattr(module, "context_parallel"):
            raise TypeError(f"LinearAttentionContextParallel: {type(module).__name__} has no context_parallel hook "
                            "(a linear-attention module such as Qwen3.5's Gated DeltaNet)")
        from hyper_parallel.cp._torch.linear import LinearAttentionCP
        module.context_parallel = LinearAttentionCP(device_mesh.get_group())
        return module

    def __repr__(self) -> str:
        return "LinearAttentionContextParallel()"
