# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Mpipe (pure Python): the heterogeneous vision-language pipeline schedule and its microbatch balancer.

Position 0 holds the *encoder stage* (a vision encoder and whatever turns its output into the language
model's input: the token embedding with the image features scattered in, plus DeepStack features); positions
``1 .. p-1`` hold the language-model stages. A position is what a schedule calls a rank; with stages on
meshes of different sizes (``pipeline/meshes.py``) the encoder position may be a group of any size, and its
outputs reach the first LM stage by the cross-mesh machinery.

* **The encoder runs ahead.** The LM positions run 1F1B among themselves; the encoder position runs up to
  ``encoder_ahead`` forwards before its first backward (default: every microbatch, i.e. all encoder
  forwards first, then its backwards in the order the gradients come back). The first LM stage therefore
  never waits for an encoder forward once the pipeline is full, and an expensive image in one microbatch
  is absorbed by the encoder's lead instead of stalling every LM stage.
* **Balanced microbatches.** Encoder cost varies per sample (text-only, small and large images), LM cost
  hardly does (every sample is padded to the sequence length). :func:`balance_microbatches` permutes the
  batch so that every microbatch keeps its size but carries about the same measured cost (image tokens by
  default): the samples, heaviest first, each go to the microbatch with the least cost that still has room
  (LPT greedy with capacities). ``ScheduleMpipe.step`` applies it on every rank and puts the outputs back in
  the caller's order.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence

from hyper_parallel.pipeline.steps import MetaStep, MetaStepType

__all__ = ["MpipeConfig", "mpipe_ops", "balance_microbatches", "microbatch_costs"]

F, B = MetaStepType.F, MetaStepType.B


@dataclass(frozen=True)
class MpipeConfig:
    """Knobs of :class:`~hyper_parallel.pipeline.api.ScheduleMpipe`.

    Attributes:
        encoder_ahead: forwards the encoder position runs before its first backward (``None``: all
            microbatches; at least ``num_positions - 1``, what 1F1B gives position 0: the first LM stage's
            warm-up needs that many before any gradient comes back). More lead hides encoder cost variance; each lead
            microbatch keeps its encoder activations alive until its backward.
        balance: permute the batch into microbatches of equal measured cost (``step(sample_costs=...)``);
            ``False`` keeps the caller's order (contiguous microbatches).
    """

    encoder_ahead: Optional[int] = None
    balance: bool = True

    def __post_init__(self) -> None:
        ahead = self.encoder_ahead
        if ahead is not None and (isinstance(ahead, bool) or not isinstance(ahead, int) or ahead < 1):
            raise ValueError(f"MpipeConfig(encoder_ahead={ahead!r}): expected None or an int >= 1")
        if not isinstance(self.balance, bool):
            raise ValueError(f"MpipeConfig(balance={self.balance!r}): expected a bool")


def mpipe_ops(p: int, m: int, r: int, encoder_ahead: Optional[int] = None) -> List[Optional[MetaStep]]:
    """Rank ``r``'s compute list (idle slots as ``None``): the encoder (rank 0) runs ``encoder_ahead``
    forwards, then one forward and one backward at a time (``encoder_ahead = p - 1`` is exactly 1F1B's
    rank 0); ranks ``1 .. p-1`` run 1F1B over the LM stages."""
    if r > 0:
        warm = min(m, p - 1 - r)
        ops: List[Optional[MetaStep]] = [None] * r
        ops += [MetaStep(r, F, k) for k in range(warm)]
        ops += [None] * (2 * (p - 1 - r))
        for k in range(warm, m):
            ops += [MetaStep(r, F, k), MetaStep(r, B, k - warm)]
        for k in range(m - warm, m):
            ops += [None, MetaStep(r, B, k)]
        return ops
    lead = m if encoder_ahead is None else min(m, encoder_ahead)
    ops = [MetaStep(0, F, k) for k in range(lead)]
    for k in range(lead, m):
        ops += [MetaStep(0, F, k), MetaStep(0, B, k - lead)]
    ops += [MetaStep(0, B, k) for k in range(m - lead, m)]
    return ops


def _check_costs(costs: Sequence[float], capacities: Sequence[int]) -> List[float]:
    values = list(costs)
    for i, c in enumerate(values):
        if isinstance(c, bool) or not isinstance(c, (int, float)) or not c >= 0:  # NaN fails >= too
            raise ValueError(f"balance_microbatches(costs): entry {i} is {c!r}; expected a number >= 0 per sample")
    if any(isinstance(c, bool) or not isinstance(c, int) or c < 1 for c in capacities):
        raise ValueError(f"balance_microbatches(sizes): expected positive ints, got {list(capacities)}")
    if sum(capacities) != len(values):
        raise ValueError(f"balance_microbatches: {len(values)} sample costs but the microbatch sizes "
                         f"{list(capacities)} hold {sum(capacities)} samples")
    return [float(c) for c in values]


def balance_microbatches(costs: Sequence[float], sizes: Sequence[int]) -> List[List[int]]:
    """Sample indices of every microbatch: microbatch ``k`` gets exactly ``sizes[k]`` samples and the
    costs are spread evenly (heaviest sample first, each to the microbatch with the least cost that still
    has room; ties go to the lower index; inside a microbatch the samples keep their batch order).
    Deterministic, so every rank computes the same assignment from the same costs."""
    values = _check_costs(costs, sizes)
    bins: List[List[int]] = [[] for _ in sizes]
    load = [0.0] * len(sizes)
    for i in sorted(range(len(values)), key=lambda j: (-values[j], j)):
        k = min((k for k in range(len(sizes)) if len(bins[k]) < sizes[k]), key=lambda k: (load[k], k))
        bins[k].append(i)
        load[k] += values[i]
    return [sorted(b) for b in bins]


def microbatch_costs(costs: Sequence[float], groups: Sequence[Sequence[int]]) -> List[float]:
    """The summed cost of every microbatch (``groups`` as :func:`balance_microbatches` returns them)."""
    values = list(costs)
    return [float(sum(values[i] for i in g)) for g in groups]


def balanced_step(sched, args, kwargs, target, losses, return_outputs, loss_kwargs, sample_costs):
    """``ScheduleMpipe.step``: agree on the sample costs over the pipeline group, permute the batch into
    balanced microbatches, run, and put the output back in the caller's order."""
    # pylint: disable=protected-access
    m = sched._n_microbatches
    if not sched.config.balance:
        if sample_costs is not None:
            raise ValueError("ScheduleMpipe.step(sample_costs=...): config.balance is False; drop sample_costs or "
                             "set MpipeConfig(balance=True)")
        sched.microbatch_groups = []
        return sched._run(sched._runner, args, kwargs, target, losses, return_outputs, loss_kwargs)
    stage = sched._stages[0]
    if stage.platform.name != "torch":
        raise ValueError("ScheduleMpipe: microbatch balancing runs on torch stages; pass "
                         "MpipeConfig(balance=False) on MindSpore")
    mine = None if sample_costs is None else [float(c) for c in sample_costs]
    given = [c for c in stage._gather_objects(mine) if c is not None]
    if not given:
        sched.microbatch_groups = []
        return sched._run(sched._runner, args, kwargs, target, losses, return_outputs, loss_kwargs)
    if any(c != given[0] for c in given):
        raise ValueError("ScheduleMpipe.step(sample_costs): the ranks that pass sample_costs disagree")
    n = len(given[0])
    if n % m:
        raise ValueError(f"ScheduleMpipe.step(sample_costs): {n} samples do not split into n_microbatches={m} "
                         "equal microbatches")
    groups = balance_microbatches(given[0], [n // m] * m)
    sched.microbatch_groups = groups
    order = [i for g in groups for i in g]
    from hyper_parallel.pipeline._torch.mpipe import permute_batch, unpermute  # pylint: disable=C0415
    args, kwargs, target = permute_batch(order, args, kwargs, target, sched._args_chunk_spec,
                                         sched._kwargs_chunk_spec)
    out = sched._run(sched._runner, args, kwargs, target, losses, return_outputs, loss_kwargs)
    return unpermute(out, order, sched._output_merge_spec)
