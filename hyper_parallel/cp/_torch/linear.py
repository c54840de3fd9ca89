# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Context parallelism of linear-attention (Gated DeltaNet) layers: state passing over a contiguous split.

The sequence is split contiguously over the CP ranks (rank ``r`` holds the ``r``-th block). A Gated DeltaNet
layer needs two things from the rank before it:

* the **conv halo**: the last ``kernel - 1`` pre-conv q/k/v tokens of the previous block (zeros on rank 0),
  exchanged by every rank at once (a shift to the next rank; its backward shifts the gradient back);
* the **recurrent state** ``[batch, value_heads, d_k, d_v]`` (fp32) the previous block ends with: rank ``r``
  receives it from ``r - 1`` and sends its own final state to ``r + 1``; the backward sends the state
  gradient the other way. This hand-off is serial (``CP - 1`` hops on the critical path), but everything of the
  chunked rule that does not depend on the incoming state (the UT transform, the per-chunk ``(M, B)`` terms,
  the intra-chunk attention: most of the work) runs before the rank waits for it, and the halo exchange
  overlaps the previous rank's layer.

Packed documents: a row whose first token starts a document (position 0) takes zeros for both; a document
that ends inside the previous block's tail contributes no halo tokens (``DocumentLayout.tail_keep``).

Sends are posted non-blocking and completed later (at the next exchange), so only receives block and the
ranks' dependencies stay acyclic (forward: r waits for r - 1; backward: r waits for r + 1).
"""
from __future__ import annotations

from typing import Any, List, Sequence

import torch
import torch.distributed as dist

__all__ = ["LinearAttentionCP"]

_TAG_HALO, _TAG_HALO_GRAD, _TAG_STATE, _TAG_STATE_GRAD = 31, 32, 33, 34


class LinearAttentionCP:
    """The CP hooks a Gated DeltaNet module calls (``module.context_parallel``): :meth:`halos` and
    :meth:`delta_rule`, over the process ``group`` (ranks in sequence order)."""

    def __init__(self, group: Any) -> None:
        self.group = group
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)
        self.prev = dist.get_global_rank(group, self.rank - 1) if self.rank > 0 else None
        self.next = dist.get_global_rank(group, self.rank + 1) if self.rank < self.size - 1 else None
        self._pending: List[Any] = []

    def send(self, tensor: torch.Tensor, dst: int, tag: int) -> None:
        """Post a send to global rank ``dst``; it completes at a later :meth:`flush`."""
        tensor = tensor.detach().contiguous()
        self._pending.append((dist.isend(tensor, dst, group=self.group, tag=tag), tensor))

    def recv(self, shape: Sequence[int], dtype, device, src: int, tag: int) -> torch.Tensor:
        """Receive a tensor from global rank ``src`` (blocking)."""
        buf = torch.empty(tuple(shape), dtype=dtype, device=device)
        dist.recv(buf, src, group=self.group, tag=tag)
        return buf

    def flush(self) -> None:
        """Wait for every posted send."""
        pending, self._pending = self._pending, []
        for work, _ in pending:
            work.wait()

    def _continues(self, layout) -> torch.Tensor:
        """Per row: does its first token continue the previous block's document (without positions: every row
        continues on ranks after the first)?"""
        if layout.continues is not None:
            return layout.continues
        return torch.full((layout.shape[0],), self.rank > 0, dtype=torch.bool)

    def halos(self, pre: List[torch.Tensor], layout, width: int) -> List[torch.Tensor]:
        """The previous block's last ``width`` tokens of each pre-conv tensor in ``pre`` (``[batch, seq, c]``),
        zeros where the row starts a document (rank 0 included)."""
        if width == 0:
            return [None] * len(pre)
        if pre[0].shape[1] < width:
            raise ValueError(f"linear-attention context parallel: each rank needs at least {width} tokens (the conv "
                             f"halo), got {pre[0].shape[1]}")
        keep = layout.tail_keep(width).unsqueeze(-1)
        tails = torch.cat([t[:, -width:] * keep.to(t.dtype) for t in pre], dim=-1)
        halo = _Shift.apply(tails, self)
        cont = self._continues(layout).to(halo.dtype)[:, None, None]
        return list((halo * cont).split([t.shape[-1] for t in pre], dim=-1))

    def delta_rule(self, rule, q, k, v, g, beta, layout, *, chunk_size: int, anchor: torch.Tensor):
        """``rule`` (``chunk_gated_delta_rule``) on this block with the previous block's final state as the
        initial state of each row's first segment; sends this block's final state on. Returns the output."""
        shape = (layout.shape[0], v.shape[2], k.shape[-1], v.shape[-1])
        cont = self._continues(layout).to(torch.float32)[:, None, None, None]

        def incoming():  # called by the rule after its chunk-parallel work
            return layout.rows_to_first_segments(_RecvState.apply(anchor, shape, self) * cont)

        out, final = rule(q, k, v, g, beta, chunk_size=chunk_size, initial_state=incoming, output_final_state=True,
                          use_qk_l2norm_in_kernel=True)
        return _SendState.apply(layout.last_segments_to_rows(final), out, self)


class _Shift(torch.autograd.Function):
    """Forward: send ``x`` to the next rank, return the previous rank's (zeros on rank 0). Backward: the
    reverse shift of the gradient."""

    @staticmethod
    def forward(ctx, x, cp):  # pylint: disable=arguments-differ
        """Shift forward."""
        ctx.cp = cp
        cp.flush()
        if cp.next is not None:
            cp.send(x, cp.next, _TAG_HALO)
        if cp.prev is None:
            return torch.zeros_like(x)
        return cp.recv(x.shape, x.dtype, x.device, cp.prev, _TAG_HALO)

    @staticmethod
    def backward(ctx, grad):  # pylint: disable=arguments-differ
        """Shift the gradient back."""
        cp = ctx.cp
        if cp.prev is not None:
            cp.send(grad, cp.prev, _TAG_HALO_GRAD)
        if cp.next is None:
            return torch.zeros_like(grad), None
        return cp.recv(grad.shape, grad.dtype, grad.device, cp.next, _TAG_HALO_GRAD), None


class _RecvState(torch.autograd.Function):
    """Forward: the previous rank's final state (zeros on rank 0); backward: its gradient goes back there.
    ``anchor`` (any tensor of the graph) only places the node in the graph."""

    @staticmethod
    def forward(ctx, anchor, shape, cp):  # pylint: disable=arguments-differ
        """Receive the state."""
        ctx.cp = cp
        if cp.prev is None:  # a plain tensor even when the anchor is a DTensor (TP x CP with sequence parallel)
            return torch.zeros(shape, dtype=torch.float32, device=anchor.device)
        return cp.recv(shape, torch.float32, anchor.device, cp.prev, _TAG_STATE)

    @staticmethod
    def backward(ctx, grad):  # pylint: disable=arguments-differ
        """Send the state gradient back."""
        cp = ctx.cp
        if cp.prev is not None:
            cp.send(grad.float(), cp.prev, _TAG_STATE_GRAD)
        return None, None, None


class _SendState(torch.autograd.Function):
    """Forward: send ``final`` to the next rank and return ``out`` unchanged; backward: receive the gradient of
    ``final`` from the next rank (zeros on the last rank)."""

    @staticmethod
    def forward(ctx, final, out, cp):  # pylint: disable=arguments-differ
        """Send the final state on."""
        ctx.cp = cp
        ctx.meta = (final.shape, final.dtype, final.device)
        if cp.next is not None:
            cp.send(final, cp.next, _TAG_STATE)
        return out.view_as(out)

    @staticmethod
    def backward(ctx, grad_out):  # pylint: disable=arguments-differ
        """Receive the final state's gradient."""
        cp = ctx.cp
        shape, dtype, device = ctx.meta
        if cp.next is None:
            return torch.zeros(shape, dtype=dtype, device=device), grad_out, None
        return cp.recv(shape, dtype, device, cp.next, _TAG_STATE_GRAD), grad_out, None
