# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Context parallelism: ring, all-gather-KV and all-to-all (Ulysses) attention, causal load
balancing, async overlap, CP x TP, and DeepSeek sparse attention (DSA) under CP. See ``docs/cp.md``.

``import hyper_parallel.cp`` imports no framework: the index maps, merge math, method selection
and byte formulas are pure Python; everything that needs torch loads on first use.
"""
from __future__ import annotations

from hyper_parallel._lazy import lazy_exports

from hyper_parallel.cp.api import context_parallel, context_parallel_shard, context_parallel_unshard
from hyper_parallel.cp.load_balance import (Contiguous, HeadTail, LoadBalancer, PerDocumentHeadTail, SeqLayout,
                                            SequenceLengthError)
from hyper_parallel.cp.select import select_method
from hyper_parallel.cp.style import (AsyncContextParallel, AsyncDSASparseAttentionContextParallel, ContextParallel,
                                     DSAIndexerContextParallel, DSAIndexerLossContextParallel,
                                     DSASparseAttentionContextParallel, LinearAttentionContextParallel)

_LAZY = {
    "comm_stats": "hyper_parallel.cp._torch.comm",
    "record_steps": "hyper_parallel.cp._torch.attention",
    "dsa_index_scores": "hyper_parallel.cp._torch.dsa",
    "dsa_topk": "hyper_parallel.cp._torch.dsa",
    "dsa_sparse_attention": "hyper_parallel.cp._torch.dsa",
    "dsa_indexer_loss": "hyper_parallel.cp._torch.dsa",
    "DSAAttention": "hyper_parallel.cp._torch.dsa",
}

__all__ = ["context_parallel", "context_parallel_shard", "context_parallel_unshard", "ContextParallel",
           "AsyncContextParallel", "DSAIndexerContextParallel", "DSAIndexerLossContextParallel",
           "DSASparseAttentionContextParallel", "AsyncDSASparseAttentionContextParallel",
           "LinearAttentionContextParallel", "LoadBalancer",
           "Contiguous", "HeadTail", "PerDocumentHeadTail", "SeqLayout", "SequenceLengthError", "select_method",
           *sorted(_LAZY)]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
