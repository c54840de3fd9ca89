# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``PipelineStage`` for torch modules: forward/backward per microbatch, messages, shape inference.

* Inputs received from another stage become fresh leaves (``requires_grad`` for floating point), so
  each stage's autograd graph ends at its own inputs; a DTensor activation travels as its local
  tensor and is rebuilt on the receiver from the spec exchanged at shape inference.
* Shape inference runs once (first step, and again when the first stage's microbatch shapes change):
  stages run one no-grad forward in stage order (in eval mode, so it has no training side effect: MoE
  token counts, BatchNorm statistics) and pass their output metadata to the next stage;
  with ``input_args`` on every stage it is static (no exchange).
* Backward: ``B`` runs the full backward; ``I`` / ``W`` use the graph-surgery split of ``backward.py``.
* Stages on meshes of different sizes (``pipeline/meshes.py``): when a pipeline position holds several
  ranks of ``group``, a tensor crossing to another position moves as the blocks of a cross-mesh
  redistribute plan (sender layout -> receiver's ``device_mesh`` / ``input_placements``), its gradient
  by the adjoint blocks.
"""
from __future__ import annotations

import pickle
import zlib
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from torch._C import DisableTorchFunctionSubclass
import torch.distributed as dist
from torch import nn
from torch.profiler import record_function

from hyper_parallel.core.placement import Placement, Replicate
from hyper_parallel.pipeline import stage_base
from hyper_parallel.pipeline.meshes import BoundaryPlan, StageLayout, layout_spec, plan_boundary, position_ranks
from hyper_parallel.pipeline.microbatch import BatchDimSpec, merge_entries, microbatch_sizes
from hyper_parallel.pipeline.schedules import SCHEDULES
from hyper_parallel.pipeline._torch.backward import backward_full, backward_input, backward_weight
from hyper_parallel.platform import get_platform
from hyper_parallel.platform.base import P2POp
from hyper_parallel.platform.torch import lanes
from hyper_parallel.platform.torch.dtensor import DTensor

__all__ = ["PipelineStage"]

_META_TAG = 1 << 24


class TensorMeta(tuple):
    """(local shape, dtype name, DTensor layout or None) of one tensor crossing a stage boundary."""

    __slots__ = ()

    @staticmethod
    def of(t: torch.Tensor) -> "TensorMeta":
        """Metadata of ``t`` (a DTensor contributes its mesh ranks, placements and global shape)."""
        layout = None
        if isinstance(t, DTensor):
            spec = t.spec
            topo = spec.mesh.topology
            layout = (topo.shape, topo.ranks, topo.dim_names, tuple(spec.placements), tuple(spec.shape))
            local = t.to_local()
        else:
            local = t
        return TensorMeta((tuple(local.shape), str(local.dtype).replace("torch.", ""), layout))

    @property
    def shape(self) -> Tuple[int, ...]:
        """Local shape."""
        return self[0]

    @property
    def dtype(self) -> torch.dtype:
        """torch dtype."""
        return getattr(torch, self[1])

    @property
    def layout(self):
        """DTensor layout or None."""
        return self[2]

    @property
    def is_float(self) -> bool:
        """True when the tensor carries a gradient back."""
        return self.dtype.is_floating_point or self.dtype.is_complex


def _flatten(out: Any, what: str) -> Tuple[torch.Tensor, ...]:
    if isinstance(out, torch.Tensor):
        return (out,)
    if isinstance(out, (tuple, list)) and all(isinstance(t, torch.Tensor) for t in out) and out:
        return tuple(out)
    raise TypeError(f"{what}: a stage must return a tensor or a non-empty tuple/list of tensors, got "
                    f"{type(out).__name__}")


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if isinstance(t, DTensor) else t


class PipelineStage(stage_base.PipelineStage):  # pylint: disable=too-many-instance-attributes,too-many-public-methods
    """A torch pipeline stage (see the module docstring); arguments as ``torch.distributed.pipelining``.

    Args:
        submodule: the stage's ``nn.Module``.
        stage_index / num_stages: this stage and the stage count.
        device: the compute device.
        input_args / output_args: example microbatch inputs / outputs of this stage (static shapes).
        group: the pipeline process group (default: the world).
        device_mesh: the mesh DTensor activations arriving at this stage live on (default: the mesh of
            the sender's shape and dim names that contains this rank). When the stage runs on several ranks
            of ``group`` (stages on meshes of different sizes), it is the stage's mesh over exactly them.
        input_placements: with stages on meshes of different sizes, the placements the stage's inputs take
            on ``device_mesh`` (default ``Replicate`` on every mesh dim).

    Attribute ``pass_kwargs_to_all`` (default False): when True, a non-first stage is called with the
    ``step()`` keyword inputs as well (split into microbatches like stage 0's, on every rank that passes
    them): inputs every stage needs, e.g. a decoder's position ids (RoPE runs in every layer).
    """

    def __init__(self, submodule: nn.Module, stage_index: int, num_stages: int, device=None, input_args=None,
                 output_args=None, group=None, dw_builder=None, *, device_mesh=None,
                 input_placements=None) -> None:
        del dw_builder  # torch's custom dW builder: the runtime splits dx/dw itself (backward.py)
        if not isinstance(submodule, nn.Module):
            raise TypeError(f"PipelineStage(submodule): expected an nn.Module, got {type(submodule).__name__}")
        self.submod = submodule
        self.platform = get_platform("torch")
        self.group = group
        self.group_rank = dist.get_rank(group)
        self.group_size = dist.get_world_size(group)
        self.group_ranks = tuple(dist.get_process_group_ranks(group if group is not None else dist.group.WORLD))
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self.device_mesh = device_mesh
        self._handshake(stage_index, num_stages)
        topo = getattr(device_mesh, "topology", None)
        pl = tuple(input_placements) if input_placements is not None else None
        self._infos = self._gather_objects((stage_index, topo, pl))
        self.positions: Dict[int, Tuple[int, ...]] = {}
        self.layouts: Dict[int, StageLayout] = {}
        self.cross = False
        self._boundaries: Dict[Tuple[int, int], BoundaryPlan] = {}
        self.stage_index = stage_index
        self.num_stages = num_stages
        self.is_first = stage_index == 0
        self.is_last = stage_index == num_stages - 1
        self.pass_kwargs_to_all = False
        self.static_in = None if input_args is None else tuple(TensorMeta.of(t) for t in _flatten(
            input_args, "PipelineStage(input_args)"))
        self.static_out = None if output_args is None else tuple(TensorMeta.of(t) for t in _flatten(
            output_args, "PipelineStage(output_args)"))
        self.in_meta: Optional[Tuple[TensorMeta, ...]] = None
        self.out_meta: Optional[Tuple[TensorMeta, ...]] = None
        self.stage_to_rank: Tuple[int, ...] = ()
        self.n_microbatches = 0
        self.local_stages: Dict[int, "PipelineStage"] = {}
        self._cache: Dict[int, list] = {}
        self._plans: Dict[int, Any] = {}
        self._in_grads: Dict[int, list] = {}
        self._leaves: Dict[int, list] = {}
        self._outputs: Dict[int, Any] = {}
        self._loss_fn = None
        self._sig = None
        self._agreed = False
        self._local_error = ""
        self._ties: List[Tuple[Any, List[torch.Tensor]]] = []
        self.grad_enabled = True  # False while the schedule runs eval() (forward only)
        self.requires_gradient_sync = True  # False: step() defers FSDP reduction and tie sums (accumulation)

    # ------------------------------------------------------------------ setup
    def _handshake(self, stage_index, num_stages) -> None:
        """Every rank shares (error, stage_index, num_stages); any problem raises on every rank."""
        code = 0
        ok_int = isinstance(stage_index, int) and isinstance(num_stages, int)
        if not ok_int or num_stages < 1:
            code = 1
        elif not 0 <= stage_index < num_stages:
            code = 2
        mine = torch.tensor([code, stage_index if ok_int else -1, num_stages if ok_int else -1], dtype=torch.int64)
        rows = self._gather(mine).view(self.group_size, 3).tolist()
        for rank, (c, s, n) in enumerate(rows):
            if c == 1:
                raise ValueError(f"PipelineStage: rank {rank} got num_stages={n} / stage_index={s}; expected ints "
                                 "with num_stages >= 1")
            if c == 2:
                raise ValueError(f"PipelineStage(stage_index): rank {rank} got stage_index={s}, out of range for "
                                 f"num_stages={n} (expected 0..{n - 1})")
        counts = {n for _, _, n in rows}
        if len(counts) > 1:
            detail = ", ".join(f"rank {r}: {n}" for r, (_, _, n) in enumerate(rows))
            raise ValueError(f"PipelineStage(num_stages): the ranks disagree on the stage count ({detail})")

    def _gather(self, t: torch.Tensor) -> torch.Tensor:
        return self.platform.all_gather(t, self.group, 0, [t.shape[0]] * self.group_size, self.group_rank)

    def _gather_objects(self, obj) -> list:
        """``obj`` of every rank of the group (pickled, padded to the longest)."""
        data = pickle.dumps(obj)
        sizes = self._gather(torch.tensor([len(data)], dtype=torch.int64)).tolist()
        buf = torch.zeros(max(sizes), dtype=torch.uint8)
        buf[:len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        rows = self._gather(buf).view(self.group_size, -1)
        return [pickle.loads(rows[g, :n].numpy().tobytes()) for g, n in enumerate(sizes)]

    @property
    def num_positions(self) -> int:
        """Pipeline positions (what a schedule calls ranks): the distinct stages of one construction round."""
        return len({info[0] for info in self._infos})

    @property
    def uses_fsdp(self) -> bool:
        """True when the submodule is a ``fully_shard`` module."""
        from hyper_parallel.fsdp._torch.fully_shard import FSDPModule  # pylint: disable=import-outside-toplevel
        return isinstance(self.submod, FSDPModule)

    @property
    def fsdp_modules(self) -> List[Any]:
        """The outermost ``fully_shard`` modules of the stage: the submodule when it is one, else the FSDP modules
        inside it that no other FSDP module holds (e.g. a MoE stage with one data-parallel rank: its routers,
        shared experts and experts are sharded on meshes of their own while the dense part is not)."""
        from hyper_parallel.fsdp._torch.fully_shard import FSDPModule  # pylint: disable=import-outside-toplevel
        if isinstance(self.submod, FSDPModule):
            return [self.submod]
        found: List[Any] = []

        def walk(module) -> None:
            for child in module.children():
                if isinstance(child, FSDPModule):
                    found.append(child)
                else:
                    walk(child)

        walk(self.submod)
        return found

    def bind(self, stage_to_rank: Sequence[int], n_microbatches: int, local_stages: Dict[int, Any]) -> None:
        """Called by the schedule: stage placement, microbatch count and this rank's other stages."""
        self.stage_to_rank = tuple(stage_to_rank)
        self.n_microbatches = n_microbatches
        self.local_stages = local_stages
        self._agreed = False
        holder: Dict[int, int] = {}
        for st in local_stages.values():
            for g, (s, topo, pl) in enumerate(st._infos):  # pylint: disable=protected-access
                holder.setdefault(self.group_ranks[g], s)
                self.layouts[s] = StageLayout(topo, pl)
        self.positions = position_ranks(holder, self.stage_to_rank)
        self.cross = any(len(r) > 1 for r in self.positions.values())
        self._boundaries.clear()

    def _peer(self, stage: int) -> int:
        """Global rank of the (first) rank holding ``stage``."""
        return self.positions[self.stage_to_rank[stage]][0]

    def _crosses(self, stage: int) -> bool:
        """True when the boundary between ``stage`` and ``stage + 1`` moves blocks between rank sets."""
        return self.cross and self.stage_to_rank[stage] != self.stage_to_rank[stage + 1]

    # ------------------------------------------------------------------ step preparation (rank level)
    def prepare_step(self, schedule, args, kwargs, target, losses):
        """Split the inputs, agree with every rank that the step can run, infer shapes when needed."""
        m = self.n_microbatches
        first = self.local_stages.get(0)
        last = self.local_stages.get(self.num_stages - 1)
        status, detail, arg_mbs, kwarg_mbs, target_mbs = 0, 0, [()] * m, [{}] * m, None
        sig = 0
        try:
            if first is not None:
                arg_mbs, kwarg_mbs = _split_inputs(args, kwargs, m, schedule._args_chunk_spec,  # pylint: disable=W0212
                                                   schedule._kwargs_chunk_spec)  # pylint: disable=protected-access
                sig = zlib.crc32(repr([TensorMeta.of(t) for t in _flatten(arg_mbs[0], "input")]).encode())
            elif kwargs and any(s.pass_kwargs_to_all for s in self.local_stages.values()):
                # keyword inputs every stage reads (position ids, attention masks), given on every rank
                _, kwarg_mbs = _split_inputs((), kwargs, m, None, schedule._kwargs_chunk_spec)  # pylint: disable=W0212
            if last is not None:
                status = 3
                _check_target(target, schedule._loss_fn, losses)  # pylint: disable=protected-access
                status = 2
                target_mbs = None if target is None else _split_one(target, BatchDimSpec(0), m, "target")
                status = 0
        except (ValueError, TypeError) as exc:
            status = status or 1
            self._local_error = str(exc)
            detail = _bad_size(args if status == 1 else target, m)
        code = sorted(SCHEDULES).index(schedule.schedule.name) if schedule.schedule.name in SCHEDULES else 99
        mine = torch.tensor([status, detail, code, m, sig], dtype=torch.int64)
        rows = self._gather(mine).view(self.group_size, 5).tolist()
        self._check_rows(rows, schedule)
        sigs = [r[4] for r in rows]
        if not self._agreed or sigs != self._sig:
            self._infer_shapes(arg_mbs[0], kwarg_mbs[0])
            self._sig = sigs
            self._agreed = True
        return arg_mbs, kwarg_mbs, target_mbs

    def _check_rows(self, rows, schedule) -> None:
        for rank, (status, detail, _code, m, _sig) in enumerate(rows):
            if status:
                what = {1: "stage 0's input batch", 2: "the last stage's target", 3: "the last stage's loss setup"}
                local = self._local_error if rank == self.group_rank else ""
                size = (f": batch size {detail} is not divisible by n_microbatches={m}" if detail > 0 else "")
                raise ValueError(f"{type(schedule).__name__}.step: rank {rank} rejected {what[status]}"
                                 f"{size}{' (' + local + ')' if local else ''}")
        codes = {(c, m) for _, _, c, m, _ in rows}
        if len(codes) > 1:
            names = sorted(SCHEDULES)
            detail = ", ".join(f"rank {r}: {names[c] if c < len(names) else 'custom'} with n_microbatches={m}"
                               for r, (_, _, c, m, _) in enumerate(rows))
            raise ValueError(f"{type(schedule).__name__}.step: the ranks run different schedules or microbatch "
                             f"counts ({detail})")

    def _infer_shapes(self, args0, kwargs0) -> None:
        static = all(s.static_in is not None or s.is_first for s in self.local_stages.values()) and not self.cross
        for idx in sorted(self.local_stages):
            st = self.local_stages[idx]
            st._infer_one(args0, kwargs0, static)  # pylint: disable=protected-access

    def _infer_one(self, args0, kwargs0, static: bool) -> None:
        if self.is_first:
            ins, kwargs = _flatten(args0, "stage 0 input") if args0 else (), kwargs0
        else:
            ins, kwargs = self._infer_inputs(static), kwargs0 if self.pass_kwargs_to_all else {}
        if self.static_out is not None:
            self.out_meta = self.static_out
        else:
            out = self._probe_forward(ins, kwargs)
            self.out_meta = tuple(TensorMeta.of(t) for t in out)
        nxt = self.stage_index + 1
        pos = self.stage_to_rank[self.stage_index]
        if not self.is_last and self.stage_to_rank[nxt] != pos and not (static and self.static_out is not None) \
                and dist.get_rank() == self.positions[pos][0]:
            for peer in self.positions[self.stage_to_rank[nxt]]:
                self._send_object(self.out_meta, peer)

    def _probe_forward(self, ins, kwargs):
        """The shape-inference forward: no grad, eval mode (no training side effects: MoE token counts, BatchNorm
        statistics), every module's own mode restored afterwards."""
        modes = [(m, m.training) for m in self.submod.modules()]
        self.submod.train(False)
        try:
            with torch.no_grad():
                out = self.submod(*ins, **kwargs)
                return self._boundary_outputs(_flatten(out, f"stage {self.stage_index} forward"))
        finally:
            for m, mode in modes:
                m.training = mode

    def _infer_inputs(self, static: bool):
        """A later stage's shape-inference inputs: zeros of the previous stage's output metadata."""
        prev = self.local_stages.get(self.stage_index - 1)
        if self.static_in is not None and static:
            self.in_meta = self.static_in
        elif prev is not None:
            self.in_meta = prev.out_meta
        else:
            self.in_meta = self._recv_object(self._peer(self.stage_index - 1))
        self._boundaries.clear()
        prev_pos = self.stage_to_rank[self.stage_index - 1]
        ins = self.unpack_recv("fwd", -1, [torch.zeros_like(op.tensor) for op in self.recv_ops("fwd", -1, prev_pos)])
        self._leaves.pop(-1, None)
        return ins

    def _send_object(self, obj, peer: int) -> None:
        data = torch.frombuffer(bytearray(pickle.dumps(obj)), dtype=torch.uint8)
        size = torch.tensor([data.numel()], dtype=torch.int64)
        for h in self.platform.batch_isend_irecv([P2POp("send", size, peer, self.group, _META_TAG),
                                                  P2POp("send", data, peer, self.group, _META_TAG + 1)]):
            h.wait()

    def _recv_object(self, peer: int):
        size = torch.zeros(1, dtype=torch.int64)
        self.platform.batch_isend_irecv([P2POp("recv", size, peer, self.group, _META_TAG)])[0].wait()
        data = torch.empty(int(size.item()), dtype=torch.uint8)
        self.platform.batch_isend_irecv([P2POp("recv", data, peer, self.group, _META_TAG + 1)])[0].wait()
        return pickle.loads(data.numpy().tobytes())

    # ------------------------------------------------------------------ per step
    def begin_step(self, loss_fn) -> None:
        """Reset per-step state; an FSDP stage accumulates unreduced gradients until its REDUCE_GRAD."""
        self._loss_fn = loss_fn
        self._outputs.clear()
        for module in self.fsdp_modules:
            module.set_requires_gradient_sync(False)
            module.set_is_last_backward(False)
            module.set_reshard_after_backward(False)

    def end_step(self) -> None:
        """Sum tied gradients (not after eval); drop what the step no longer needs."""
        if self.grad_enabled and self.requires_gradient_sync:
            self._reduce_ties()
        self._cache.clear()
        self._plans.clear()
        self._in_grads.clear()
        self._leaves.clear()

    # ------------------------------------------------------------------ compute
    def forward_one_chunk(self, mb: int, args, kwargs):
        """Forward of microbatch ``mb``; keeps what backward needs."""
        leaves = self._leaves.pop(mb, [])
        with torch.set_grad_enabled(self.grad_enabled and torch.is_grad_enabled()), \
                record_function(f"hp.pp.compute.{self.stage_index}F{mb}"):
            out = self.submod(*args, **kwargs)
        outs = self._boundary_outputs(_flatten(out, f"stage {self.stage_index} forward"))
        self._cache[mb] = [leaves, outs, None, None]  # weights: the leaves the graph reaches (FSDP-safe)
        if self.is_last:
            self._outputs[mb] = out
        return out

    def compute_loss(self, mb: int, out, target, ctx) -> None:
        """Last stage: the microbatch loss, scaled by ``ctx.scale`` for backward (unscaled in ``losses``)."""
        if self._loss_fn is None:
            return
        loss = self._loss_fn(out, target)
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            raise ValueError(f"loss_fn must return a scalar tensor, got {type(loss).__name__} of shape "
                             f"{getattr(loss, 'shape', None)}")
        ctx.mb_losses[mb] = loss.detach()
        self._cache[mb][3] = loss * ctx.scale if ctx.scale != 1.0 else loss

    def _roots(self, mb: int, grads) -> Tuple[list, list]:
        leaves, outs, _, loss = self._cache[mb]
        if self.is_last:
            if loss is None:
                raise RuntimeError(f"stage {self.stage_index}: backward on the last stage needs a loss_fn in the "
                                   "schedule and a target in step()")
            return [loss], [torch.ones_like(loss)]
        # a DTensor output is differentiated through its local shard (the gradient received is local)
        pairs = [(_local(o), g) for o, g in zip(outs, grads) if o.requires_grad and g is not None]
        del leaves
        return [p[0] for p in pairs], [p[1] for p in pairs]

    def backward_one_chunk(self, mb: int, grads, *, input_only: bool = False):
        """Backward of ``mb`` (full, or input-gradient only when ``input_only``); returns input grads."""
        outputs, out_grads = self._roots(mb, grads)
        leaves, _, params, _ = self._cache[mb]
        with record_function(f"hp.pp.compute.{self.stage_index}{'I' if input_only else 'B'}{mb}"):
            if input_only:
                in_grads, plan = backward_input(outputs, out_grads, leaves, params)
                self._plans[mb] = plan
            else:
                in_grads = backward_full(outputs, out_grads, leaves, params)
                self._cache.pop(mb, None)
        self._in_grads[mb] = in_grads
        return in_grads

    def backward_weight_one_chunk(self, mb: int) -> None:
        """The W step of ``mb`` (after its I step)."""
        plan = self._plans.pop(mb)
        backward_weight(plan)
        self._cache.pop(mb, None)

    def reduce_grad(self) -> None:
        """End of the stage's backward work in this step: an FSDP stage reduces its gradients now (once);
        parameters tied with another stage get their gradients summed with it (see ``tie_parameters``). While
        ``requires_gradient_sync`` is False (gradient accumulation) both wait for a later step."""
        if self.requires_gradient_sync:
            for module in self.fsdp_modules:
                module.reduce_gradients()
                module.set_reshard_after_backward(True)

    def tie_parameters(self, params: Sequence[torch.Tensor], group) -> None:
        """Parameters of this stage that are copies of parameters on other ranks' stages (tied embeddings:
        the input embedding on the first stage, the output head on the last): at the end of every step their
        gradients are summed over ``group`` (the ranks holding the copies, each tying the same number of
        parameters in the same order), so the copies, equal at the start, stay equal. Copies on one rank
        (the V placement puts the first and last stage on rank 0) should simply share one Parameter.
        An entry may be a getter (a callable returning the parameter) when TP / FSDP will replace the
        parameter after the stage is built; DTensor gradients are summed shard by shard (the copies must
        have the same layout, as a vocabulary-sharded embedding and head do)."""
        self._ties.append((group, list(params)))

    def _reduce_ties(self) -> None:
        for group, params in self._ties:
            for p in params:
                p = p() if callable(p) else p  # a getter: the parameter as it is now (after TP / FSDP)
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
                with torch.no_grad(), DisableTorchFunctionSubclass():  # a DTensor gradient: its local shard
                    local = p.grad.view_as(p.grad)
                    local.copy_(self.platform.all_reduce(local.detach(), "sum", group))

    def _fsdp_modules(self):
        from hyper_parallel.fsdp._torch.fully_shard import FSDPModule  # pylint: disable=import-outside-toplevel
        return [m for m in self.submod.modules() if isinstance(m, FSDPModule)]

    def unshard(self) -> None:
        """Gather the stage's FSDP parameters (once per step, before its first compute)."""
        handles = [m.unshard(async_op=True) for m in self._fsdp_modules()]
        for h in handles:
            h.wait()

    def reshard(self) -> None:
        """Free the gathered FSDP parameters (after the stage's last compute of the step)."""
        for m in self._fsdp_modules():
            m.reshard()

    # ------------------------------------------------------------------ two compute threads (overlap_b_f)
    def backward_lane_groups(self) -> List[Any]:
        """The process groups this stage's forward and backward may run collectives on: the expert-parallel
        groups of its MoE layers' dispatchers and the mesh groups of its DTensor parameters (TP, FSDP)."""
        groups: Dict[int, Any] = {}
        for m in self.submod.modules():
            disp = getattr(m, "dispatcher", None)
            if getattr(disp, "group", None) is not None and getattr(disp, "ep_size", 1) > 1:
                groups[id(disp.group)] = disp.group
        for p in self.submod.parameters():
            if isinstance(p, DTensor):
                mesh = p.spec.mesh
                for dim in range(mesh.ndim):
                    if mesh.size(dim) > 1:
                        g = mesh.get_group(dim)
                        groups[id(g)] = g
        return list(groups.values())

    def prepare_backward_lane(self) -> None:
        """Twin the groups of :meth:`backward_lane_groups` (``hyper_parallel.platform.torch.lanes``): the
        backward thread's collectives then never interleave with the forward thread's on one group."""
        lanes.add_twin_groups(self.backward_lane_groups())

    @property
    def has_hook_state(self) -> bool:
        """True when the stage holds FSDP modules (their hooks gather and free parameters): the runtime never
        runs a forward and a backward of this one stage on two threads at once."""
        return bool(self._fsdp_modules())

    @staticmethod
    def enter_backward_lane() -> None:
        """Initializer of the runtime's backward thread (puts it on the backward lane)."""
        lanes.enter_backward_lane()

    # ------------------------------------------------------------------ messages
    def send_ops(self, direction: str, mb: int, peer_rank: int) -> List[P2POp]:
        """Ops sending this stage's forward outputs (``fwd``) or input gradients (``bwd``) of ``mb``
        (``peer_rank``: the receiving pipeline position)."""
        if direction == "fwd":
            tensors = [_local(t).detach() for t in self._cache[mb][1]]
            tag_dir, base = "fwd", self.stage_index
            index = list(range(len(tensors)))
        else:
            grads = self._in_grads.pop(mb)
            index = [i for i, m in enumerate(self.in_meta) if m.is_float]
            floats = [self.in_meta[i] for i in index]
            tensors = [(g if g is not None else torch.zeros(self._local_shape(i, m), dtype=m.dtype,
                                                              device=self.device))
                       for i, g, m in zip(index, _align(grads, floats), floats)]
            tag_dir, base = "bwd", self.stage_index - 1
        if self._crosses(base):
            return self._piece_ops(tensors, index, base, tag_dir, mb)
        peer = self.positions[peer_rank][0]
        return [P2POp("send", t.contiguous(), peer, self.group, _boundary_tag(base, tag_dir, mb, k,
                                                                               self.n_microbatches))
                for k, t in enumerate(tensors)]

    def recv_ops(self, direction: str, mb: int, peer_rank: int) -> List[P2POp]:
        """Ops receiving this stage's forward inputs (``fwd``) or output gradients (``bwd``) of ``mb``
        (``peer_rank``: the sending pipeline position)."""
        if direction == "fwd":
            metas, base = self.in_meta, self.stage_index - 1
            index = list(range(len(metas)))
        else:
            index = [i for i, m in enumerate(self.out_meta) if m.is_float]
            metas, base = [self.out_meta[i] for i in index], self.stage_index
        if self._crosses(base):
            return self._piece_ops(None, index, base, direction, mb, metas)
        peer = self.positions[peer_rank][0]
        return [P2POp("recv", torch.empty(m.shape, dtype=m.dtype, device=self.device), peer, self.group,
                      _boundary_tag(base, direction, mb, k, self.n_microbatches)) for k, m in enumerate(metas)]

    def unpack_recv(self, direction: str, mb: int, tensors):
        """Received tensors as this stage's inputs (fresh leaves, DTensors rebuilt) or output grads."""
        if direction == "bwd":
            if self._crosses(self.stage_index):
                tensors = self._assemble(tensors, [i for i, m in enumerate(self.out_meta) if m.is_float],
                                         self.stage_index, "bwd")
            it = iter(tensors)
            return [next(it) if m.is_float else None for m in self.out_meta]
        if self._crosses(self.stage_index - 1):
            return self._cross_inputs(mb, tensors)
        return self._inputs(mb, tensors, self.in_meta)

    # ------------------------------------------------------------------ stages on meshes of different sizes
    def _boundary_outputs(self, outs: Tuple[torch.Tensor, ...]) -> Tuple[torch.Tensor, ...]:
        """Outputs leaving for another rank set carry no ``Partial`` (made ``Replicate``, differentiably)."""
        if self.is_last or not self._crosses(self.stage_index):
            return outs
        fixed = []
        for t in outs:
            if isinstance(t, DTensor) and any(p.is_partial() for p in t.placements):
                t = t.redistribute(placements=[Replicate() if p.is_partial() else p for p in t.placements])
            fixed.append(t)
        return tuple(fixed)

    def _plan(self, base: int, k: int) -> BoundaryPlan:
        """The crossing plan of tensor ``k`` from stage ``base`` to stage ``base + 1`` (cached per shapes)."""
        plan = self._boundaries.get((base, k))
        if plan is None:
            meta = self.out_meta[k] if base == self.stage_index else self.in_meta[k]
            what = f"pipeline boundary stage {base} -> {base + 1}, tensor {k}"
            src_ranks = self.positions[self.stage_to_rank[base]]
            src = layout_spec(meta.layout, meta.shape, src_ranks, what)
            itemsize = torch.empty((), dtype=meta.dtype).element_size()
            plan = plan_boundary(src, self.layouts[base + 1], self.positions[self.stage_to_rank[base + 1]],
                                 itemsize, what)
            self._boundaries[(base, k)] = plan
        return plan

    def _local_shape(self, k: int, meta: TensorMeta) -> Tuple[int, ...]:
        """Local shape of input ``k`` on this rank (the receiver's layout at a crossing boundary)."""
        if self.is_first or not self._crosses(self.stage_index - 1):
            return meta.shape
        dst = self._plan(self.stage_index - 1, k).dst
        return tuple(dst.local_shape_and_offset(dst.mesh.coordinate_of(dist.get_rank()))[0])

    def _piece_ops(self, tensors, index, base: int, direction: str, mb: int, metas=None) -> List[P2POp]:
        """Send (``tensors`` given) or receive ops of the blocks of a crossing boundary, in plan order."""
        me = dist.get_rank()
        sending = tensors is not None
        # forward blocks go base -> base + 1, backward blocks the other way; the sender's own layout:
        ops = []
        for n, k in enumerate(index):
            plan = self._plan(base, k)
            pieces = plan.fwd if direction == "fwd" else plan.bwd
            mine = plan.src if (direction == "fwd") == sending else plan.dst
            off = mine.local_shape_and_offset(mine.mesh.coordinate_of(me))[1] if sending else None
            for j, p in enumerate(pieces):
                tag = _piece_tag(base, direction, mb, k, j, self.n_microbatches)
                if sending and p.src == me:
                    ops.append(P2POp("send", tensors[n][_slices(p.offset, p.shape, off)].contiguous(), p.dst,
                                     self.group, tag))
                elif not sending and p.dst == me:
                    ops.append(P2POp("recv", torch.empty(p.shape, dtype=metas[n].dtype, device=self.device), p.src,
                                     self.group, tag))
        return ops

    def _assemble(self, tensors, index, base: int, direction: str) -> List[torch.Tensor]:
        """This rank's local tensors from the received blocks (same order as ``_piece_ops``)."""
        me = dist.get_rank()
        it = iter(tensors)
        out = []
        for k in index:
            plan = self._plan(base, k)
            pieces = plan.fwd if direction == "fwd" else plan.bwd
            mine = plan.dst if direction == "fwd" else plan.src
            shape, off = mine.local_shape_and_offset(mine.mesh.coordinate_of(me))
            meta = self.in_meta[k] if direction == "fwd" else self.out_meta[k]
            buf = torch.zeros(tuple(shape), dtype=meta.dtype, device=self.device)
            for p in pieces:
                if p.dst == me:
                    buf[_slices(p.offset, p.shape, off)] = next(it)
            out.append(buf)
        return out

    def _cross_inputs(self, mb: int, tensors) -> tuple:
        """Inputs from another rank set: assembled local shards, DTensors on this stage's mesh."""
        index = list(range(len(self.in_meta)))
        locals_ = self._assemble(tensors, index, self.stage_index - 1, "fwd")
        leaves, args = [], []
        for k, (t, meta) in enumerate(zip(locals_, self.in_meta)):
            leaf = t.requires_grad_(meta.is_float)
            if meta.is_float:
                leaves.append(leaf)
            if self.device_mesh is not None:
                dst = self._plan(self.stage_index - 1, k).dst
                leaf = DTensor.from_local(leaf, self.device_mesh, dst.placements, shape=dst.shape)
            args.append(leaf)
        self._leaves[mb] = leaves
        return tuple(args)

    def _inputs(self, mb: int, tensors, metas) -> tuple:
        leaves, args = [], []
        for t, meta in zip(tensors, metas):
            leaf = t.detach().requires_grad_(meta.is_float)
            if meta.is_float:
                leaves.append(leaf)
            if meta.layout is not None:
                leaf = DTensor.from_local(leaf, self._mesh_for(meta.layout), meta.layout[3], shape=meta.layout[4])
            args.append(leaf)
        self._leaves[mb] = leaves
        return tuple(args)

    def _mesh_for(self, layout):
        if self.device_mesh is not None:
            return self.device_mesh
        from hyper_parallel.core import device_mesh as dm  # pylint: disable=import-outside-toplevel
        shape, _ranks, names = layout[0], layout[1], layout[2]
        for mesh in reversed(dm._MESHES):  # pylint: disable=protected-access
            if mesh.topology.shape == shape and mesh.topology.dim_names == names and mesh.get_coordinate() is not None:
                return mesh
        raise RuntimeError(f"stage {self.stage_index}: a DTensor activation on a mesh of shape {shape} (dims "
                           f"{names}) arrived, but this rank has no such mesh; pass PipelineStage(device_mesh=...)")

    def outputs_for_next(self, mb: int) -> Tuple[torch.Tensor, ...]:
        """Forward outputs of ``mb`` for a stage on the same rank."""
        return self._cache[mb][1]

    def take_local(self, direction: str, mb: int, tensors):
        """Outputs of the previous stage on this rank as this stage's inputs (fresh leaves)."""
        del direction
        return self._inputs(mb, [_local(t) for t in tensors], [TensorMeta.of(t) for t in tensors])

    def merge_outputs(self, merge_spec=None):
        """The last stage's outputs of every microbatch, merged by ``merge_spec`` (``output_merge_spec``;
        see :func:`hyper_parallel.pipeline.microbatch.merge_entries`; default: concatenated along dim 0),
        detached."""
        chunks = [self._outputs[k] for k in sorted(self._outputs)]
        if not chunks:
            return None
        single = isinstance(chunks[0], torch.Tensor)
        cols = [[c] if single else list(c) for c in chunks]
        entries = merge_entries(merge_spec, len(cols[0]))
        merged = [_merge_one([c[i] for c in cols], entry, i) for i, entry in enumerate(entries)]
        return merged[0] if single else type(chunks[0])(merged)


def _merge_one(values, entry, index: int):
    """Merge one output's microbatch values by one merge rule."""
    if isinstance(entry, BatchDimSpec):  # DTensor outputs concatenate as DTensors (their own rule)
        return torch.cat([v.detach() for v in values], entry.dim)
    if hasattr(entry, "reduce_fn") and hasattr(entry, "init_value"):
        acc = entry.init_value
        for v in values:
            acc = entry.reduce_fn(acc, v.detach())
        return acc
    first = values[0].detach()
    for k, v in enumerate(values[1:], 1):
        if not torch.equal(_local(v), _local(values[0])):
            raise ValueError(f"output_merge_spec: output {index} is marked as the same in every microbatch "
                             f"({entry!r}) but microbatch {k} differs from microbatch 0")
    return first


def _boundary_tag(base: int, direction: str, mb: int, k: int, m: int) -> int:
    return ((base * 2 + (direction == "bwd")) * (m + 1) + mb) * 64 + k


def _piece_tag(base: int, direction: str, mb: int, k: int, j: int, m: int) -> int:
    if k >= 32 or j >= 32:
        raise ValueError(f"pipeline boundary of stage {base}: at most 32 tensors of at most 32 blocks each cross "
                         f"between rank sets (tensor {k}, block {j})")
    return ((base * 2 + (direction == "bwd")) * (m + 1) + mb) * 1024 + k * 32 + j


def _slices(offset, shape, base):
    return tuple(slice(o - b, o - b + s) for o, s, b in zip(offset, shape, base))


def _align(grads, metas):
    grads = list(grads) + [None] * (len(metas) - len(grads))
    return grads[:len(metas)]


def _split_one(value, spec, m: int, what: str):
    if spec is None or not isinstance(value, torch.Tensor):
        return [value] * m
    if isinstance(spec, Placement):
        raise TypeError(f"{what}: chunk specs are BatchDimSpec/TensorChunkSpec, not placements")
    dim = spec.dim
    sizes = microbatch_sizes(value.shape[dim], m, f"{what} (dim {dim})", even=True)
    return list(value.split(sizes, dim))


def _split_inputs(args, kwargs, m, args_spec, kwargs_spec):
    specs = args_spec if args_spec is not None else [BatchDimSpec(0)] * len(args)
    if len(specs) != len(args):
        raise ValueError(f"args_chunk_spec has {len(specs)} entries for {len(args)} positional inputs")
    cols = [_split_one(a, s, m, f"input argument {i}") for i, (a, s) in enumerate(zip(args, specs))]
    kw_specs = kwargs_spec or {}
    kcols = {k: _split_one(v, kw_specs.get(k, BatchDimSpec(0)), m, f"keyword input {k!r}") for k, v in kwargs.items()}
    return [tuple(c[i] for c in cols) for i in range(m)], [{k: v[i] for k, v in kcols.items()} for i in range(m)]


def _bad_size(value, m: int) -> int:
    """The batch size of the first tensor in ``value`` when it does not split into ``m`` (else 0)."""
    tensors = [value] if isinstance(value, torch.Tensor) else [t for t in (value or ()) if isinstance(t, torch.Tensor)]
    for t in tensors:
        if t.dim() and t.shape[0] % m:
            return int(t.shape[0])
    return 0


def _check_target(target, loss_fn, losses) -> None:
    if loss_fn is not None and target is None:
        raise ValueError("the schedule has a loss_fn, so step() on the last stage's rank needs target=")
    if losses is not None and not isinstance(losses, list):
        raise TypeError(f"step(losses=...): expected a list to append the microbatch losses to, got "
                        f"{type(losses).__name__}")
