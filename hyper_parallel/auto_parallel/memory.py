# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Peak memory per rank of a training step (pure Python): :func:`estimate_memory`.

The estimate is a walk through one steady-state step of the busiest rank (optimizer states exist,
gradients are freed by ``zero_grad(set_to_none=True)`` at the end of each step):

* **state**: local parameters (dense ones split by TP and sharded by FSDP over ``dp_shard * cp``;
  experts split by EP and sharded over ``efsdp``), optimizer states (fp32, 2 for AdamW, 1 for Muon);
* **forward** adds each layer's saved activations (``hyper_parallel.activation.memory``'s exact count
  of what autograd keeps in a Llama layer, with TP/SP/CP splits; with full recomputation only the
  layer input) times the microbatches in flight on that rank (read from the pipeline schedule:
  forwards started minus backwards finished), the head's saved tensors (final norm, log-softmax) and
  the FSDP unit being gathered (plus the prefetched next one);
* **backward start** (usually the peak): the loss gradient and the logits' gradient on top;
* **backward** frees a layer's activations and adds its gradients (full size before FSDP's
  reduce-scatter for the unit in flight) and, with recomputation, that layer's recomputed tensors;
* **optimizer step**: state + gradients + the largest parameter's temporaries.

The result (:class:`MemoryEstimate`) keeps every component and the phase where the peak happens.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Dict, List, Sequence, Tuple

from hyper_parallel.auto_parallel.plan import ParallelPlan, TrainConfig
from hyper_parallel.auto_parallel.shape import ModelShape, model_shape

__all__ = ["MemoryEstimate", "estimate_memory", "stage_layers", "inflight_microbatches", "inflight_with_gradients",
           "layer_activation_bytes", "local_layer_params", "cached_schedule", "largest_tensor"]


@dataclass(frozen=True)
class MemoryEstimate:
    """Peak bytes of the busiest rank and its parts.

    ``components``: params, grads, optimizer, activations (saved, all in-flight microbatches),
    fsdp_buffers (gathered units and full-size gradients in flight), temporaries (loss and logits
    gradients, recomputation, optimizer temporaries) — each at the moment of the peak.
    ``per_rank``: peak bytes of every pipeline rank (``pp`` entries). ``phase``: where the peak is.
    """

    peak_bytes: int
    components: Dict[str, int]
    phase: str
    per_rank: Tuple[int, ...] = field(default=())

    def gib(self) -> float:
        """Peak in GiB."""
        return self.peak_bytes / 1024 ** 3


def stage_layers(num_layers: int, plan: ParallelPlan) -> List[List[int]]:
    """Decoder layer indices of every pipeline stage (``plan.layers_per_stage`` or TorchTitan's split)."""
    if plan.layers_per_stage is not None:
        if sum(plan.layers_per_stage) != num_layers:
            raise ValueError(f"ParallelPlan.layers_per_stage {list(plan.layers_per_stage)} sums to "
                             f"{sum(plan.layers_per_stage)}, the model has {num_layers} layers")
        out, start = [], 0
        for n in plan.layers_per_stage:
            out.append(list(range(start, start + n)))
            start += n
        return out
    from hyper_parallel.pipeline.split import split_layers  # pylint: disable=import-outside-toplevel
    less = 1 if num_layers + 2 >= 2 * plan.num_stages and plan.num_stages > 1 else 0
    return split_layers(num_layers, plan.num_stages, less, less)


@functools.lru_cache(maxsize=4096)
def cached_schedule(name: str, pp: int, microbatches: int, stages_per_rank: int):
    """``hyper_parallel.pipeline.generate_schedule`` memoised (the search asks for the same ones often)."""
    from hyper_parallel.pipeline.schedules import generate_schedule  # pylint: disable=import-outside-toplevel
    return generate_schedule(name, pp, microbatches, stages_per_rank)


def inflight_microbatches(plan: ParallelPlan) -> Dict[int, int]:
    """Most microbatches whose activations a stage holds at once, per stage (from the schedule's lists)."""
    if plan.pp == 1:
        return {0: 1}
    return dict(_inflight(plan.schedule, plan.pp, plan.microbatches, plan.stages_per_rank))


@functools.lru_cache(maxsize=4096)
def _inflight(name: str, pp: int, microbatches: int, stages_per_rank: int) -> Tuple[Tuple[int, int], ...]:
    from hyper_parallel.pipeline.steps import MetaStepType as T  # pylint: disable=import-outside-toplevel
    sched = cached_schedule(name, pp, microbatches, stages_per_rank)
    most: Dict[int, int] = {s: 0 for s in range(sched.num_stages)}
    for rank in range(sched.num_ranks):
        live: Dict[int, int] = {s: 0 for s in sched.stages_of(rank)}
        for step in sched.steps(rank):
            for leaf in step.leaves():
                if leaf.type is T.F:
                    live[leaf.stage_index] += 1
                    most[leaf.stage_index] = max(most[leaf.stage_index], live[leaf.stage_index])
                elif leaf.type in (T.B, T.W):
                    live[leaf.stage_index] -= 1
    return tuple(sorted(most.items()))


def inflight_with_gradients(plan: ParallelPlan) -> Dict[int, int]:
    """Per stage, the most microbatches held at a forward that runs after the rank's first backward (the
    gradients of the stage already exist then: 1F1B's steady state); 0 where no forward comes after one."""
    if plan.pp == 1:
        return {0: 0}
    return dict(_inflight_after(plan.schedule, plan.pp, plan.microbatches, plan.stages_per_rank))


@functools.lru_cache(maxsize=4096)
def _inflight_after(name: str, pp: int, microbatches: int, stages_per_rank: int) -> Tuple[Tuple[int, int], ...]:
    from hyper_parallel.pipeline.steps import MetaStepType as T  # pylint: disable=import-outside-toplevel
    sched = cached_schedule(name, pp, microbatches, stages_per_rank)
    most: Dict[int, int] = {s: 0 for s in range(sched.num_stages)}
    for rank in range(sched.num_ranks):
        live: Dict[int, int] = {s: 0 for s in sched.stages_of(rank)}
        backward_seen = False
        for step in sched.steps(rank):
            for leaf in step.leaves():
                if leaf.type is T.F:
                    live[leaf.stage_index] += 1
                    if backward_seen:
                        most[leaf.stage_index] = max(most[leaf.stage_index], live[leaf.stage_index])
                else:
                    backward_seen = True
                    if leaf.type in (T.B, T.W):
                        live[leaf.stage_index] -= 1
    return tuple(sorted(most.items()))


def layer_activation_bytes(spec: ModelShape, index: int, plan: ParallelPlan, train: TrainConfig, batch: int
                           ) -> Tuple[int, int]:
    """``(saved, layer_input)`` bytes of decoder layer ``index`` for ``batch`` sequences on one rank: what
    autograd keeps without recomputation, and the layer's input (all that full recomputation keeps)."""
    t, cb = plan.tp, train.compute_bytes
    seq = train.seq_len // plan.cp
    tokens = batch * seq
    h, kv = spec.hidden_size, spec.kv_size
    sp = plan.sequence_parallel and t > 1
    # norms keep input, normalised input and scaled output (3h each); under SP on the sequence shard, and the
    # all-gathered full-sequence input of the projections is kept by them (2h)
    norms = (4 * h / t + 2 * h) if sp else 6 * h
    attn = (2 * h + 2 * kv) / t  # q, output, k, v
    if spec.is_linear_layer(index):
        attn = _linear_per_token(spec, t, cb)
    elif spec.gated_attention:
        attn += (spec.q_size + 2 * spec.q_size) / t  # the gate, the normed q and k
    rms = 2 / t if sp else 2
    if spec.is_moe_layer(index):
        mlp = _moe_per_token(spec, plan, train)
    else:
        mlp = 4 * spec.intermediate_size / t
    per_token = norms + attn + mlp + rms
    lse = tokens * spec.num_heads / t * 4
    rope = 2 * seq * spec.head_dim * cb
    saved = int(tokens * per_token * cb + lse + rope)
    layer_input = int(tokens * h * cb / (t if sp else 1))
    return saved, layer_input


def _linear_per_token(spec: ModelShape, t: int, cb: int) -> float:
    """Values (in ``cb``-byte units) a Gated DeltaNet block keeps per token on one of ``t`` TP ranks: the
    pre- and post-conv q/k/v, z, g, beta, the output and the gated norm's input/output in the compute dtype,
    and the rule's fp32 per-chunk tensors (decay, UT system, intra-chunk attention: 3 x chunk per head; the
    pseudo-values and decayed keys, the state entering each chunk: ``d_k * d_v / chunk`` per head)."""
    kd, vd = spec.linear_sizes
    hv, dk, dv, c = spec.linear_value_heads, spec.linear_key_dim, spec.linear_value_dim, spec.linear_chunk
    compute = 2 * (2 * kd + vd) + 4 * vd + 2 * hv
    rule = hv * (3 * c + 3 * dk + 2 * dv + dk * dv / c + dk * dk / c)
    return (compute + rule * 4 / cb) / t


def _moe_per_token(spec: ModelShape, plan: ParallelPlan, train: TrainConfig) -> float:
    """Values kept per token by a MoE block: router scores, the routed copies (input, gate, up, silu, product,
    output per selected expert, times the routing imbalance on the busiest EP rank) and the shared experts."""
    k, e, hid = spec.top_k, spec.num_experts, spec.expert_hidden
    imbalance = train.moe_imbalance if plan.ep > 1 else 1.0
    routed = k * (2 * spec.hidden_size + 4 * hid) * imbalance
    shared = 4 * hid * spec.num_shared_experts + (spec.hidden_size if spec.num_shared_experts else 0)
    if spec.shared_expert_hidden:
        shared += 4 * spec.shared_expert_hidden + spec.hidden_size + 1
    return 2 * e + 2 * k + routed + shared


def local_layer_params(spec: ModelShape, index: int, plan: ParallelPlan) -> Tuple[float, float]:
    """``(sharded, unsharded_unit)`` parameter counts of layer ``index`` on one rank: what it stores, and what
    FSDP gathers while the layer runs (TP-local size)."""
    dense, expert = spec.layer_params(index)
    norms = 2 * spec.hidden_size
    tp_local = (dense - norms) / plan.tp + norms
    ep_local = expert / plan.ep
    if spec.is_moe_layer(index):
        return tp_local / plan.fsdp + ep_local / plan.efsdp, tp_local + ep_local
    return tp_local / plan.fsdp, tp_local


def largest_tensor(spec: ModelShape, plan: ParallelPlan) -> float:
    """Elements of the largest local parameter tensor (embedding/head, a projection, stacked experts)."""
    h = spec.hidden_size
    dense = max(spec.vocab_size * h, spec.intermediate_size * h, spec.q_size * h) / plan.tp / plan.fsdp
    experts = spec.num_experts / plan.ep * h * spec.expert_hidden / plan.efsdp if spec.is_moe else 0.0
    return max(dense, experts)


def _edge_params(spec: ModelShape, plan: ParallelPlan, first: bool, last: bool) -> float:
    n = 0.0
    if first:
        n += spec.embedding_params() / plan.tp
    if last:
        n += (spec.head_params() - spec.hidden_size) / plan.tp + spec.hidden_size
    return n


class _Walk:
    """Running total of one rank through a step; remembers the highest point and its components."""

    def __init__(self, base: Dict[str, float]) -> None:
        self.now = dict(base)
        self.total = sum(base.values())
        self.best: Dict[str, float] = dict(base)
        self.best_total = self.total
        self.phase = "start"

    def at(self, phase: str, **extra: float) -> None:
        """Check the total with ``extra`` transient components added now."""
        total = self.total + sum(extra.values())
        if total > self.best_total:
            snap = dict(self.now)
            for k, v in extra.items():
                snap[k] = snap.get(k, 0.0) + v
            self.best, self.best_total, self.phase = snap, total, phase

    def add(self, key: str, value: float) -> None:
        """Allocate (positive) or free (negative) ``value`` bytes of ``key``."""
        self.now[key] = self.now.get(key, 0.0) + value
        self.total += value


def _runs(spec: ModelShape, plan: ParallelPlan, train: TrainConfig, mine: List[int], batch: int
          ) -> List[Tuple[int, Tuple[int, int], Tuple[float, float]]]:
    """Consecutive layers of the same kind as ``(count, (saved, input) bytes, (sharded, unit) params)``:
    inside a run every step changes memory by the same amount, so the peak is at a run's first or last layer."""
    runs: List[Tuple[int, Tuple[int, int], Tuple[float, float]]] = []
    kinds: List[bool] = []
    for i in mine:
        kind = spec.is_moe_layer(i)
        if kinds and kinds[-1] == kind:
            runs[-1] = (runs[-1][0] + 1, runs[-1][1], runs[-1][2])
        else:
            kinds.append(kind)
            runs.append((1, layer_activation_bytes(spec, i, plan, train, batch), local_layer_params(spec, i, plan)))
    return runs


@dataclass
class _RankParts:  # pylint: disable=too-many-instance-attributes
    """Sizes of one pipeline rank's step (bytes), computed once and walked through by :func:`_rank_peak`."""

    runs: List[Tuple[int, Tuple[int, int], Tuple[float, float]]]
    full: bool
    gather: float
    root_full: float
    edge_grads: float
    has_head: bool
    head_saved: float
    logits: float
    fsdp: bool
    grads_pre: bool = False
    head_grad_full: float = 0.0
    staging: float = 0.0

    def kept(self, act: Tuple[int, int]) -> int:
        """Bytes a layer keeps until its backward (its input only under full recomputation)."""
        return act[1] if self.full else act[0]


def _forward(walk: _Walk, r: _RankParts) -> None:
    for n, act, _ in r.runs:
        # a unit starts: the previous one is resharded, its prefetched all-gather output is copied into its
        # unsharded buffer while the next unit's prefetch is in flight (root + three unit-sized buffers)
        walk.add("activations", (n - 1) * r.kept(act))
        walk.at("forward", fsdp_buffers=r.root_full + 3 * r.gather + r.staging)
        walk.add("activations", r.kept(act))
        walk.at("forward", fsdp_buffers=r.root_full + 2 * r.gather + r.staging, temporaries=act[0] if r.full else 0)
    walk.add("activations", r.head_saved)
    walk.at("forward (loss)", temporaries=r.logits)
    walk.add("grads", r.edge_grads if r.has_head and not r.grads_pre else 0)
    walk.add("fsdp_buffers", r.head_grad_full)
    walk.at("backward start", fsdp_buffers=r.root_full + r.gather, temporaries=2 * r.logits)
    walk.add("activations", -r.head_saved)


def _backward(walk: _Walk, r: _RankParts, gb: int) -> None:
    sharded_gb = 0 if r.grads_pre else gb  # with grads_pre the sharded gradients exist already
    in_flight = 0.0  # the full-size gradients of the unit above in their asynchronous reduction
    for j, (n, act, unit) in enumerate(reversed(r.runs)):
        full_grad = unit[1] * gb if r.fsdp else 0.0
        recompute = act[0] if r.full else 0
        last_run = j == len(r.runs) - 1
        done = 0  # layers of this run whose backward finished
        # between the run's second and second-to-last layer memory changes linearly: check the ends
        for pos in sorted({0, min(1, n - 1), max(n - 2, 0), n - 1}):
            walk.add("activations", -(pos - done) * r.kept(act))
            walk.add("grads", (pos - done) * unit[0] * sharded_gb)
            in_flight = full_grad if pos > 0 else in_flight
            done = pos
            bottom = last_run and pos == n - 1  # no unit below to prefetch
            _fsdp_backward_points(walk, r, r.kept(act), full_grad, in_flight, recompute, not bottom)
        walk.add("activations", -r.kept(act))
        walk.add("grads", unit[0] * sharded_gb)
        in_flight = full_grad
    walk.add("fsdp_buffers", -r.head_grad_full)
    walk.add("grads", 0 if r.has_head or r.grads_pre else r.edge_grads)


def _fsdp_backward_points(walk: _Walk, r: _RankParts, kept: float, full_grad: float, in_flight: float,
                          recompute: float, prefetch: bool) -> None:
    """A layer's backward under FSDP (``fully_shard`` on torch): the root unit and this unit gathered, the
    unit below prefetched (its all-gather output waiting to be copied), this unit's full-size gradients and
    the reduction of the unit above still in flight (``in_flight``), with ``comm_staging`` the prefetch's
    staging copy (without recomputation); then its post-backward hook packs the gradients for their reduction
    (one more full-size buffer) after the layer's activations are freed."""
    if not r.fsdp:
        walk.at("backward", temporaries=recompute)
        return
    # the staging copy lives while the prefetch runs; with recomputation the layer's recomputed forward outlasts
    # the gather, so it is gone before the layer's gradients exist
    staging = r.staging if prefetch and not r.full else 0.0
    gathered = r.root_full + r.gather + (r.gather if prefetch else 0.0) + staging
    walk.at("backward", fsdp_buffers=gathered + full_grad + in_flight, temporaries=recompute)
    walk.add("activations", -kept)
    walk.at("backward (gradient reduction)", fsdp_buffers=gathered + 2 * full_grad + in_flight)
    walk.add("activations", kept)


def _parts(spec: ModelShape, plan: ParallelPlan, train: TrainConfig, runs, edge: float, has_head: bool,
           grads_pre: bool) -> _RankParts:
    pb, cb = train.param_bytes, train.compute_bytes
    batch = train.global_batch // plan.dp // plan.microbatches
    vocab_tokens = batch * train.seq_len // plan.cp * spec.vocab_size if has_head else 0
    fsdp = plan.fsdp > 1
    return _RankParts(
        runs=runs, full=plan.activation == "full", has_head=has_head, fsdp=fsdp,
        gather=max((u[1] for _, _, u in runs), default=0.0) * pb if fsdp else 0.0,
        # FSDP keeps the root unit (embedding, final norm, head) gathered from forward to backward
        root_full=edge * pb if fsdp else 0.0, edge_grads=edge / plan.fsdp * train.grad_bytes,
        head_saved=(vocab_tokens + batch * train.seq_len * 3 * spec.hidden_size) * cb if has_head else 0,
        logits=vocab_tokens * cb, grads_pre=grads_pre,
        # the root unit's head and final norm gradients stay full-size until its reduction after the embedding
        head_grad_full=((spec.head_params() - spec.hidden_size) / plan.tp + spec.hidden_size) * train.grad_bytes
        if fsdp and has_head else 0.0,
        staging=max((u[1] for _, _, u in runs), default=0.0) * pb if fsdp and train.comm_staging else 0.0)


def _rank_peak(spec: ModelShape, plan: ParallelPlan, train: TrainConfig, stages: Sequence[int],
               layers: List[List[int]], inflight: Dict[int, int], grads_pre: bool = False
               ) -> Tuple[int, Dict[str, int], str]:
    batch = train.global_batch // plan.dp // plan.microbatches
    last_stage = plan.num_stages - 1
    per_stage = {s: _runs(spec, plan, train, layers[s], batch) for s in stages}
    runs = [r for s in stages for r in per_stage[s]]
    edge = sum(_edge_params(spec, plan, s == 0, s == last_stage) for s in stages)
    params = sum(n * u[0] for n, _, u in runs) + edge / plan.fsdp
    parts = _parts(spec, plan, train, runs, edge, last_stage in stages, grads_pre)
    walk = _Walk({"params": params * train.param_bytes, "optimizer": params * 4 * train.optimizer_states})
    if grads_pre:
        walk.add("grads", params * train.grad_bytes)
    # microbatches in flight: all but the one being run are fully saved; the running one adds layer by layer
    walk.add("activations", sum((inflight[s] - 1) * sum(n * parts.kept(a) for n, a, _ in per_stage[s])
                                for s in stages))
    _forward(walk, parts)
    _backward(walk, parts, train.grad_bytes)
    # torch.optim.AdamW(foreach=False) updates one parameter tensor at a time: two temporaries of its size
    walk.at("optimizer step", temporaries=2 * largest_tensor(spec, plan) * 4 if train.optimizer_states else 0)
    comps = {k: int(v) for k, v in walk.best.items()}
    return sum(comps.values()), comps, walk.phase


def estimate_memory(model_config, plan: ParallelPlan, train_config: TrainConfig) -> MemoryEstimate:
    """Peak memory per rank of ``plan`` (the busiest pipeline rank) with a per-component breakdown.

    ``model_config`` is a :class:`ModelShape` or any config :func:`model_shape` reads."""
    spec = model_shape(model_config)
    check_divisible(spec, plan, train_config)
    layers = stage_layers(spec.num_layers, plan)
    inflight = inflight_microbatches(plan)
    after = inflight_with_gradients(plan)
    if plan.pp == 1:
        owners = {0: (0,)}
    else:
        sched = cached_schedule(plan.schedule, plan.pp, plan.microbatches, plan.stages_per_rank)
        owners = {r: sched.stages_of(r) for r in range(plan.pp)}
    seen: Dict[Tuple, Tuple[int, Dict[str, int], str]] = {}
    results = []
    for r in sorted(owners):
        stages = owners[r]
        key = tuple((len(layers[s]), s == 0, s == plan.num_stages - 1, inflight[s], after[s],
                     tuple(spec.is_moe_layer(i) for i in layers[s])) for s in stages)
        if key not in seen:
            seen[key] = _rank_peak(spec, plan, train_config, stages, layers, inflight)
            if any(after[s] for s in stages):  # a forward after the first backward: gradients exist meanwhile
                with_grads = _rank_peak(spec, plan, train_config, stages, layers,
                                        {s: max(after[s], 1) for s in stages}, grads_pre=True)
                seen[key] = max(seen[key], with_grads, key=lambda x: x[0])
        results.append(seen[key])
    peak, comps, phase = max(results, key=lambda x: x[0])
    return MemoryEstimate(peak, comps, phase, tuple(r[0] for r in results))


def check_divisible(spec: ModelShape, plan: ParallelPlan, train: TrainConfig) -> None:
    """Raise ``ValueError`` naming the first size the plan cannot split."""
    checks = (
        (train.global_batch % (plan.dp * plan.microbatches) == 0,
         f"global_batch {train.global_batch} is not divisible by dp*microbatches = {plan.dp * plan.microbatches}"),
        (spec.num_heads % plan.tp == 0 and spec.num_kv_heads % plan.tp == 0,
         f"tp={plan.tp} must divide the attention heads ({spec.num_heads}) and kv heads ({spec.num_kv_heads})"),
        (train.seq_len % (plan.cp * (plan.tp if plan.sequence_parallel else 1)) == 0,
         f"seq_len {train.seq_len} is not divisible by cp*tp = {plan.cp * plan.tp}"),
        (spec.num_layers >= plan.num_stages, f"{spec.num_layers} layers cannot fill {plan.num_stages} stages"),
        (plan.ep == 1 or (spec.is_moe and spec.num_experts % plan.ep == 0),
         f"ep={plan.ep} needs a MoE model whose expert count ({spec.num_experts}) it divides"),
        (plan.pp > 1 or plan.microbatches == 1, "microbatches > 1 needs pp > 1"),
    )
    for ok, message in checks:
        if not ok:
            raise ValueError(f"plan {plan.label()}: {message}")
