# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``PipelineStage`` for MindSpore ``nn.Cell`` stages (PyNative), run by the same schedules as torch.

* Forward of a microbatch runs the cell and keeps its inputs. MindSpore's PyNative mode keeps one
  pending differentiation graph at a time, while a pipeline holds several microbatches in flight, so
  the backward recomputes the forward under ``mindspore.vjp`` (inputs and trainable weights) and
  applies it at once — one extra forward per microbatch, as activation recomputation costs; the last
  stage differentiates ``loss_fn(cell(x), target) * scale``. With ``recompute_ahead=True`` a stage that waits for
  an output gradient recomputes that microbatch's forward (builds its ``vjp`` closure) before the blocking
  receive rather than after it: the recompute runs while the next stage computes (the pipeline bubble, as
  RiPipe's recompute schedule), the closure is applied when the gradient arrives. Same values either way.
* Backward feeds the received output gradients to that function; weight gradients accumulate in
  :meth:`grads` (MindSpore parameters carry no ``.grad``) until :meth:`zero_grad`: several ``step()``
  calls sum, as with torch.
* Messages travel over the platform's point-to-point, which MindSpore on CPU emulates by a broadcast
  over the pair group: the runtime issues every op on its own at its position in the validated list.
* Schedules with a split backward (I/W: the zero-bubble family) need torch's graph surgery; binding one
  to a MindSpore stage raises a clear error. GPipe, 1F1B, Interleaved1F1B and LoopedBFS run.
"""
from __future__ import annotations

import pickle
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import mindspore as ms
from mindspore import mint, nn, ops

from hyper_parallel.pipeline import stage_base
from hyper_parallel.pipeline.microbatch import microbatch_sizes
from hyper_parallel.pipeline.schedules import SCHEDULES
from hyper_parallel.pipeline.steps import MetaStepType
from hyper_parallel.platform import get_platform
from hyper_parallel.platform.base import P2POp
from hyper_parallel.platform.mindspore.runtime import replaying

__all__ = ["PipelineStage"]


def _flatten(out: Any, what: str) -> tuple:
    if isinstance(out, ms.Tensor):
        return (out,)
    if isinstance(out, (tuple, list)) and out and all(isinstance(t, ms.Tensor) for t in out):
        return tuple(out)
    raise TypeError(f"{what}: a stage must return a Tensor or a non-empty tuple/list of Tensors, got "
                    f"{type(out).__name__}")


def _meta(t) -> Tuple[Tuple[int, ...], str]:
    return tuple(t.shape), str(t.dtype)


def _zeros(meta):
    shape, dtype = meta
    return ops.zeros(shape, getattr(ms, dtype.lower()) if hasattr(ms, dtype.lower()) else ms.float32)


class PipelineStage(stage_base.PipelineStage):  # pylint: disable=too-many-instance-attributes
    """A MindSpore pipeline stage (see the module docstring); arguments as the torch stage."""

    def __init__(self, submodule: nn.Cell, stage_index: int, num_stages: int, device=None, input_args=None,
                 output_args=None, group=None, recompute_ahead: bool = False, **_unused) -> None:
        del device, input_args, output_args  # shapes are inferred at the first step; CPU/Ascend set by MindSpore
        if not isinstance(submodule, nn.Cell):
            raise TypeError(f"PipelineStage(submodule): expected a mindspore nn.Cell, got {type(submodule).__name__}")
        self.submod = submodule
        self.platform = get_platform("mindspore")
        self.group = group
        self.group_rank = self.platform.get_rank(group)
        self.group_size = self.platform.get_world_size(group)
        self.group_ranks = tuple(self.platform.get_process_group_ranks(group))
        self._handshake(stage_index, num_stages)
        self.stage_index, self.num_stages = stage_index, num_stages
        self.is_first, self.is_last = stage_index == 0, stage_index == num_stages - 1
        self.pass_kwargs_to_all = False
        self.uses_fsdp = False
        # schedule.set_requires_gradient_sync: nothing to defer here (no FSDP, no tied sums); gradients
        # accumulate in self._grads over steps until zero_grad()
        self.requires_gradient_sync = True
        self.weights = self.submod.trainable_params()
        self._grads: List[Optional[ms.Tensor]] = [None] * len(self.weights)
        self.in_meta = self.out_meta = None
        self.stage_to_rank: Tuple[int, ...] = ()
        self.n_microbatches = 0
        self.local_stages: Dict[int, Any] = {}
        self._vjp: Dict[int, Any] = {}
        self.recompute_ahead = bool(recompute_ahead)
        self.recomputed_ahead = 0  # microbatches whose backward closure was built before their gradient arrived
        self._ahead: Dict[int, Any] = {}
        self._in_grads: Dict[int, tuple] = {}
        self._outs: Dict[int, tuple] = {}
        self._outputs: Dict[int, Any] = {}
        self._loss_fn = None
        self._ready = False

    # ------------------------------------------------------------------ setup
    def _gather(self, values: Sequence[int]) -> List[List[int]]:
        t = ms.Tensor(np.array(values, dtype=np.int32))
        out = self.platform.all_gather(t, self.group or self.platform._require(), 0,  # pylint: disable=W0212
                                       [len(values)] * self.group_size, self.group_rank)
        return out.asnumpy().reshape(self.group_size, len(values)).tolist()

    def _handshake(self, stage_index, num_stages) -> None:
        ok = isinstance(stage_index, int) and isinstance(num_stages, int) and num_stages >= 1
        code = 0 if ok and 0 <= stage_index < num_stages else (2 if ok else 1)
        rows = self._gather([code, stage_index if ok else -1, num_stages if ok else -1])
        for rank, (c, s, n) in enumerate(rows):
            if c:
                raise ValueError(f"PipelineStage(stage_index): rank {rank} got stage_index={s}, out of range for "
                                 f"num_stages={n} (expected 0..{n - 1})")
        if len({n for _, _, n in rows}) > 1:
            detail = ", ".join(f"rank {r}: {n}" for r, (_, _, n) in enumerate(rows))
            raise ValueError(f"PipelineStage(num_stages): the ranks disagree on the stage count ({detail})")

    def bind(self, stage_to_rank, n_microbatches, local_stages) -> None:
        """Called by the schedule (refuses split-backward schedules, see the module docstring)."""
        self.stage_to_rank, self.n_microbatches, self.local_stages = tuple(stage_to_rank), n_microbatches, local_stages
        self._ready = False

    def check_schedule(self, schedule) -> None:
        """Refuse a schedule whose backward is split into I and W."""
        kinds = {leaf.type for steps in schedule.compute.values() for a in steps if a is not None
                 for leaf in a.leaves()}
        if MetaStepType.W in kinds:
            raise ValueError(f"{schedule.name}: MindSpore stages run full-backward schedules (GPipe, 1F1B, "
                             "Interleaved1F1B, LoopedBFS); the I/W split of the zero-bubble schedules needs torch")

    def grads(self) -> List[Optional[ms.Tensor]]:
        """Accumulated weight gradients, aligned with ``submodule.trainable_params()``."""
        return list(self._grads)

    def zero_grad(self) -> None:
        """Forget the accumulated weight gradients."""
        self._grads = [None] * len(self.weights)

    # ------------------------------------------------------------------ step preparation
    def _split_all(self, args, target, m: int):
        """(status, size, arg microbatches, target microbatches); status 1/2 = input/target not splittable."""
        arg_mbs, target_mbs = [()] * m, None
        status, size = 0, 0
        try:
            if 0 in self.local_stages:
                status, size = 1, int(args[0].shape[0])
                arg_mbs = list(zip(*[self._split(a, m, f"input argument {i}") for i, a in enumerate(args)]))
            if self.num_stages - 1 in self.local_stages and target is not None:
                status, size = 2, int(target.shape[0])
                target_mbs = self._split(target, m, "target")
            status, size = 0, 0
        except ValueError:
            pass
        return status, size, arg_mbs, target_mbs

    def prepare_step(self, schedule, args, kwargs, target, losses):
        """Split inputs/targets, agree on the step with every rank, infer shapes once (kwargs are not split
        on MindSpore stages: pass positional inputs)."""
        self.check_schedule(schedule.schedule)
        m = self.n_microbatches
        if kwargs:
            raise TypeError(f"{type(schedule).__name__}.step: MindSpore stages take positional inputs only, got "
                            f"keywords {sorted(kwargs)}")
        status, size, arg_mbs, target_mbs = self._split_all(args, target, m)
        kwarg_mbs = [{}] * m
        if losses is not None and not isinstance(losses, list):
            raise TypeError("step(losses=...): expected a list")
        code = sorted(SCHEDULES).index(schedule.schedule.name) if schedule.schedule.name in SCHEDULES else 99
        rows = self._gather([status, size, code, m])
        for rank, (st, sz, _c, mm) in enumerate(rows):
            if st:
                what = "stage 0's input batch" if st == 1 else "the last stage's target"
                raise ValueError(f"{type(schedule).__name__}.step: rank {rank} rejected {what}: batch size {sz} is not "
                                 f"divisible by n_microbatches={mm}")
        if len({(c, mm) for _, _, c, mm in rows}) > 1:
            raise ValueError(f"{type(schedule).__name__}.step: the ranks run different schedules or microbatch counts")
        if not self._ready:
            for idx in sorted(self.local_stages):
                self.local_stages[idx]._infer(arg_mbs[0])  # pylint: disable=protected-access
            self._ready = True
        return arg_mbs, kwarg_mbs, target_mbs

    @staticmethod
    def _split(t, m: int, what: str):
        sizes = microbatch_sizes(int(t.shape[0]), m, f"{what} (dim 0)", even=True)
        return list(mint.split(t, sizes, 0))

    def _infer(self, args0) -> None:
        if self.is_first:
            ins = tuple(args0)
        else:
            prev = self.local_stages.get(self.stage_index - 1)
            self.in_meta = prev.out_meta if prev is not None else self._recv_object(self._peer(self.stage_index - 1))
            ins = tuple(_zeros(m) for m in self.in_meta)
        with replaying():  # placeholder inputs: no statistics
            out = self.submod(*ins)
        self.out_meta = tuple(_meta(t) for t in _flatten(out, f"stage {self.stage_index} forward"))
        nxt = self.stage_index + 1
        if not self.is_last and self.stage_to_rank[nxt] != self.stage_to_rank[self.stage_index]:
            self._send_object(self.out_meta, self._peer(nxt))

    def _peer(self, stage: int) -> int:
        return self.group_ranks[self.stage_to_rank[stage]]

    def _send_object(self, obj, peer: int) -> None:
        data = np.frombuffer(pickle.dumps(obj), dtype=np.uint8).astype(np.int32)
        for t in (ms.Tensor(np.array([data.size], dtype=np.int32)), ms.Tensor(data)):
            self.platform.batch_isend_irecv([P2POp("send", t, peer)])[0].wait()

    def _recv_object(self, peer: int):
        size = self.platform.batch_isend_irecv([P2POp("recv", ops.zeros((1,), ms.int32), peer)])[0].wait()
        data = self.platform.batch_isend_irecv([P2POp("recv", ops.zeros((int(size.asnumpy()[0]),), ms.int32),
                                                      peer)])[0].wait()
        return pickle.loads(data.asnumpy().astype(np.uint8).tobytes())

    # ------------------------------------------------------------------ per step
    def begin_step(self, loss_fn) -> None:
        """Reset per-step state."""
        self._loss_fn = loss_fn
        self._outputs.clear()

    def end_step(self) -> None:
        """Drop per-step state."""
        self._vjp.clear()
        self._ahead.clear()
        self._in_grads.clear()
        self._outs.clear()

    def forward_one_chunk(self, mb: int, args, kwargs):
        """Forward of ``mb`` keeping its backward function (the last stage's is built by the loss)."""
        args = tuple(args)
        out = self.submod(*args, **kwargs)
        self._vjp[mb] = (args, kwargs, None)
        self._outs[mb] = _flatten(out, f"stage {self.stage_index} forward")
        if self.is_last:
            self._outputs[mb] = out
        return out

    def compute_loss(self, mb: int, out, target, ctx) -> None:
        """Last stage: the microbatch loss (recorded unscaled); backward differentiates it times ``scale``."""
        if self._loss_fn is None:
            return
        ctx.mb_losses[mb] = self._loss_fn(out, target)
        args, kwargs, _ = self._vjp[mb]
        self._vjp[mb] = (args, kwargs, (target, ctx.scale))

    def _closure(self, mb: int):
        """Recompute ``mb`` 's forward under ``mindspore.vjp``: its backward function (no statistics taken)."""
        args, kwargs, loss = self._vjp[mb]
        if self.is_last and loss is None:
            raise RuntimeError(f"stage {self.stage_index}: backward on the last stage needs a loss_fn and a target")
        with replaying():  # the recomputed forward: the microbatch's statistics were taken by its forward
            if self.is_last:
                target, scale = loss
                loss_fn = self._loss_fn
                return ms.vjp(lambda *xs: loss_fn(self.submod(*xs, **kwargs), target) * scale, *args,
                              weights=self.weights)[1]
            return ms.vjp(lambda *xs: self.submod(*xs, **kwargs), *args, weights=self.weights)[1]

    def backward_one_chunk(self, mb: int, grads, *, input_only: bool = False):
        """Full backward of ``mb`` (``input_only`` is refused at bind time)."""
        del input_only
        fn = self._ahead.pop(mb, None)
        if fn is None:
            fn = self._closure(mb)
        self._vjp.pop(mb)
        if self.is_last:
            cot = ms.Tensor(1.0, ms.float32)
        else:
            outs = self._outs[mb]
            filled = [g if g is not None else ops.zeros_like(o) for g, o in zip(grads, outs)]
            cot = filled[0] if len(outs) == 1 else tuple(filled)
        in_grads, w_grads = fn(cot)
        for k, g in enumerate(w_grads):
            self._grads[k] = g if self._grads[k] is None else self._grads[k] + g
        self._in_grads[mb] = tuple(in_grads)
        self._outs.pop(mb, None)
        return self._in_grads[mb]

    def backward_weight_one_chunk(self, mb: int) -> None:
        """Not reached: split-backward schedules are refused at bind time."""
        raise ValueError(f"stage {self.stage_index}: microbatch {mb}: W steps need the torch runtime")

    def reduce_grad(self) -> None:
        """Nothing to reduce (no data parallelism on MindSpore stages here)."""

    def unshard(self) -> None:
        """No FSDP on MindSpore stages."""

    def reshard(self) -> None:
        """No FSDP on MindSpore stages."""

    # ------------------------------------------------------------------ messages
    def send_ops(self, direction: str, mb: int, peer_rank: int) -> List[P2POp]:
        """Forward outputs or input gradients of ``mb`` as send ops."""
        peer = self.group_ranks[peer_rank]
        tensors = self._outs[mb] if direction == "fwd" else self._in_grads.pop(mb)
        return [P2POp("send", t, peer) for t in tensors]

    def recv_ops(self, direction: str, mb: int, peer_rank: int) -> List[P2POp]:
        """Receive buffers for inputs (``fwd``) or output gradients (``bwd``) of ``mb`` (with ``recompute_ahead``,
        a ``bwd`` receive first recomputes ``mb`` 's forward: the runtime asks right before it blocks on it)."""
        if direction == "bwd" and self.recompute_ahead and mb in self._vjp and mb not in self._ahead:
            self._ahead[mb] = self._closure(mb)
            self.recomputed_ahead += 1
        peer = self.group_ranks[peer_rank]
        metas = self.in_meta if direction == "fwd" else self.out_meta
        return [P2POp("recv", _zeros(m), peer) for m in metas]

    def unpack_recv(self, direction: str, mb: int, tensors):
        """Received tensors as inputs / output gradients."""
        del direction, mb
        return tuple(tensors)

    def outputs_for_next(self, mb: int):
        """Forward outputs of ``mb`` for a stage on the same rank."""
        return self._outs[mb]

    def take_local(self, direction: str, mb: int, tensors):
        """Outputs of the previous stage on this rank as this stage's inputs."""
        del direction, mb
        return tuple(tensors)

    def merge_outputs(self, merge_spec=None):
        """The last stage's outputs of every microbatch, concatenated along dim 0."""
        del merge_spec
        chunks = [_flatten(self._outputs[k], "output")[0] for k in sorted(self._outputs)]
        return mint.cat(chunks, 0) if chunks else None
