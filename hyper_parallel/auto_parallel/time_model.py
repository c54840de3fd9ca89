# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Step time of a plan (pure Python): :func:`estimate_step_time`.

* **compute**: FLOPs per layer from the model sizes (``layer_flops``; matmuls ``2 * tokens * params``,
  attention ``4 * batch * seq^2 * width`` as ``FlopCounterMode`` counts SDPA; backward = 2x forward;
  full recomputation adds a forward), divided by the cluster's achieved rate (shared cores divide it),
  plus the eager dispatch cost per operator call;
* **communication** by the ring formulas of :func:`~hyper_parallel.auto_parallel.cluster.collective_time`:
  TP+SP gathers and reduce-scatters around attention and MLP (never hidden: on the critical path),
  CP ring KV passes, EP all-to-alls (hidden under the shared experts by ``comm_overlap`` when there are
  some), FSDP all-gathers/reduce-scatters (prefetched: hidden by ``comm_overlap`` except the first
  gather), HSDP/DDP all-reduce of the gradients, PP point-to-point per microbatch;
* **pipeline**: the stage costs feed ``hyper_parallel.pipeline.simulate_schedule``; the makespan
  includes the bubble, reported separately as ``bubble``;
* **optimizer**: an element-wise pass over the local parameters plus its per-tensor dispatch.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from hyper_parallel.auto_parallel.cluster import ClusterSpec, collective_time
from hyper_parallel.auto_parallel.memory import cached_schedule, check_divisible, local_layer_params, stage_layers
from hyper_parallel.auto_parallel.plan import ParallelPlan, TrainConfig
from hyper_parallel.auto_parallel.shape import ModelShape, model_shape

__all__ = ["TimeEstimate", "estimate_step_time", "layer_flops", "head_flops", "part_costs", "OPS_PER_LAYER"]

# aten calls of one Llama decoder layer's forward (norms 2x5, 4 projections, rotary 2x6, SDPA, SwiGLU 5,
# residuals 2, views ~8); backward runs about twice as many. Counted with TorchDispatchMode on the tiny Llama.
OPS_PER_LAYER = 45
OPS_PER_MOE_LAYER = 110
OPS_PER_PARAM_UPDATE = 12  # torch.optim.AdamW(foreach=False) per parameter tensor


@dataclass(frozen=True)
class TimeEstimate:
    """Seconds of one step and its parts: ``compute`` (busiest rank, no bubble), ``tp_comm``, ``cp_comm``,
    ``ep_comm``, ``pp_comm`` (exposed, inside the pipeline), ``bubble``, ``oversubscription`` (a pipeline whose
    ranks outnumber the host's cores), ``fsdp_comm``, ``dp_comm`` (exposed), ``optimizer``;
    ``bubble_fraction`` = bubble / step (0 without PP)."""

    step_s: float
    components: Dict[str, float]
    bubble_fraction: float = 0.0


def layer_flops(spec: ModelShape, index: int, tokens: int, seq: int, tp: int = 1, imbalance: float = 1.0,
                attention: bool = True) -> float:
    """Forward FLOPs of decoder layer ``index`` on one rank for ``tokens`` tokens of sequences of ``seq``
    (``attention=False``: the matmuls only — what ``FlopCounterMode`` counts on CPU, where the fused
    attention kernel has no FLOP formula registered)."""
    h = spec.hidden_size
    if spec.is_linear_layer(index):
        proj, attn = linear_attention_flops(spec, tokens, tp)
    else:
        gate = h * spec.q_size if spec.gated_attention else 0
        proj = 2 * tokens * (2 * h * spec.q_size + 2 * h * spec.kv_size + gate) / tp
        attn = 4 * tokens * seq * spec.q_size / tp if attention else 0.0
    if spec.is_moe_layer(index):
        routed = 2 * tokens * spec.top_k * 3 * h * spec.expert_hidden * imbalance
        shared = 2 * tokens * 3 * h * spec.expert_hidden * spec.num_shared_experts
        mlp = routed + shared + 2 * tokens * h * spec.num_experts
    else:
        mlp = 2 * tokens * 3 * h * spec.intermediate_size / tp
    return proj + attn + mlp


def linear_attention_flops(spec: ModelShape, tokens: int, tp: int = 1) -> Tuple[float, float]:
    """``(projections, rule)`` forward FLOPs of a Gated DeltaNet block on one rank: the q/k/v/z/b/a and out
    projections; the conv and the chunked delta rule per value head and token (``K K^T`` and ``Q K^T`` of the
    chunk, the UT solve, ``A U`` and ``A W``, the ``(M, B)`` terms, the output read of the state and the state
    scan, ``2 d_k d_k d_v`` per chunk)."""
    h, (kd, vd), hv = spec.hidden_size, spec.linear_sizes, spec.linear_value_heads
    dk, dv, c = spec.linear_key_dim, spec.linear_value_dim, spec.linear_chunk
    proj = 2 * tokens * h * (2 * kd + 3 * vd + 2 * hv) / tp
    per_head = (4 * c * dk + c * (dk + dv) + 2 * c * (dk + dv) + 2 * dk * (dk + dv) + 2 * dk * dv
                + 2 * dk * dk * dv / c)
    rule = tokens * (hv * per_head + 2 * spec.linear_conv_kernel * (2 * kd + vd)) / tp
    return proj, rule


def head_flops(spec: ModelShape, tokens: int, tp: int = 1) -> float:
    """Forward FLOPs of the LM head on one rank."""
    return 2 * tokens * spec.hidden_size * spec.vocab_size / tp


def _tp_layer_comm(spec: ModelShape, plan: ParallelPlan, train: TrainConfig, tokens: int, cluster: ClusterSpec
                   ) -> float:
    if plan.tp == 1:
        return 0.0
    nbytes = tokens * spec.hidden_size * train.compute_bytes
    one = collective_time("all_gather", nbytes, plan.tp, cluster) + collective_time("reduce_scatter", nbytes,
                                                                                    plan.tp, cluster)
    return 2 * one  # attention and MLP (forward; backward mirrors it)


def _cp_comm(spec: ModelShape, plan: ParallelPlan, train: TrainConfig, cluster: ClusterSpec, layers: List[int],
             batch: int, tokens: int) -> float:
    """CP transfer seconds of a stage's layers: K/V around the ring for attention layers; for linear-attention
    layers the fp32 recurrent state, passed rank to rank serially (``cp - 1`` hops)."""
    kv = 2 * tokens * spec.kv_size * train.compute_bytes
    full = [i for i in layers if not spec.is_linear_layer(i)]
    out = len(full) * (plan.cp - 1) * collective_time("p2p", kv, 2, cluster)
    if len(full) < len(layers):
        state = batch * spec.linear_value_heads * spec.linear_key_dim * spec.linear_value_dim * 4
        out += (len(layers) - len(full)) * (plan.cp - 1) * collective_time("p2p", state, 2, cluster)
    return out


def _stage_cost(spec: ModelShape, plan: ParallelPlan, train: TrainConfig, cluster: ClusterSpec, layers: List[int],
                first: bool, last: bool, share: Optional[float] = None) -> Dict[str, float]:
    """Forward seconds of one microbatch on one stage, split into compute and communication kinds (``share``:
    the host-sharing slowdown, default :meth:`ClusterSpec.host_share` of the plan's ranks)."""
    # pylint: disable=too-many-locals
    batch = train.global_batch // plan.dp // plan.microbatches
    seq = train.seq_len // plan.cp
    tokens = batch * seq
    imbalance = train.moe_imbalance if plan.ep > 1 else 1.0
    flops = sum(layer_flops(spec, i, tokens, seq, plan.tp, imbalance) for i in layers)
    flops += head_flops(spec, tokens, plan.tp) if last else 0.0
    if share is None:  # oversubscribed CPU cores: every rank's CPU work is slower
        share = cluster.host_share(min(plan.world_size, cluster.devices_per_node))
    ops = sum(OPS_PER_MOE_LAYER if spec.is_moe_layer(i) else OPS_PER_LAYER for i in layers) + (8 if last else 0)
    ops += 3 if first else 0
    compute = (flops / cluster.compute_rate() + ops * cluster.op_overhead) * share
    tp = _tp_layer_comm(spec, plan, train, tokens, cluster) * len(layers) * share
    cp = _cp_comm(spec, plan, train, cluster, layers, batch, tokens) * share if plan.cp > 1 else 0.0
    ep = 0.0
    moe_layers = [i for i in layers if spec.is_moe_layer(i)]
    if plan.ep > 1 and moe_layers:
        a2a = tokens * spec.top_k * spec.hidden_size * train.compute_bytes * imbalance
        hide = cluster.comm_overlap if spec.num_shared_experts else 0.0
        ep = len(moe_layers) * 2 * collective_time("all_to_all", a2a, plan.ep, cluster) * (1 - hide) * share
    return {"compute": compute, "tp_comm": tp, "cp_comm": cp, "ep_comm": ep}


def _fsdp_comm(spec: ModelShape, plan: ParallelPlan, train: TrainConfig, cluster: ClusterSpec, layers: List[int],
               first: bool, last: bool) -> float:
    """FSDP's exposed collective time per step: every layer unit gathered twice (forward, and again in
    backward after resharding) and reduced once (``cluster.fsdp_reduce``), the root unit (embedding, head)
    gathered once (kept from forward to backward) and reduced once; prefetched gathers hide by
    ``comm_overlap`` except the first."""
    if plan.fsdp == 1:
        return 0.0
    reduce_kind = cluster.fsdp_reduce
    total, first_gather = 0.0, 0.0
    for i in layers:
        _, unit = local_layer_params(spec, i, plan)
        gather = collective_time("all_gather", unit * train.param_bytes, plan.fsdp, cluster)
        total += 2 * gather + collective_time(reduce_kind, unit * train.grad_bytes, plan.fsdp, cluster)
        first_gather = first_gather or gather
    edge = ((spec.embedding_params() if first else 0) + (spec.head_params() if last else 0)) / plan.tp
    if edge:
        total += (collective_time("all_gather", edge * train.param_bytes, plan.fsdp, cluster)
                  + collective_time(reduce_kind, edge * train.grad_bytes, plan.fsdp, cluster))
    share = cluster.host_share(min(plan.world_size, cluster.devices_per_node))
    return share * (first_gather + (total - first_gather) * (1 - cluster.comm_overlap))


def _owners(plan: ParallelPlan) -> Dict[int, List[int]]:
    if plan.pp == 1:
        return {0: [0]}
    sched = cached_schedule(plan.schedule, plan.pp, plan.microbatches, plan.stages_per_rank)
    return {r: list(sched.stages_of(r)) for r in range(plan.pp)}


def _pipeline(plan: ParallelPlan, stage_f: Dict[int, float], stage_b: Dict[int, float], p2p: float) -> float:
    """Makespan of the schedule with per-stage forward/backward seconds (one microbatch). Costs are
    normalised by the largest forward and rounded to 0.1 % so equal shapes share one simulation."""
    scale = max(stage_f.values()) or 1.0
    f = tuple(round(stage_f[s] / scale, 3) for s in sorted(stage_f))
    b = tuple(round(stage_b[s] / scale, 3) for s in sorted(stage_b))
    return scale * _simulate(plan.schedule, plan.pp, plan.microbatches, plan.stages_per_rank, f, b,
                             round(p2p / scale, 3))


@functools.lru_cache(maxsize=65536)
def _simulate(name: str, pp: int, m: int, v: int, stage_f: Tuple[float, ...], stage_b: Tuple[float, ...],
              p2p: float) -> float:
    from hyper_parallel.pipeline.simulate import simulate_schedule  # pylint: disable=import-outside-toplevel
    from hyper_parallel.pipeline.steps import MetaStepType as T  # pylint: disable=import-outside-toplevel
    sched = cached_schedule(name, pp, m, v)

    def cost(_rank, step) -> float:
        total = 0.0
        for leaf in step.leaves():
            s = leaf.stage_index
            total += {T.F: stage_f[s], T.B: stage_b[s], T.I: stage_b[s] / 2, T.W: stage_b[s] / 2}.get(leaf.type, 0.0)
        return total
    return simulate_schedule(sched, cost, comm_latency=p2p).makespan


def _forward_backward(c: Dict[str, float], recompute: float) -> Tuple[float, float]:
    """Forward and backward seconds of one microbatch from :func:`_stage_cost`'s parts (the backward does
    twice the matmul work and passes the CP ring twice; a full recomputation repeats the forward)."""
    fwd = sum(c.values())
    return fwd, 2 * c["compute"] + c["tp_comm"] + 2 * c["cp_comm"] + c["ep_comm"] + recompute * fwd


def part_costs(model_config, plan: ParallelPlan, train_config: TrainConfig, cluster: ClusterSpec) -> List[float]:
    """Forward + backward seconds of one microbatch on one rank for every part a pipeline splits: the
    embedding, each decoder layer, then the final norm + head + loss (``len = num_layers + 2``), the input of
    :func:`~hyper_parallel.auto_parallel.balance.balance_stages`."""
    spec = model_shape(model_config)
    recompute = 1.0 if plan.activation == "full" else 0.0
    parts = [([], True, False)] + [([i], False, False) for i in range(spec.num_layers)] + [([], False, True)]
    return [sum(_forward_backward(_stage_cost(spec, plan, train_config, cluster, ids, first, last), recompute))
            for ids, first, last in parts]


def _pipeline_parts(spec: ModelShape, plan: ParallelPlan, train: TrainConfig, cluster: ClusterSpec, stages,
                    busy: float, parts: Dict[str, float]) -> float:
    """The pipeline's makespan (simulated with the stage costs ``stages = (fwd, bwd, owners)``); sets
    ``pp_comm``, ``bubble`` and, when the ranks outnumber the host's cores, ``oversubscription`` (the step is at
    least every rank's work packed onto the cores)."""
    fwd, bwd, owners = stages
    m = plan.microbatches
    batch = train.global_batch // plan.dp // m
    act = batch * train.seq_len // plan.cp * spec.hidden_size * train.compute_bytes / plan.tp
    p2p = collective_time("p2p", act, 2, cluster, stride=plan.world_size // plan.pp)
    makespan = _pipeline(plan, fwd, bwd, p2p)
    parts["pp_comm"] = 2 * m * p2p
    parts["bubble"] = max(0.0, makespan - busy - parts["pp_comm"])
    if cluster.host_share(min(plan.world_size, cluster.devices_per_node)) > 1.0:
        work = plan.world_size // plan.pp * sum(m * sum(fwd[s] + bwd[s] for s in owners[r]) + 2 * m * p2p
                                                 for r in owners)
        parts["oversubscription"] = max(0.0, work / cluster.host_cores - makespan)
    return makespan + parts["oversubscription"]


def estimate_step_time(model_config, plan: ParallelPlan, train_config: TrainConfig, cluster: ClusterSpec
                       ) -> TimeEstimate:
    """Seconds per training step of ``plan`` on ``cluster`` with a per-component breakdown (module docstring)."""
    # pylint: disable=too-many-locals
    spec = model_shape(model_config)
    train = train_config
    check_divisible(spec, plan, train)
    layers = stage_layers(spec.num_layers, plan)
    last = plan.num_stages - 1
    share = cluster.host_share(min(plan.world_size, cluster.devices_per_node))
    # a pipeline's ranks are not all busy at once: its stages run at full speed and the step is at least
    # all ranks' work packed onto the host's cores (below); other layouts keep every rank busy together
    stage_share = 1.0 if plan.pp > 1 else share
    costs = {s: _stage_cost(spec, plan, train, cluster, ids, s == 0, s == last, stage_share)
             for s, ids in enumerate(layers)}
    recompute = 1.0 if plan.activation == "full" else 0.0
    fwd = {s: _forward_backward(c, recompute)[0] for s, c in costs.items()}
    bwd = {s: _forward_backward(c, recompute)[1] for s, c in costs.items()}
    owners = _owners(plan)
    busiest = max(owners, key=lambda r: sum(fwd[s] + bwd[s] for s in owners[r]))
    mine = owners[busiest]
    m = plan.microbatches
    # forward + backward multiples of each forward cost (the backward does twice the matmul work and passes the
    # CP ring twice); a full recomputation repeats the forward
    times = {"compute": 3, "tp_comm": 2, "cp_comm": 3, "ep_comm": 2}
    parts = {k: m * sum(costs[s][k] * (n + recompute) for s in mine) for k, n in times.items()}
    busy = m * sum(fwd[s] + bwd[s] for s in mine)
    parts["oversubscription"] = parts["pp_comm"] = parts["bubble"] = 0.0
    makespan = busy
    if plan.pp > 1:
        makespan = _pipeline_parts(spec, plan, train, cluster, (fwd, bwd, owners), busy, parts)
    my_layers = [i for s in mine for i in layers[s]]
    parts["fsdp_comm"] = _fsdp_comm(spec, plan, train, cluster, my_layers, 0 in mine, last in mine)
    local = sum(local_layer_params(spec, i, plan)[0] for i in my_layers)
    dp_bytes = local * train.grad_bytes
    parts["dp_comm"] = share * collective_time("all_reduce", dp_bytes, plan.dp_replicate, cluster,
                                               stride=plan.world_size // plan.dp_replicate)
    tensors = 9 * len(my_layers) + 3
    parts["optimizer"] = (local * 10 / cluster.compute_rate(min(plan.world_size, cluster.devices_per_node))
                          + tensors * OPS_PER_PARAM_UPDATE * cluster.op_overhead * share)
    step = makespan + parts["fsdp_comm"] + parts["dp_comm"] + parts["optimizer"]
    return TimeEstimate(step, parts, parts["bubble"] / step if step else 0.0)
