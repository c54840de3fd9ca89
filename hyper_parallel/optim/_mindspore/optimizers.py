# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""MindSpore optimizers on MindSpore ``Parameter`` s holding local shards: ``AdamW``, ``Muon``, ``ChainedOptimizer``.

MindSpore parameters cannot be DTensors: a sharded parameter holds this rank's shard as plain data and
its layout is recorded on its cell (``hyper_parallel.tp._mindspore.styles``); :func:`parameter_specs`
collects those layouts by parameter name.

* ``AdamW`` follows torch's AdamW with ``mint`` elementwise ops (``mindspore.mint.optim.AdamW`` has
  no CPU kernel), so it is right on local shards as they are.
* ``Muon`` uses the same work plan as the torch one (``hyper_parallel.optim.planner``): every matrix is
  orthogonalised by one owner rank, spread by counted FLOPs. mccl on CPU has no native all-to-all, so
  the update of a sharded matrix is all-gathered (native), the owner runs Newton–Schulz, and every
  owner broadcasts its results once per mesh (native) — the "gather + dedup + broadcast" scheme.
  MindSpore's CPU kernels have no bf16 matmul, so Newton–Schulz runs in float32 on CPU (bf16 elsewhere).
* ``ChainedOptimizer`` runs several of them on one gradient tuple (aligned with ``chain.parameters``).
"""
from __future__ import annotations

import math
from collections import defaultdict
from typing import Any, Dict, List, Optional, Sequence, Tuple

import mindspore as ms
import numpy as np
from mindspore import mint, nn, ops

from hyper_parallel.optim.planner import TensorLayout, WorkPlan, plan_work
from hyper_parallel.platform import get_platform
from hyper_parallel.platform.mindspore.dtensor import DTensor

__all__ = ["AdamW", "Muon", "ChainedOptimizer", "parameter_specs", "newton_schulz"]

NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)
_ADJUST = ("match_rms_adamw", "spectral", "original", None)


class AdamW:
    """AdamW with torch's semantics (decoupled weight decay, bias-corrected moments) on MindSpore parameters.

    Being elementwise it is right on local shards as they are. ``step(gradients)`` (or a call) takes the
    gradients aligned with ``self.parameters``; ``state[name]`` holds ``step``, ``exp_avg``, ``exp_avg_sq``.

    ``fused`` (torch's keyword; default on): one fused kernel per parameter,
    ``mindspore.ops.AdamWeightDecay`` (what ``mindspore.nn.AdamWeightDecay`` runs; it has a CPU kernel, unlike
    ``mint.optim.AdamW``), updating the parameter and both moments in place. That kernel has no bias
    correction; torch's ``p (1 - lr wd) - lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps)`` is the same as its
    ``p - lr' (m / (sqrt(v) + eps') + wd' p)`` with ``lr' = lr sqrt(bc2) / bc1``, ``eps' = eps sqrt(bc2)``,
    ``wd' = wd bc1 / sqrt(bc2)``, so the results equal the op-by-op formula up to float32 rounding (1e-7
    relative per step). On the llama3 ``debug`` model: 21 kernel launches instead of ~250 PyNative ops, about
    8x less time per step (``docs/mindspore.md``). ``fused=False``: the op-by-op ``mint`` formula, in torch's
    order of operations. :meth:`compile` (the trainer's ``training.compile``): those fused kernels as one
    ``mindspore.jit`` graph, one launch per step, bit-exactly the same values.
    """

    def __init__(self, params, lr: float = 1e-3, betas: Tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, *, fused: Optional[bool] = None) -> None:
        if fused is not None and not isinstance(fused, bool):
            raise ValueError(f"AdamW(fused): expected True, False or None, got {fused!r}")
        self.fused = fused is not False
        self.compiled = False  # fused kernels of every parameter in one mindspore.jit graph (see compile())
        self._graph: Optional[Tuple[Tuple[int, ...], Any]] = None  # (ids of the moments it captured, the graph)
        self._moments: Dict[str, ms.Parameter] = {}  # compiled: the moment Parameters this optimizer made
        self._owned: Dict[str, Tuple[Any, Any]] = {}  # the moments this optimizer made (updated in place)
        self._kernel = ops.AdamWeightDecay() if self.fused else None
        defaults = {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay}
        params = list(params)
        if not params:
            raise ValueError("AdamW(params): expected at least one parameter")
        groups = params if isinstance(params[0], dict) else [{"params": params}]
        self.param_groups: List[Dict[str, Any]] = []
        for i, g in enumerate(groups):
            group = {**defaults, **g, "params": list(g["params"])}
            b1, b2 = group["betas"]
            for name, value, hi in (("lr", group["lr"], math.inf), ("eps", group["eps"], math.inf),
                                    ("weight_decay", group["weight_decay"], math.inf), ("betas[0]", b1, 1.0),
                                    ("betas[1]", b2, 1.0)):
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < hi:
                    raise ValueError(f"AdamW({name}): expected a number in [0, {hi}), got {value!r} (param group {i})")
            self.param_groups.append(group)
        self.state: Dict[str, Dict[str, Any]] = {}

    @property
    def parameters(self) -> List[ms.Parameter]:
        """Every parameter, in group order (the order of the gradients ``step`` takes)."""
        return [p for g in self.param_groups for p in g["params"]]

    def __call__(self, gradients: Sequence[Any]) -> bool:
        return self.step(gradients)

    def compile(self) -> "AdamW":
        """Run the fused kernels of every parameter as one ``mindspore.jit`` graph (as ``nn.AdamWeightDecay``
        does), one launch per step instead of one per parameter; the moments become ``Parameter`` s (a graph
        updates only those in place). The same kernel and arguments, so the same values. Needs ``fused``."""
        if not self.fused:
            raise ValueError("AdamW.compile(): needs the fused kernel (fused=False given)")
        self.compiled = True
        return self

    def step(self, gradients: Sequence[Any]) -> bool:
        """One AdamW update of every parameter with its gradient."""
        params = self.parameters
        if len(gradients) != len(params):
            raise ValueError(f"AdamW.step: {len(gradients)} gradients for {len(params)} parameters")
        if self.compiled:
            self._compiled_step(params, gradients)
            return True
        groups = {id(p): g for g in self.param_groups for p in g["params"]}
        for p, grad in zip(params, gradients):
            g = groups[id(p)]
            st = self.state.get(p.name)
            if st is None:  # (not setdefault: its default, two zero tensors, would be built every step)
                st = self.state[p.name] = {"step": 0, "exp_avg": mint.zeros(tuple(p.shape), dtype=p.dtype),
                                           "exp_avg_sq": mint.zeros(tuple(p.shape), dtype=p.dtype)}
                if self.fused:
                    self._owned[p.name] = (st["exp_avg"], st["exp_avg_sq"])
            st["step"] += 1
            if self.fused:
                self._fused_update(p, grad, g, st)
            else:
                self._update(p, grad, g, st)
        return True

    def _fused_update(self, p, grad, g, st) -> None:
        """``ops.AdamWeightDecay`` in place on ``p`` and the moments, the bias correction folded in."""
        owned = self._owned.get(p.name, ())
        if not owned or owned[0] is not st["exp_avg"] or owned[1] is not st["exp_avg_sq"]:
            # new, or set from outside (a checkpoint load may share memory): write into copies of our own
            st["exp_avg"], st["exp_avg_sq"] = st["exp_avg"].copy(), st["exp_avg_sq"].copy()
            self._owned[p.name] = (st["exp_avg"], st["exp_avg_sq"])
        b1, b2 = g["betas"]
        lr, eps, wd = self._scalars(g, st["step"])
        self._kernel(p, st["exp_avg"], st["exp_avg_sq"], lr, b1, b2, eps, wd,
                     grad if grad.dtype == p.dtype else grad.astype(p.dtype))

    def _scalars(self, g, step: int) -> Tuple[float, float, float]:
        """The fused kernel's ``lr``, ``eps``, ``weight_decay`` with torch's bias correction folded in."""
        b1, b2 = g["betas"]
        bc1, bc2_sqrt = 1 - b1 ** step, math.sqrt(1 - b2 ** step)
        return g["lr"] * bc2_sqrt / bc1, g["eps"] * bc2_sqrt, g["weight_decay"] * bc1 / bc2_sqrt

    def _compiled_step(self, params: List[ms.Parameter], gradients: Sequence[Any]) -> None:
        """:meth:`step` as one graph: the moments as ``Parameter`` s of this optimizer, per parameter its
        kernel scalars (bias-corrected on the host, as float32 tensors)."""
        groups = {id(p): g for g in self.param_groups for p in g["params"]}
        moments, scalars = [], []
        for p in params:
            st = self._moment_parameters(p)
            st["step"] += 1
            moments.append((st["exp_avg"], st["exp_avg_sq"]))
            scalars.append(self._scalars(groups[id(p)], st["step"]))
        key = tuple(id(t) for pair in moments for t in pair)
        if self._graph is None or self._graph[0] != key:
            self._graph = (key, _fused_graph(params, moments, [groups[id(p)]["betas"] for p in params]))
        table = ms.Tensor(np.asarray(scalars, np.float32).T)  # [lr, eps, wd] x parameters: one host copy
        grads = tuple(gr if gr.dtype == p.dtype else gr.astype(p.dtype) for p, gr in zip(params, gradients))
        self._graph[1](ms.mutable(grads), table)  # variables: no recompiling per value

    def _moment_parameters(self, p) -> Dict[str, Any]:
        """``p`` 's state with its moments as this optimizer's own ``Parameter`` s (new, or copies of moments set
        from outside, e.g. by a checkpoint load, which are not written into)."""
        st = self.state.get(p.name)
        if st is None:
            st = self.state[p.name] = {"step": 0, "exp_avg": mint.zeros(tuple(p.shape), dtype=p.dtype),
                                       "exp_avg_sq": mint.zeros(tuple(p.shape), dtype=p.dtype)}
        for key in ("exp_avg", "exp_avg_sq"):
            name = f"{p.name}.{key}"
            if st[key] is not self._moments.get(name):
                st[key] = self._moments[name] = ms.Parameter(st[key].copy(), name=name, requires_grad=False)
        return st

    @staticmethod
    def _update(p, grad, g, st) -> None:
        """torch's single-tensor AdamW, op by op."""
        b1, b2 = g["betas"]
        st["exp_avg"] = st["exp_avg"] + (1 - b1) * (grad - st["exp_avg"])
        st["exp_avg_sq"] = b2 * st["exp_avg_sq"] + (1 - b2) * grad * grad
        step_size = g["lr"] / (1 - b1 ** st["step"])
        denom = mint.sqrt(st["exp_avg_sq"]) / math.sqrt(1 - b2 ** st["step"]) + g["eps"]
        # in place (not set_data): a layer compiled by mindspore.jit keeps reading this parameter's storage
        ops.assign(p, p.value() * (1 - g["lr"] * g["weight_decay"]) - step_size * st["exp_avg"] / denom)


def _fused_graph(params, moments, betas):
    """``mindspore.jit`` of ``ops.AdamWeightDecay`` over every parameter (in place on the parameters and the
    moments, which must be ``Parameter`` s); called with the tuple of gradients and the ``[3, parameters]``
    float32 table of the kernels' ``lr``, ``eps`` and ``weight_decay``."""
    weights = ms.ParameterTuple(params)
    m1 = ms.ParameterTuple([m for m, _ in moments])
    m2 = ms.ParameterTuple([v for _, v in moments])
    b1s = tuple(float(b[0]) for b in betas)
    b2s = tuple(float(b[1]) for b in betas)
    kernel = ops.AdamWeightDecay()

    def update(grads, table):
        out = ()
        for i in range(len(weights)):  # pylint: disable=consider-using-enumerate  # (indexing compiles)
            out = out + (kernel(weights[i], m1[i], m2[i], table[0][i], b1s[i], b2s[i], table[1][i], table[2][i],
                                grads[i]),)
        return out

    return ms.jit(update)


def parameter_specs(cell: nn.Cell) -> Dict[str, Any]:
    """``{parameter name: DTensorSpec}`` of every sharded parameter of ``cell`` (TP / shard_module layouts)."""
    out = {}
    for _, sub in cell.cells_and_names():
        for leaf, spec in sub.__dict__.get("_hp_param_specs", {}).items():
            param = getattr(sub, leaf, None)
            if param is not None:
                out[param.name] = spec
    return out


def _adjusted_lr(lr: float, mode: Optional[str], rows: int, cols: int) -> float:
    if mode == "match_rms_adamw":
        return lr * 0.2 * math.sqrt(max(rows, cols))
    if mode == "spectral":
        return lr * math.sqrt(rows / cols)
    if mode == "original":
        return lr * math.sqrt(max(1.0, rows / cols))
    return lr


def newton_schulz(x: ms.Tensor, coefficients: Sequence[float] = NS_COEFFICIENTS, steps: int = 5,
                  eps: float = 1e-7, dtype: Any = None) -> ms.Tensor:
    """The Muon Newton–Schulz iteration on a batch ``[batch, rows, cols]`` (see the torch ``newton_schulz``)."""
    a, b, c = coefficients
    dtype = dtype or (ms.float32 if ms.get_context("device_target") == "CPU" else ms.bfloat16)
    out = x.astype(dtype)
    tall = out.shape[-2] > out.shape[-1]
    if tall:
        out = out.swapaxes(-2, -1)
    norm = mint.sqrt(mint.sum(out * out, dim=(-2, -1), keepdim=True))
    out = out / mint.clamp(norm, min=eps)
    for _ in range(steps):
        gram = mint.bmm(out, out.swapaxes(-2, -1))
        update = b * gram + c * mint.bmm(gram, gram)
        out = a * out + mint.bmm(update, out)
    return out.swapaxes(-2, -1) if tall else out


def _narrow(t: ms.Tensor, region, base) -> ms.Tensor:
    for d, ((start, length), (b0, n)) in enumerate(zip(region, base)):
        if start != b0 or length != n:
            t = mint.narrow(t, d, start - b0, length)
    return t


class Muon:
    """Muon for MindSpore parameters (local shards), with the work spread over ranks.

    Args: as the torch ``Muon`` (``params``, ``lr``, ``momentum``, ``nesterov``, ``ns_steps``,
    ``weight_decay``, ``adjust_lr``), plus ``specs``: ``{parameter name: DTensorSpec}`` of the sharded
    parameters (:func:`parameter_specs`); parameters without a spec are plain (whole on this rank).
    ``step(gradients)`` (or a call) takes the gradients aligned with ``self.parameters``.
    """

    def __init__(self, params, lr: float = 1e-3, momentum: float = 0.95, nesterov: bool = True, ns_steps: int = 5,
                 weight_decay: float = 0.0, adjust_lr: Optional[str] = "match_rms_adamw", *,
                 specs: Optional[Dict[str, Any]] = None, ns_coefficients=NS_COEFFICIENTS, eps: float = 1e-7) -> None:
        defaults = {"lr": lr, "momentum": momentum, "nesterov": nesterov, "ns_steps": ns_steps,
                    "weight_decay": weight_decay, "adjust_lr": adjust_lr, "ns_coefficients": tuple(ns_coefficients),
                    "eps": eps}
        params = list(params)
        if not params:
            raise ValueError("Muon(params): expected at least one parameter")
        groups = params if isinstance(params[0], dict) else [{"params": params}]
        self.param_groups: List[Dict[str, Any]] = []
        for g in groups:
            group = {**defaults, **g, "params": list(g["params"])}
            _check(group, len(self.param_groups))
            self.param_groups.append(group)
        self.specs = dict(specs or {})
        self.state: Dict[str, Dict[str, Any]] = {}
        self._plans: Dict[tuple, WorkPlan] = {}
        self.last_step_stats: Dict[str, Any] = {}

    @property
    def parameters(self) -> List[ms.Parameter]:
        """Every parameter, in group order (the order of the gradients ``step`` takes)."""
        return [p for g in self.param_groups for p in g["params"]]

    def __call__(self, gradients: Sequence[Any]) -> bool:
        return self.step(gradients)

    def step(self, gradients: Sequence[Any]) -> bool:
        """One update (a collective when some parameter is sharded: call on every rank)."""
        params = self.parameters
        if len(gradients) != len(params):
            raise ValueError(f"Muon.step: {len(gradients)} gradients for {len(params)} parameters")
        rank = get_platform("mindspore").get_rank()
        items = self._momentum(params, gradients, rank)
        plan = self._plan(items)
        results = self._orthogonalise(plan, items, rank)
        for (p, group, _, layout, _, _), ortho in zip(items, results):
            adj = _adjusted_lr(group["lr"], group["adjust_lr"], layout.shape[-2], layout.shape[-1])
            ops.assign(p, p.value() * (1 - group["lr"] * group["weight_decay"]) - adj * ortho.astype(p.dtype))
        mine = plan.owned_by(rank)
        self.last_step_stats = {"flops": sum(u.flops for u in mine), "matrices": sum(u.matrices for u in mine),
                                "units": len(mine)}
        return True

    def _momentum(self, params, gradients, rank):
        items = []
        groups = {id(p): g for g in self.param_groups for p in g["params"]}
        for p, grad in zip(params, gradients):
            group = groups[id(p)]
            mu = group["momentum"]
            state = self.state.setdefault(p.name, {})
            buf = state.get("momentum_buffer")
            if buf is None:
                buf = mint.zeros(tuple(grad.shape), dtype=grad.dtype)
            buf = buf + (1 - mu) * (grad - buf)
            state["momentum_buffer"] = buf
            upd = grad + mu * (buf - grad) if group["nesterov"] else buf
            spec = self.specs.get(p.name)
            if spec is None:
                layout = TensorLayout.plain(tuple(p.shape), rank)
                region, pg = tuple((0, s) for s in p.shape), None
            else:
                mesh = spec.mesh
                layout = TensorLayout(tuple(spec.shape), tuple(mesh.shape), tuple(mesh.topology.ranks),
                                      tuple(spec.placements))
                local, offset = spec.local_shape_and_offset(mesh.get_coordinate())
                region, pg = tuple(zip(offset, local)), mesh.whole_group()
            items.append((p, group, upd, layout, region, pg))
        return items

    def _plan(self, items) -> WorkPlan:
        key = tuple((it[0].name, id(self.specs.get(it[0].name)), it[1]["ns_steps"]) for it in items)
        plan = self._plans.get(key)
        if plan is None:
            plan = plan_work([it[3] for it in items], [it[1]["ns_steps"] for it in items],
                             names=[it[0].name for it in items])
            self._plans[key] = plan
        return plan

    def _orthogonalise(self, plan: WorkPlan, items, rank: int) -> List[ms.Tensor]:
        full = {}
        for i, it in enumerate(items):
            spec = self.specs.get(it[0].name)
            if spec is not None and any(u.item == i and not u.is_local for u in plan.units):
                full[i] = DTensor(it[2], spec).full_tensor()  # all-gather (native on mccl)
        outputs = self._owned_outputs(plan, items, full, rank)
        outputs.update(self._broadcast(plan, items, outputs, rank))
        results = []
        for i, it in enumerate(items):
            # the units of one parameter split it along dim 0 only: this rank's pieces, by start, tile its shard
            pieces = sorted(((reg[0][0], _narrow(outputs[k], reg, u.region))
                             for k, u in enumerate(plan.units) if u.item == i for r, reg in u.targets if r == rank),
                            key=lambda t: t[0])
            if not pieces:
                results.append(mint.zeros(tuple(it[2].shape), dtype=ms.float32))
            else:
                results.append(pieces[0][1] if len(pieces) == 1 else mint.cat([t for _, t in pieces], dim=0))
        return results

    @staticmethod
    def _owned_outputs(plan: WorkPlan, items, full, rank: int) -> Dict[int, ms.Tensor]:
        batches: Dict[tuple, List[int]] = defaultdict(list)
        for k, u in enumerate(plan.units):
            if u.owner == rank:
                g = items[u.item][1]
                rows, cols = u.region[-2][1], u.region[-1][1]
                batches[(rows, cols, g["ns_steps"], tuple(g["ns_coefficients"]), g["eps"])].append(k)
        outputs = {}
        for (rows, cols, steps, coeffs, eps), ks in batches.items():
            pieces = []
            for k in ks:
                u = plan.units[k]
                upd, region = items[u.item][2], items[u.item][4]
                src = full.get(u.item)
                piece = _narrow(src, u.region, tuple((0, s) for s in src.shape)) if src is not None \
                    else _narrow(upd, u.region, region)
                pieces.append(piece.reshape(-1, rows, cols))
            done = newton_schulz(mint.cat(pieces) if len(pieces) > 1 else pieces[0], coeffs, steps, eps)
            start = 0
            for k, piece in zip(ks, pieces):
                n = piece.shape[0]
                outputs[k] = done[start:start + n].reshape(tuple(x for _, x in plan.units[k].region)).astype(
                    ms.float32)
                start += n
        return outputs

    @staticmethod
    def _broadcast(plan: WorkPlan, items, outputs, rank: int) -> Dict[int, ms.Tensor]:
        """Every owner broadcasts its non-local results, one call per (mesh, owner)."""
        plat = get_platform("mindspore")
        received = {}
        by_group: Dict[Tuple[int, ...], List[int]] = defaultdict(list)
        for k, u in enumerate(plan.units):
            if not u.is_local and rank in u.group:
                by_group[u.group].append(k)
        for key in sorted(by_group):
            ks = by_group[key]
            group = items[plan.units[ks[0]].item][5]
            for owner in sorted({plan.units[k].owner for k in ks}):
                received.update(_broadcast_owned(plat, plan, [k for k in ks if plan.units[k].owner == owner],
                                                 owner, rank, outputs, group))
        return received


def _broadcast_owned(plat, plan: WorkPlan, ks: List[int], owner: int, rank: int, outputs, group
                     ) -> Dict[int, ms.Tensor]:
    """One broadcast of ``owner``'s results for units ``ks``; the received ones (empty on the owner)."""
    sizes = [math.prod(n for _, n in plan.units[k].region) for k in ks]
    if owner == rank:
        plat.broadcast(mint.cat([outputs[k].reshape(-1) for k in ks]), owner, group)
        return {}
    flat = plat.broadcast(mint.zeros((sum(sizes),), dtype=ms.float32), owner, group)
    out, start = {}, 0
    for k, n in zip(ks, sizes):
        out[k] = flat[start:start + n].reshape(tuple(x for _, x in plan.units[k].region))
        start += n
    return out


def _check(group: Dict[str, Any], index: int) -> None:
    for name, lo, hi in (("lr", 0.0, math.inf), ("momentum", 0.0, 1.0), ("weight_decay", 0.0, math.inf)):
        v = group[name]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v < hi:
            raise ValueError(f"Muon({name}): expected a number in [{lo}, {hi}), got {v!r} (param group {index})")
    if not isinstance(group["ns_steps"], int) or not 1 <= group["ns_steps"] < 100:
        raise ValueError(f"Muon(ns_steps): expected an int in [1, 99], got {group['ns_steps']!r}")
    if group["adjust_lr"] not in _ADJUST:
        raise ValueError(f"Muon(adjust_lr): expected one of {list(_ADJUST)}, got {group['adjust_lr']!r}")
    for i, p in enumerate(group["params"]):
        if len(p.shape) < 2:
            raise ValueError(f"Muon: parameter {i} ({p.name}) of param group {index} has shape {tuple(p.shape)}; "
                             "Muon needs 2 or more dims (give it to AdamW)")


class ChainedOptimizer:
    """Several MindSpore optimizers as one: ``step(gradients)`` splits the gradients (aligned with
    ``self.parameters``, the children's parameters in order) among the children."""

    def __init__(self, optimizers: Sequence[Any]) -> None:
        if not optimizers:
            raise ValueError("ChainedOptimizer(optimizers): expected at least one optimizer, got an empty list")
        seen = {}
        for i, opt in enumerate(optimizers):
            for p in _params_of(opt):
                if p.name in seen:
                    raise ValueError(f"ChainedOptimizer: parameter {p.name!r} belongs to optimizers[{seen[p.name]}] "
                                     f"and optimizers[{i}]")
                seen[p.name] = i
        self.optimizers = list(optimizers)

    @property
    def parameters(self) -> List[ms.Parameter]:
        """Every child's parameters, in order (the order of the gradients ``step`` takes)."""
        return [p for opt in self.optimizers for p in _params_of(opt)]

    @property
    def param_groups(self) -> List[Dict[str, Any]]:
        """Every child's param groups (the same dicts)."""
        return [g for opt in self.optimizers for g in opt.param_groups]

    def __call__(self, gradients: Sequence[Any]) -> bool:
        return self.step(gradients)

    def step(self, gradients: Sequence[Any]) -> bool:
        """Step every child with its slice of ``gradients``."""
        gradients = tuple(gradients)
        total = len(self.parameters)
        if len(gradients) != total:
            raise ValueError(f"ChainedOptimizer.step: {len(gradients)} gradients for {total} parameters")
        start = 0
        for opt in self.optimizers:
            n = len(_params_of(opt))
            opt(gradients[start:start + n])
            start += n
        return True


def _params_of(opt: Any) -> List[ms.Parameter]:
    params = opt.parameters
    return list(params() if callable(params) else params)
