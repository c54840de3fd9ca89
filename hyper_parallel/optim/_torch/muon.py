# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``Muon`` for torch: plain tensors (equal to ``torch.optim.Muon``) and sharded ``DTensor`` parameters.

A step (per parameter, on local shards): ``B = lerp(B, g, 1 - mu)``; ``U = lerp(g, B, mu)`` (Nesterov)
or ``B``; ``O = NS(U)`` (Newton–Schulz in bf16 on the *whole* matrix); ``W *= 1 - lr * wd``;
``W -= adjust(lr, shape) * O``. The momentum buffer ``B`` is sharded like the parameter: created as
torch's optimizers create their states (``zeros_like(grad)``), it is a ``DTensor`` with the
parameter's spec for a TP parameter and a plain local-shard tensor under ``fully_shard``'s step hook.

``NS`` needs whole matrices. The work plan (``hyper_parallel.optim.planner``) picks, for every
matrix (or chunk of experts), one owner rank; per mesh group one ``all_to_all`` sends the bf16
pieces of ``U`` to their owners, every owner orthogonalises its matrices — all same-shaped ones in
one batched call — and a second ``all_to_all`` sends every rank its pieces of ``O``. The pieces travel
in bf16, which is exact: ``NS`` rounds its input to bf16 first.
"""
from __future__ import annotations

import math
from collections import defaultdict
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist
from torch._C import DisableTorchFunctionSubclass
from torch.optim import Optimizer

from hyper_parallel.optim.planner import Region, TensorLayout, WorkPlan, plan_work

__all__ = ["Muon", "newton_schulz", "adjusted_lr", "NS_COEFFICIENTS"]

#: Keller Jordan's quintic coefficients (the ``torch.optim.Muon`` defaults)
NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)
_ADJUST = ("match_rms_adamw", "spectral", "original", None)


def adjusted_lr(lr: float, mode: Optional[str], rows: int, cols: int) -> float:
    """The lr applied to the orthogonalised update of a ``rows x cols`` matrix.

    ``match_rms_adamw``: ``0.2 * sqrt(max(rows, cols)) * lr`` (Moonlight: the update RMS matches AdamW's,
    so AdamW's lr and weight decay carry over); ``spectral``: ``sqrt(rows / cols) * lr`` (spectral-norm
    scaling, fan-out over fan-in); ``original``: ``sqrt(max(1, rows / cols)) * lr`` (Keller Jordan);
    ``None``: ``lr``.
    """
    if mode == "match_rms_adamw":
        return lr * 0.2 * math.sqrt(max(rows, cols))
    if mode == "spectral":
        return lr * math.sqrt(rows / cols)
    if mode == "original":
        return lr * math.sqrt(max(1.0, rows / cols))
    return lr


def newton_schulz(x: torch.Tensor, coefficients: Sequence[float] = NS_COEFFICIENTS, steps: int = 5,
                  eps: float = 1e-7) -> torch.Tensor:
    """Orthogonalise a batch of matrices ``x`` (``[batch, rows, cols]``) in bf16 in one batched call.

    Per matrix this is exactly ``torch.optim.Muon``'s iteration: round to bf16, transpose when tall,
    divide by the Frobenius norm (clamped at ``eps``), ``steps`` times ``A = X X^T``,
    ``B = b A + c A A``, ``X = a X + B X``.
    """
    a, b, c = coefficients
    out = x.bfloat16()
    tall = out.size(-2) > out.size(-1)
    if tall:
        out = out.mT
    out = out / torch.linalg.vector_norm(out, dim=(-2, -1), keepdim=True).clamp(min=eps)
    for _ in range(steps):
        gram = out @ out.mT
        update = torch.baddbmm(gram, gram, gram, beta=b, alpha=c)
        out = torch.baddbmm(out, update, out, beta=a)
    return out.mT if tall else out


def _local(t: torch.Tensor) -> torch.Tensor:
    """A plain-tensor alias of a (DTensor) tensor's local data."""
    with DisableTorchFunctionSubclass():
        return t.view_as(t)


def _spec_of(p: torch.Tensor):
    """The DTensor spec of a parameter (also while FSDP's step hook shows it as a plain tensor)."""
    return p.__dict__.get("_spec")


def _rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def _layout(p: torch.Tensor, rank: int) -> Tuple[TensorLayout, Region, Any]:
    """(planner layout, this rank's region, whole-mesh process group or None) of a parameter."""
    spec = _spec_of(p)
    if spec is None:
        shape = tuple(p.shape)
        return TensorLayout.plain(shape, rank), tuple((0, s) for s in shape), None
    mesh = spec.mesh
    layout = TensorLayout(tuple(spec.shape), tuple(mesh.shape), tuple(mesh.topology.ranks), tuple(spec.placements))
    local, offset = spec.local_shape_and_offset(mesh.get_coordinate())
    return layout, tuple(zip(offset, local)), mesh.whole_group()


def _narrow(t: torch.Tensor, region: Region, base: Region) -> torch.Tensor:
    for d, ((start, length), (b0, _)) in enumerate(zip(region, base)):
        t = t.narrow(d, start - b0, length)
    return t


def _numel(region: Region) -> int:
    n = 1
    for _, length in region:
        n *= length
    return n


class _Item:
    """One parameter with a gradient in the current step."""

    __slots__ = ("param", "local", "update", "region", "group", "layout", "settings")

    def __init__(self, param, local, update, region, group, layout, settings) -> None:
        self.param = param
        self.local = local
        self.update = update
        self.region = region
        self.group = group
        self.layout = layout
        self.settings = settings


class Muon(Optimizer):
    """Muon (momentum orthogonalised by Newton–Schulz) for matrices, sharded or not.

    Args:
        params: parameters (2-D matrices; 3-D+ tensors are batches of matrices over the leading dims,
            e.g. expert weights ``[E, rows, cols]``) or param groups.
        lr: learning rate (>= 0).
        momentum: momentum factor in [0, 1).
        nesterov: use the Nesterov update ``lerp(g, B, momentum)``.
        ns_steps: Newton–Schulz iterations (1..99).
        weight_decay: decoupled weight decay (``W *= 1 - lr * weight_decay``).
        adjust_lr: ``"match_rms_adamw"`` (default), ``"spectral"``, ``"original"`` (torch's default)
            or ``None`` — see :func:`adjusted_lr`.
        ns_coefficients, eps: the Newton–Schulz polynomial and the norm clamp (torch's defaults).

    On plain tensors a step equals ``torch.optim.Muon`` (same bf16 iteration, same momentum and
    lr adjustment). On ``DTensor`` parameters (``fully_shard``, TP, both, experts on an EP mesh) every
    matrix is orthogonalised exactly once, by one rank, with the work spread over the ranks by
    counted FLOPs; ``last_step_stats`` reports this rank's share of the last step.
    """

    def __init__(self, params, lr: float = 1e-3, momentum: float = 0.95, nesterov: bool = True, ns_steps: int = 5,
                 weight_decay: float = 0.0, adjust_lr: Optional[str] = "match_rms_adamw", *,
                 ns_coefficients: Tuple[float, float, float] = NS_COEFFICIENTS, eps: float = 1e-7) -> None:
        _check_hparams(lr=lr, momentum=momentum, ns_steps=ns_steps, weight_decay=weight_decay, adjust_lr=adjust_lr,
                       ns_coefficients=ns_coefficients, eps=eps, nesterov=nesterov)
        defaults = {"lr": lr, "momentum": momentum, "nesterov": nesterov, "ns_steps": ns_steps,
                    "weight_decay": weight_decay, "adjust_lr": adjust_lr, "ns_coefficients": tuple(ns_coefficients),
                    "eps": eps}
        super().__init__(params, defaults)
        self._plans: Dict[tuple, WorkPlan] = {}
        self.last_step_stats: Dict[str, Any] = {}

    def add_param_group(self, param_group: Dict[str, Any]) -> None:
        """Add a param group (its parameters must have 2 or more dims)."""
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        _check_hparams(**{k: group[k] for k in ("lr", "momentum", "ns_steps", "weight_decay", "adjust_lr",
                                                 "ns_coefficients", "eps", "nesterov")})
        for i, p in enumerate(group["params"]):
            if p.dim() < 2:
                raise ValueError(f"Muon: parameter {i} of param group {len(self.param_groups) - 1} has shape "
                                 f"{tuple(p.shape)}; Muon needs 2 or more dims (give it to AdamW)")

    # ------------------------------------------------------------------ step
    @torch.no_grad()
    def step(self, closure: Optional[Callable[[], Any]] = None):
        """One optimizer step (collective when some parameter is a sharded DTensor: call on every rank)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        rank = _rank()
        items = self._collect(rank)
        if not items:
            self.last_step_stats = {"flops": 0, "matrices": 0, "units": 0, "sent_bytes": 0}
            return loss
        plan = self._plan(items, rank)
        results, stats = _orthogonalise(plan, items, rank)
        for item, ortho in zip(items, results):
            s = item.settings
            rows, cols = item.layout.shape[-2], item.layout.shape[-1]
            item.local.mul_(1 - s["lr"] * s["weight_decay"])
            item.local.add_(ortho, alpha=-adjusted_lr(s["lr"], s["adjust_lr"], rows, cols))
        self.last_step_stats = stats
        return loss

    def _collect(self, rank: int) -> List[_Item]:
        items = []
        for gi, group in enumerate(self.param_groups):
            momentum = group["momentum"]
            for pi, p in enumerate(group["params"]):
                if p.grad is None:
                    continue
                grad = _local(p.grad)
                if grad.is_sparse or torch.is_complex(grad):
                    raise RuntimeError(f"Muon: parameter {pi} of param group {gi} has a sparse or complex gradient")
                local = _local(p)
                state = self.state[p]
                if "momentum_buffer" not in state:
                    # like torch's optimizers: a DTensor for a DTensor parameter (TP), a plain local tensor
                    # for one FSDP's step hook shows as its local shard
                    state["momentum_buffer"] = torch.zeros_like(p.grad, memory_format=torch.preserve_format)
                buf = _local(state["momentum_buffer"])
                buf.lerp_(grad, 1 - momentum)
                update = grad.lerp(buf, momentum) if group["nesterov"] else buf
                layout, region, pg = _layout(p, rank)
                items.append(_Item(p, local, update, region, pg, layout, group))
        return items

    def _plan(self, items: List[_Item], rank: int) -> WorkPlan:
        key = tuple((id(it.param), id(_spec_of(it.param)), it.settings["ns_steps"]) for it in items)
        plan = self._plans.get(key)
        if plan is None:
            plan = plan_work([it.layout for it in items], [it.settings["ns_steps"] for it in items])
            _check_consistent(plan, items, rank)
            if len(self._plans) > 8:
                self._plans.clear()
            self._plans[key] = plan
        return plan

    def work_plan(self) -> Optional[WorkPlan]:
        """The plan of the last step (None before the first step)."""
        return next(reversed(self._plans.values()), None) if self._plans else None


def _check_hparams(*, lr, momentum, ns_steps, weight_decay, adjust_lr, ns_coefficients, eps, nesterov) -> None:
    checks = (("lr", lr, 0.0, math.inf), ("momentum", momentum, 0.0, 1.0),
              ("weight_decay", weight_decay, 0.0, math.inf), ("eps", eps, 0.0, math.inf))
    for name, value, lo, hi in checks:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value < hi:
            raise ValueError(f"Muon({name}): expected a number in [{lo}, {hi}), got {value!r}")
    if isinstance(ns_steps, bool) or not isinstance(ns_steps, int) or not 1 <= ns_steps < 100:
        raise ValueError(f"Muon(ns_steps): expected an int in [1, 99], got {ns_steps!r}")
    if adjust_lr not in _ADJUST:
        raise ValueError(f"Muon(adjust_lr): expected one of {list(_ADJUST)}, got {adjust_lr!r}")
    if len(tuple(ns_coefficients)) != 3:
        raise ValueError(f"Muon(ns_coefficients): expected three numbers (a, b, c), got {ns_coefficients!r}")
    if not isinstance(nesterov, bool):
        raise ValueError(f"Muon(nesterov): expected True or False, got {nesterov!r}")


# ---------------------------------------------------------------------- the distributed orthogonalisation
def _groups_of(items: List[_Item]) -> Dict[Tuple[int, ...], Tuple[Any, Tuple[int, ...]]]:
    """mesh ranks -> (process group, global ranks in group-rank order)."""
    out = {}
    for it in items:
        key = tuple(it.layout.ranks)
        if it.group is not None and key not in out:
            out[key] = (it.group, tuple(dist.get_process_group_ranks(it.group)))
    return out


def _check_consistent(plan: WorkPlan, items: List[_Item], rank: int) -> None:
    """Every rank of every mesh group must have planned the same units (same parameters with gradients)."""
    groups = _groups_of(items)
    for ranks in sorted(groups):
        digest = hash(tuple(d for u, d in zip(plan.units, plan.digest()) if u.group == ranks)) & ((1 << 62) - 1)
        t = torch.tensor([digest, -digest], dtype=torch.int64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=groups[ranks][0])
        if int(t[0]) != -int(t[1]):
            raise RuntimeError(f"Muon: the ranks {ranks} of one mesh planned different work (rank {rank}); every rank "
                               "must step the same parameters with gradients in the same order")


def _a2a(pieces: Dict[int, List[torch.Tensor]], recv: Dict[int, int], ranks: Sequence[int], group) -> torch.Tensor:
    """One all-to-all over ``group`` (``ranks`` in group-rank order): send the concatenated ``pieces[dst]``,
    receive ``recv[src]`` elements from every ``src``, concatenated in that order."""
    send_sizes = [sum(p.numel() for p in pieces.get(r, ())) for r in ranks]
    recv_sizes = [recv.get(r, 0) for r in ranks]
    flat = [p.reshape(-1) for r in ranks for p in pieces.get(r, ())]
    inp = torch.cat(flat) if flat else torch.empty(0, dtype=torch.bfloat16)
    out = torch.empty(sum(recv_sizes), dtype=torch.bfloat16, device=inp.device)
    dist.all_to_all_single(out, inp, recv_sizes, send_sizes, group=group)
    return out


def _transfers(plan: WorkPlan, rank: int, gather: bool):
    """``(moves, groups)``: per mesh group, the ``(src, dst, unit index, region)`` moves this rank takes part
    in, in plan order — sources -> owner (``gather``) or owner -> holders, moves within one rank included —
    and the groups whose ranks must all join an all-to-all (some unit of the group is not local)."""
    moves: Dict[Tuple[int, ...], List[Tuple[int, int, int, Region]]] = defaultdict(list)
    comm = set()
    for k, u in enumerate(plan.units):
        if rank not in u.group:
            continue
        if not u.is_local:
            comm.add(u.group)
        ends = [(r, u.owner, reg) for r, reg in u.sources] if gather else [(u.owner, r, reg) for r, reg in u.targets]
        for src, dst, reg in ends:
            if rank in (src, dst):
                moves[u.group].append((src, dst, k, reg))
    return moves, comm


def _exchange(transfers, rank: int, groups: Dict, read: Callable, write: Callable) -> int:
    """Carry out :func:`_transfers`: local moves by copy, the rest by one all-to-all per group (every rank
    of the group joins it; groups in one global order). ``read(k, region)`` gives the piece to send,
    ``write(k, region, piece)`` stores a received one. Returns the bytes this rank sent."""
    moves, comm = transfers
    sent = 0
    for key in sorted(set(moves) | comm):
        pieces: Dict[int, List[torch.Tensor]] = defaultdict(list)
        recv: Dict[int, int] = defaultdict(int)
        for src, dst, k, reg in moves.get(key, ()):
            if src == dst:
                write(k, reg, read(k, reg))
            elif src == rank:
                pieces[dst].append(read(k, reg).bfloat16())
            else:
                recv[src] += _numel(reg)
        if key not in comm:
            continue
        pg, order = groups[key]
        out = _a2a(pieces, recv, order, pg)
        sent += sum(p.numel() * p.element_size() for ps in pieces.values() for p in ps)
        cursor = 0
        for src in order:
            for s, dst, k, reg in moves.get(key, ()):
                if s == src and dst == rank and src != rank:
                    n = _numel(reg)
                    write(k, reg, out[cursor:cursor + n].view([x for _, x in reg]))
                    cursor += n
    return sent


def _run_ns(plan: WorkPlan, items: List[_Item], inputs: Dict[int, torch.Tensor], rank: int) -> Dict[int, torch.Tensor]:
    """Orthogonalise every unit this rank owns; same-shaped matrices go through one batched call."""
    batches: Dict[tuple, List[int]] = defaultdict(list)
    for k, u in enumerate(plan.units):
        if u.owner == rank:
            s = items[u.item].settings
            rows, cols = u.region[-2][1], u.region[-1][1]
            batches[(rows, cols, s["ns_steps"], tuple(s["ns_coefficients"]), s["eps"])].append(k)
    outputs: Dict[int, torch.Tensor] = {}
    for (rows, cols, steps, coeffs, eps), ks in batches.items():
        stacked = torch.cat([inputs[k].reshape(-1, rows, cols) for k in ks]) if len(ks) > 1 \
            else inputs[ks[0]].reshape(-1, rows, cols)
        done = newton_schulz(stacked, coeffs, steps, eps)
        start = 0
        for k in ks:
            n = inputs[k].numel() // (rows * cols)
            outputs[k] = done[start:start + n].reshape(inputs[k].shape)
            start += n
    return outputs


def _orthogonalise(plan: WorkPlan, items: List[_Item], rank: int) -> Tuple[List[torch.Tensor], Dict[str, Any]]:
    """Gather every unit to its owner, orthogonalise, send every holder its pieces (see the module docstring)."""
    groups = _groups_of(items)
    units = plan.units
    inputs = {k: torch.empty([n for _, n in u.region], dtype=torch.bfloat16, device=items[u.item].update.device)
              for k, u in enumerate(units) if u.owner == rank}

    def read_update(k, reg):
        it = items[units[k].item]
        return _narrow(it.update, reg, it.region)

    def write_input(k, reg, piece):
        _narrow(inputs[k], reg, units[k].region).copy_(piece)

    sent = _exchange(_transfers(plan, rank, True), rank, groups, read_update, write_input)
    outputs = _run_ns(plan, items, inputs, rank)
    results = [torch.empty([n for _, n in it.region], dtype=torch.bfloat16, device=it.update.device) for it in items]

    def read_output(k, reg):
        return _narrow(outputs[k], reg, units[k].region)

    def write_result(k, reg, piece):
        it = units[k].item
        _narrow(results[it], reg, items[it].region).copy_(piece)

    sent += _exchange(_transfers(plan, rank, False), rank, groups, read_output, write_result)
    mine = plan.owned_by(rank)
    stats = {"flops": sum(u.flops for u in mine), "matrices": sum(u.matrices for u in mine), "units": len(mine),
             "sent_bytes": sent, "planned_loads": dict(plan.loads)}
    return results, stats
