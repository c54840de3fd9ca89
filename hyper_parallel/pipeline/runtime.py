# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The schedule runtime (backend-free): executes one rank's validated list on its stage objects.

Everything framework-specific sits behind the stage objects (``_torch/stage.py``,
``_mindspore/stage.py``) and the platform's ``batch_isend_irecv``; this module only walks the list.

Communication: consecutive SEND/RECV steps of the list form one *comm point*; at a comm point the
runtime posts, for each neighbour rank in ascending order, one ``batch_isend_irecv`` with all ops
for that neighbour (a fixed global order: no two ranks can both sit in a send). Receives are waited
right before the compute step that consumes them, sends at the end of the step (their buffers are
kept alive until then). With ``overlap_p2p`` the receives of the comm point after the next compute
step are posted before that compute step runs, so the transfer overlaps the computation. A backend
that can only rendezvous (MindSpore's emulated point-to-point) runs every op on its own at its
position in the list: the validator's proof covers that order too. A comm point's ops for one
neighbour travel in one ``batch_isend_irecv``, sends and receives together (duplex); ``comm_stats``
counts the batches and the duplex ones.

Two compute threads (``overlap_b_f``): an ``OVERLAP_F_B`` step runs its backward on a second
(persistent) thread while the forward runs on the calling thread; both finish before the next step.
The backward thread starts with the stage's ``enter_backward_lane`` (torch: its collectives travel on
twin groups, ``platform/torch/lanes.py``, so an expert-parallel all-to-all of the backward never
interleaves with the forward's on one group), and all transfers are posted by the calling thread.
Each half reads and writes only its own microbatch's state (received tensors, stage caches keyed by
microbatch), and the two are independent by construction (``pair_forward_backward`` pairs only
different microbatches), so the result equals running them one after the other. Without the knob
the pair runs forward, then backward, on one thread; so does a pair whose halves are on one stage
whose hooks keep state (``has_hook_state``: FSDP modules, which gather and free parameters in their
hooks: two threads would race on that state and issue different collectives on different ranks).

Loss scaling (the one rule): with ``scale_grads=True`` (default) each microbatch loss is divided by
``n_microbatches`` before its backward, gradients are never rescaled afterwards, and several
``step()`` calls without ``zero_grad`` sum their gradients (gradient accumulation).
"""
from __future__ import annotations

import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any, Dict, List, Optional, Sequence, Tuple

from hyper_parallel.pipeline.lowering import peer_of
from hyper_parallel.pipeline.steps import MetaStep, MetaStepType

__all__ = ["RankRunner", "StepContext"]

T = MetaStepType


class StepContext:  # pylint: disable=too-many-instance-attributes
    """Per-step state: microbatch inputs and targets, losses, pending transfers, received tensors."""

    def __init__(self, arg_mbs, kwarg_mbs, target_mbs, losses: Optional[list], scale: float) -> None:
        self.arg_mbs = arg_mbs
        self.kwarg_mbs = kwarg_mbs
        self.target_mbs = target_mbs
        self.losses = losses
        self.scale = scale
        self.recv_handles: Dict[Tuple[int, MetaStepType, int], list] = {}
        self.send_handles: List[Any] = []
        self.send_keepalive: List[Any] = []
        self.local_fwd: Dict[Tuple[int, int], tuple] = {}   # (consumer stage, mb) -> inputs from a local stage
        self.local_bwd: Dict[Tuple[int, int], tuple] = {}   # (consumer stage, mb) -> grads from a local stage
        self.mb_losses: Dict[int, Any] = {}


class RankRunner:
    """Executes ``steps`` (this rank's lowered list) on ``stages`` (stage index -> stage object)."""

    def __init__(self, steps: Sequence[MetaStep], stages: Dict[int, Any], stage_to_rank: Sequence[int],
                 my_rank: int, *, overlap_p2p: bool, rendezvous: bool, overlap_b_f: bool = False) -> None:
        self.steps = list(steps)
        self.stages = stages
        self.stage_to_rank = tuple(stage_to_rank)
        self.my_rank = my_rank
        self.overlap_p2p = overlap_p2p and not rendezvous
        self.rendezvous = rendezvous
        self.points = self._comm_points()
        self.overlap_b_f = overlap_b_f
        self.record = False
        self.timeline: List[Tuple[float, float, MetaStep]] = []
        #: (start, end, leaf step, thread name) of every forward/backward leaf of the last step (``record``)
        self.leaf_timeline: List[Tuple[float, float, MetaStep, str]] = []
        #: batch_isend_irecv calls of the last step, and those holding both a send and a receive
        self.comm_stats: Dict[str, int] = {"batches": 0, "duplex": 0}
        self._pool: Optional[ThreadPoolExecutor] = None
        self._lock = threading.Lock()

    def close(self) -> None:
        """Stop the backward thread (started on the first overlapped pair); a later step starts it again."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def __del__(self) -> None:
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.shutdown(wait=False)

    # ------------------------------------------------------------------ plan
    def _comm_points(self) -> Dict[int, List[MetaStep]]:
        """Start index -> the consecutive comm steps starting there."""
        points: Dict[int, List[MetaStep]] = {}
        i = 0
        while i < len(self.steps):
            if self.steps[i].is_comm:
                j = i
                while j < len(self.steps) and self.steps[j].is_comm:
                    j += 1
                points[i] = self.steps[i:j]
                i = j
            else:
                i += 1
        return points

    # ------------------------------------------------------------------ run
    def run(self, ctx: StepContext) -> None:
        """Execute the whole list once."""
        posted_recvs: set = set()
        self.timeline = []
        self.leaf_timeline = []
        self.comm_stats = {"batches": 0, "duplex": 0}
        i = 0
        n = len(self.steps)
        while i < n:
            a = self.steps[i]
            if i in self.points:
                group = self.points[i]
                self._post(group, ctx, posted_recvs)
                i += len(group)
                continue
            if self.overlap_p2p and a.is_compute:
                self._prefetch_after(i, ctx, posted_recvs)
            if self.record and a.is_compute:
                start = time.perf_counter()
                self._execute(a, ctx)
                self.timeline.append((start, time.perf_counter(), a))
            else:
                self._execute(a, ctx)
            i += 1
        for h in ctx.send_handles:
            h.wait()
        ctx.send_handles.clear()
        ctx.send_keepalive.clear()

    def _prefetch_after(self, i: int, ctx: StepContext, posted: set) -> None:
        """Post the receives of the comm point that follows compute step ``i`` (and its neighbours)."""
        j = i + 1
        while j < len(self.steps) and not self.steps[j].is_comm:
            if self.steps[j].is_compute:
                return
            j += 1
        if j in self.points:
            self._post([a for a in self.points[j] if a.type in (T.RECV_F, T.RECV_B)], ctx, posted)

    def _post(self, group: Sequence[MetaStep], ctx: StepContext, posted: set) -> None:
        by_peer: Dict[int, List[MetaStep]] = defaultdict(list)
        for a in group:
            if a.type in (T.RECV_F, T.RECV_B) and a in posted:
                continue
            by_peer[peer_of(a, self.stage_to_rank)].append(a)
        for peer in sorted(by_peer):
            if self.rendezvous:
                for a in by_peer[peer]:
                    self._issue([a], peer, ctx, posted)
            else:
                self._issue(by_peer[peer], peer, ctx, posted)

    def _issue(self, steps: Sequence[MetaStep], peer: int, ctx: StepContext, posted: set) -> None:
        ops, owners = [], []
        for a in steps:
            stage = self.stages[a.stage_index]
            mb = a.microbatch_index
            if a.type is T.SEND_F:
                new = stage.send_ops("fwd", mb, peer)
            elif a.type is T.SEND_B:
                new = stage.send_ops("bwd", mb, peer)
            elif a.type is T.RECV_F:
                new = stage.recv_ops("fwd", mb, peer)
                posted.add(a)
            else:
                new = stage.recv_ops("bwd", mb, peer)
                posted.add(a)
            ops += new
            owners += [a] * len(new)
        if not ops:
            return
        handles = self.stages[steps[0].stage_index].platform.batch_isend_irecv(ops)
        self.comm_stats["batches"] += 1
        if len({op.op for op in ops}) == 2:
            self.comm_stats["duplex"] += 1
        for a, op, h in zip(owners, ops, handles):
            if op.op == "send":
                ctx.send_handles.append(h)
                ctx.send_keepalive.append(op.tensor)
            else:
                ctx.recv_handles.setdefault((a.stage_index, a.type, a.microbatch_index), []).append(h)

    # ------------------------------------------------------------------ compute
    def _execute(self, a: MetaStep, ctx: StepContext) -> None:
        kind = a.type
        if kind in (T.F, T.B, T.I):
            self._leaf(a, ctx)
        elif kind is T.W:
            self.stages[a.stage_index].backward_weight_one_chunk(a.microbatch_index)
        elif kind is T.OVERLAP_F_B:
            self._pair(a, ctx)
        elif kind is T.REDUCE_GRAD:
            self.stages[a.stage_index].reduce_grad()
        elif kind is T.UNSHARD:
            self.stages[a.stage_index].unshard()
        elif kind is T.RESHARD:
            self.stages[a.stage_index].reshard()
        else:
            raise RuntimeError(f"pipeline runtime: unexpected step {a} outside a comm point")

    def _leaf(self, a: MetaStep, ctx: StepContext) -> None:
        """Run one forward or backward step (timed into ``leaf_timeline`` when recording)."""
        start = time.perf_counter() if self.record else 0.0
        if a.type is T.F:
            self._forward(a.stage_index, a.microbatch_index, ctx)
        else:
            self._backward(a.stage_index, a.microbatch_index, a.type is T.I, ctx)
        if self.record:
            with self._lock:
                self.leaf_timeline.append((start, time.perf_counter(), a, threading.current_thread().name))

    def _pair(self, a: MetaStep, ctx: StepContext) -> None:
        """An ``OVERLAP_F_B`` step: the backward on the second thread during the forward (``overlap_b_f``),
        else forward then backward."""
        fwd, bwd = a.sub_steps
        if not self.overlap_b_f or (fwd.stage_index == bwd.stage_index
                                    and getattr(self.stages[fwd.stage_index], "has_hook_state", False)):
            # one stage whose hooks keep state (FSDP's gathered / resharded parameters, gathered by hooks when
            # the runtime does not): two threads would race on it, and with it on the collectives it issues
            self._leaf(fwd, ctx)
            self._leaf(bwd, ctx)
            return
        if self._pool is None:
            init = getattr(next(iter(self.stages.values())), "enter_backward_lane", None)
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hp-pp-backward", initializer=init)
        pending = self._pool.submit(self._leaf, bwd, ctx)
        try:
            self._leaf(fwd, ctx)
        except BaseException:
            wait([pending])  # never leave the backward running behind an error; the forward's error wins
            raise
        pending.result()  # re-raises the backward's error

    def _received(self, key, ctx: StepContext) -> Optional[list]:
        handles = ctx.recv_handles.pop(key, None)
        if handles is None:
            return None
        return [h.wait() for h in handles]

    def _forward(self, s: int, mb: int, ctx: StepContext) -> None:
        stage = self.stages[s]
        if stage.is_first:
            args, kwargs = ctx.arg_mbs[mb], ctx.kwarg_mbs[mb]
        else:
            local = ctx.local_fwd.pop((s, mb), None)
            if local is None:
                local = stage.unpack_recv("fwd", mb, self._received((s, T.RECV_F, mb), ctx))
            args, kwargs = local, ctx.kwarg_mbs[mb] if stage.pass_kwargs_to_all else {}
        out = stage.forward_one_chunk(mb, args, kwargs)
        if stage.is_last:
            target = ctx.target_mbs[mb] if ctx.target_mbs is not None else None
            stage.compute_loss(mb, out, target, ctx)
        elif self.stage_to_rank[s + 1] == self.my_rank:
            ctx.local_fwd[(s + 1, mb)] = self.stages[s + 1].take_local("fwd", mb, stage.outputs_for_next(mb))

    def _backward(self, s: int, mb: int, input_only: bool, ctx: StepContext) -> None:
        stage = self.stages[s]
        if stage.is_last:
            grads = None
        else:
            grads = ctx.local_bwd.pop((s, mb), None)
            if grads is None:
                grads = stage.unpack_recv("bwd", mb, self._received((s, T.RECV_B, mb), ctx))
        in_grads = stage.backward_one_chunk(mb, grads, input_only=input_only)
        if not stage.is_first and self.stage_to_rank[s - 1] == self.my_rank:
            ctx.local_bwd[(s - 1, mb)] = in_grads
