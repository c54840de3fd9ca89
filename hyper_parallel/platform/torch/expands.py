# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The torch implementations of the rules' local computations that need torch functions (expands and their
helpers), registered per rule class with ``core/ops/expands.implements``; the rule modules stay free of
any framework (``tests/ut/test_import_graph.py`` checks it). Grouped by the rule module they serve."""
# pylint: disable=protected-access,unused-argument  # the signatures are the rule methods' (rule, func, args, ...)
from __future__ import annotations

import inspect
import math

import torch

from hyper_parallel.core.ops.expands import implementation, implements
from hyper_parallel.core.ops.rules.indexing import EmbeddingRule
from hyper_parallel.core.ops.rules.loss import ClassLossRule, _LossRule
from hyper_parallel.core.ops.rules.matmul import EinsumRule
from hyper_parallel.core.ops.rules.random_ops import (_SELU_ALPHA, BernoulliRule, DropoutRule, MultinomialRule,
                                                      NormalRule, RandomInplaceRule, RandomLikeRule, RReluRule,
                                                      _randint_bounds, _spec)
from hyper_parallel.core.ops.rules.reductions import (ArgReduceRule, MaxMinRule, MomentsRule, ReductionRule, ScanRule,
                                                      _with_first, local_offset)
from hyper_parallel.core.placement import Replicate, Shard
from hyper_parallel.core.spec import DTensorSpec
from hyper_parallel.platform.torch import random as trandom
from hyper_parallel.platform.torch.platform import PLATFORM


# ---------------------------------------------------------------------- reductions
def fill_value(dtype, reduce: str):
    """Identity element of max/min for ``dtype`` (for empty local shards)."""
    if dtype == torch.bool:
        return reduce == "min"
    if dtype.is_floating_point or dtype.is_complex:
        return float("-inf") if reduce == "max" else float("inf")
    info = torch.iinfo(dtype)
    return info.min if reduce == "max" else info.max


def _merge_moments(parts):
    """(n, 3, ...) stacked (count, mean, M2) per shard -> (3, ...) of the union (Chan et al.)."""
    counts, means, m2s = parts[:, 0], parts[:, 1], parts[:, 2]
    total = counts.sum(0)
    mean = (counts * means).sum(0) / total.clamp_min(1)
    m2 = (m2s + counts * (means - mean) ** 2).sum(0)
    return torch.stack([total, mean, m2])


@implements("torch", ReductionRule, "expand_mean")
def _reductionrule_expand_mean(rule, func, args, kwargs, plan):  # pylint: disable=unused-argument
    """Local sum over the reduced dims divided by the global number of reduced elements."""
    x = args[0]
    dims, keepdim = plan.decision.extra["dims"], plan.decision.extra["keepdim"]
    dtype = kwargs.get("dtype")
    if dtype is None and not (x.is_floating_point() or x.is_complex()):
        return func(*args, **kwargs)  # torch's own error for an integer mean
    count = 1
    for d in dims:
        count *= plan.call.tensors[0].shape[d]
    return torch.sum(x, dim=dims, keepdim=keepdim, dtype=dtype) / count


@implements("torch", ReductionRule, "expand_extreme")
def _reductionrule_expand_extreme(rule, func, args, kwargs, plan):
    """amax/amin/max/min: an empty local shard reduces to the identity element."""
    x = args[0]
    dims = plan.decision.extra["dims"]
    if any(x.shape[d] == 0 for d in dims):
        shape = [1 if i in dims else s for i, s in enumerate(x.shape)]
        x = x.new_full(shape, fill_value(x.dtype, rule.reduce))
        args = _with_first(args, x)
    return func(*args, **kwargs)


@implements("torch", ReductionRule, "expand_logic")
def _reductionrule_expand_logic(rule, func, args, kwargs, plan):
    """all/any: local result, then an all-reduce (min for all, max for any) over the sharded mesh dims."""
    plat = PLATFORM
    out = func(*args, **kwargs)
    dtype = out.dtype
    acc = out.to(torch.uint8)
    for d in plan.decision.extra["mesh_dims"]:
        acc = plat.all_reduce(acc, rule.reduce, plan.mesh.get_group(d))
    return acc.to(dtype)


@implements("torch", ReductionRule, "expand_combine")
def _reductionrule_expand_combine(rule, func, args, kwargs, plan):
    """Local reduction, then all-gather the (output-sized) local results and reduce them again."""
    plat = PLATFORM
    extra = plan.decision.extra
    x = args[0]
    if rule.combine == "norm" and any(x.shape[d] == 0 for d in extra["dims"]):
        shape = [1 if i in extra["dims"] else s for i, s in enumerate(x.shape)]
        args = _with_first(args, x.new_zeros(shape))  # the norm of nothing: 0 (also for p = inf)
    out = func(*args, **kwargs)
    coord = plan.mesh.get_coordinate()
    for d in reversed(extra["mesh_dims"]):
        n = plan.mesh.shape[d]
        parts = plat.all_gather(out.unsqueeze(0), plan.mesh.get_group(d), 0, [1] * n, coord[d])
        if rule.combine == "logsumexp":
            out = torch.logsumexp(parts, 0)
        elif rule.combine == "prod":
            out = torch.prod(parts, 0)
        else:
            out = torch.linalg.vector_norm(parts, extra["ord"], dim=0)
    return out


@implements("torch", ReductionRule, "expand_pick")
def _reductionrule_expand_pick(rule, func, args, kwargs, plan):  # pylint: disable=unused-argument
    """Values and global indices along a sharded dim: local extreme, gather, pick the winner."""
    values, indices = implementation("torch", rule, "pick")(args[0], plan)
    return values, indices


@implements("torch", ReductionRule, "pick")
def _reductionrule_pick(rule, x, plan):
    """(values, global indices) of max/min along the single reduced dim, replicated over the mesh dims."""
    plat = PLATFORM
    extra = plan.decision.extra
    (dim,) = extra["dims"]
    if x.shape[dim] == 0:
        shape = list(x.shape)
        shape[dim] = 1
        x = x.new_full(shape, fill_value(x.dtype, rule.reduce))
    local = torch.max if rule.reduce == "max" else torch.min
    values, indices = local(x, dim, keepdim=True)
    t = plan.call.tensors[0]
    indices = indices + local_offset(plan, extra["input"], t.shape, dim)
    coord = plan.mesh.get_coordinate()
    choose = torch.argmax if rule.reduce == "max" else torch.argmin
    for d in reversed(extra["mesh_dims"]):
        group, n = plan.mesh.get_group(d), plan.mesh.shape[d]
        all_v = plat.all_gather(values, group, dim, [1] * n, coord[d])
        all_i = plat.all_gather(indices, group, dim, [1] * n, coord[d])
        win = choose(all_v, dim, keepdim=True)
        values, indices = all_v.gather(dim, win), all_i.gather(dim, win)
    if not extra["keepdim"]:
        values, indices = values.squeeze(dim), indices.squeeze(dim)
    return values, indices


@implements("torch", MomentsRule, "expand_moments")
def _momentsrule_expand_moments(rule, func, args, kwargs, plan):  # pylint: disable=unused-argument
    """Merge local (count, mean, M2) across the mesh dims that shard a reduced dim."""
    plat = PLATFORM
    extra = plan.decision.extra
    x, dims = args[0], extra["dims"]
    count = 1
    for d in dims:
        count *= x.shape[d]
    mean = x.sum(dims, keepdim=True) / max(count, 1)
    dev = x - mean
    m2 = ((dev.abs() ** 2) if dev.is_complex() else dev * dev).sum(dims, keepdim=True)
    stats = torch.stack([torch.full_like(m2, count), mean.real if mean.is_complex() else mean, m2])
    coord = plan.mesh.get_coordinate()
    for d in reversed(extra["mesh_dims"]):
        parts = plat.all_gather(stats.unsqueeze(0), plan.mesh.get_group(d), 0, [1] * plan.mesh.shape[d], coord[d])
        stats = _merge_moments(parts)
    total, mean, m2 = stats[0], stats[1], stats[2]
    mean = torch.where(total > 0, mean, torch.full_like(mean, float("nan")))  # like torch: an empty mean is NaN
    out = m2 / (total - extra["correction"]).clamp_min(0)
    if rule.moment == "std":  # like torch: a zero std gets a zero (not NaN) gradient; NaN/inf (dof <= 0) stay
        zero = out == 0
        out = torch.where(zero, torch.ones_like(out), out).sqrt() * ~zero
    if not extra["keepdim"]:
        out, mean = out.squeeze(dims), mean.squeeze(dims)
    return (out, mean) if rule.n_out == 2 else out


@implements("torch", MaxMinRule, "expand_pick")
def _maxminrule_expand_pick(rule, func, args, kwargs, plan):
    values, indices = implementation("torch", rule, "pick")(args[0], plan)
    result = torch.return_types.max if rule.reduce == "max" else torch.return_types.min
    return result((values, indices))


@implements("torch", ArgReduceRule, "expand_pick")
def _argreducerule_expand_pick(rule, func, args, kwargs, plan):
    return implementation("torch", rule, "pick")(args[0], plan)[1]


@implements("torch", ScanRule, "expand_scan")
def _scanrule_expand_scan(rule, func, args, kwargs, plan):
    """Local scan plus the sum of the totals of the shards before this one."""
    plat = PLATFORM
    out = func(*args, **kwargs)
    dim = plan.decision.extra["dim"]
    (d,) = plan.decision.extra["mesh_dims"]
    n, index = plan.mesh.shape[d], plan.mesh.get_coordinate()[d]
    total = torch.sum(args[0], dim=dim, keepdim=True, dtype=out.dtype)
    # the gathered totals feed different ranks differently: the adjoint must be a reduce-scatter
    totals = plat.all_gather(total, plan.mesh.get_group(d), dim, [1] * n, index, grad_partial=True)
    shape = [1] * out.dim()
    shape[dim] = n
    before = (torch.arange(n, device=out.device) < index).to(out.dtype).reshape(shape)
    return out + (totals * before).sum(dim, keepdim=True)


# ---------------------------------------------------------------------- loss
@implements("torch", _LossRule, "expand_mean")
def _lossrule_expand_mean(rule, func, args, kwargs, plan):
    """Local summed loss divided by the global denominator."""
    sig = rule._signatures.get(func)
    if sig is None:
        sig = rule._signatures[func] = inspect.signature(func)
    bound = sig.bind(*args, **kwargs)
    bound.apply_defaults()
    bound.arguments["reduction"] = "sum"
    for legacy in ("size_average", "reduce"):
        if legacy in bound.arguments:
            bound.arguments[legacy] = None
    total = func(*bound.args, **bound.kwargs)
    den = implementation("torch", rule, "denominator")(bound.arguments, plan)
    return total / den


@implements("torch", _LossRule, "denominator")
def _lossrule_denominator(rule, arguments, plan):
    """Global denominator of the mean (a number, or a tensor all-reduced over the sharded mesh dims)."""
    static = plan.decision.extra["denominator"]
    if static is not None:
        return static
    plat = PLATFORM
    local = implementation("torch", rule, "local_denominator")(arguments)
    for d in plan.decision.extra["mesh_dims"]:
        group = plan.mesh.get_group(d)
        local = plat.all_reduce(local, "sum", group)
        local = plat.grad_all_reduce(local, group)  # every rank's partial loss depends on it
    return local.to(torch.promote_types(local.dtype, torch.float32)) if not local.is_floating_point() else local


@implements("torch", ClassLossRule, "local_denominator")
def _classlossrule_local_denominator(rule, arguments):
    """Number (or class-weight sum) of this rank's targets that are not ``ignore_index``."""
    with torch.no_grad():
        target = arguments["target"]
        keep = target != arguments["ignore_index"]
        weight = arguments.get("weight")
        if weight is None:
            return keep.sum()
        picked = weight.gather(0, torch.where(keep, target, torch.zeros_like(target)).flatten())
        return (picked * keep.flatten()).sum()


# ---------------------------------------------------------------------- indexing
@implements("torch", EmbeddingRule, "expand_vocab")
def _embeddingrule_expand_vocab(rule, func, args, kwargs, plan):  # pylint: disable=unused-argument
    """Look up the ids of this rank's vocabulary rows; other ids give zero rows (summed across ranks)."""

    def arg(i, name, default=None):
        return args[i] if i < len(args) else kwargs.get(name, default)

    a = rule._args(arg)
    weight, ids = a["weight"], a["ids"]
    w = plan.call.tensors[rule._args(plan.call)["weight"][1]]
    spec = DTensorSpec(plan.mesh, plan.decision.inputs[w.slot], w.shape)
    (rows, _), (lo, _) = spec.local_shape_and_offset(plan.mesh.get_coordinate())
    pad = a["padding_idx"]
    if pad is not None and pad < 0:
        pad += w.shape[0]
    local_pad = pad - lo if pad is not None and lo <= pad < lo + rows else None
    outside = (ids < lo) | (ids >= lo + rows)
    if rows == 0:  # an empty shard (fewer rows than ranks): zeros that still belong to the graph
        return weight.sum() * 0.0 + weight.new_zeros(tuple(ids.shape) + (weight.shape[1],))
    out = torch.nn.functional.embedding((ids - lo).masked_fill(outside, 0), weight, local_pad)
    return out.masked_fill(outside.unsqueeze(-1), 0.0)


# ---------------------------------------------------------------------- matmul
@implements("torch", EinsumRule, "add_bias_once")
def _einsumrule_add_bias_once(rule, func, args, kwargs, plan):
    """Output is Partial: run without the bias term, add it on mesh coordinate 0 only."""
    return rule.bias_once(func, args, kwargs, plan, torch)


# ---------------------------------------------------------------------- random_ops
@implements("torch", RandomLikeRule, "generate")
def _randomlikerule_generate(rule, func, args, kwargs, plan):  # pylint: disable=unused-argument
    """Expand: this rank's shard of the new random tensor."""
    x = args[0] if args else kwargs["input"]
    dtype = kwargs.get("dtype") or x.dtype
    device = kwargs.get("device") or x.device
    params = _randint_bounds(args, kwargs) if rule.distribution == "randint" else ()
    out = trandom.shard_values(rule.distribution, _spec(plan), plan.mesh.get_coordinate(), dtype, device, params)
    if kwargs.get("requires_grad"):
        out.requires_grad_(True)
    return out


@implements("torch", RandomInplaceRule, "fill")
def _randominplacerule_fill(rule, func, args, kwargs, plan):  # pylint: disable=unused-argument
    """Expand: overwrite rule's local shard with its values of a fresh random tensor."""
    x = args[0] if args else kwargs.get("tensor", kwargs.get("input"))
    params = []
    for k, name in enumerate(rule.params):
        params.append(args[1 + k] if 1 + k < len(args) else kwargs.get(name, rule.defaults[k]))
    values = trandom.shard_values(rule.distribution, _spec(plan), plan.mesh.get_coordinate(), x.dtype, x.device,
                                  tuple(float(v) if not isinstance(v, torch.Tensor) else v for v in params))
    with torch.no_grad():
        x.copy_(values)
    return x


@implements("torch", BernoulliRule, "draw")
def _bernoullirule_draw(rule, func, args, kwargs, plan):  # pylint: disable=unused-argument
    """Expand: 0/1 draws for this rank's shard."""
    x = args[0] if args else kwargs["input"]
    p = args[1] if len(args) > 1 else kwargs.get("p")
    prob = x if p is None else float(p)
    return trandom.shard_values("bernoulli", _spec(plan), plan.mesh.get_coordinate(), x.dtype, x.device, (prob,))


@implements("torch", DropoutRule, "dropout")
def _dropoutrule_dropout(rule, func, args, kwargs, plan):  # pylint: disable=unused-argument
    """Expand: ``input * (mask / (1 - p))`` on the local shard (identity when not training or ``p == 0``)."""

    def get(index, name, default):
        if index < len(args):
            return args[index]
        return kwargs.get(name, default) if name else default

    x = args[0] if args else kwargs["input"]
    p, training, inplace = rule._flags(get)
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return x.mul_(0.0) if inplace else x * 0.0
    spec, ndim = _spec(plan), x.dim()
    k = rule.mask_dims(ndim)
    if k < ndim:  # one draw per (batch, channel): shards of later dims share it
        spec = DTensorSpec(plan.mesh, tuple(q if isinstance(q, Shard) and q.dim < k else Replicate()
                                            for q in spec.placements), spec.shape[:k])
    keep = trandom.keep_mask(spec, plan.mesh.get_coordinate(), float(p), x.dtype, x.device)
    keep = keep.view(tuple(keep.shape) + (1,) * (ndim - k))
    if rule.alpha:  # torch's alpha dropout: x * (keep a) + (keep - 1) alpha a + alpha a p (SELU-preserving)
        a = 1.0 / math.sqrt((_SELU_ALPHA * _SELU_ALPHA * p + 1.0) * (1.0 - p))
        shift = (keep - 1.0).mul_(_SELU_ALPHA * a).add_(_SELU_ALPHA * a * p)
        noise = keep.mul_(a)
        return x.mul_(noise).add_(shift) if inplace else (x * noise).add_(shift)
    noise = keep.div_(1.0 - p)
    return x.mul_(noise) if inplace else x * noise


@implements("torch", NormalRule, "sample")
def _normalrule_sample(rule, func, args, kwargs, plan):  # pylint: disable=unused-argument
    """Expand: ``mean + std * z`` on this rank's output shard."""
    mean = args[0] if args else kwargs["mean"]
    std = args[1] if len(args) > 1 else kwargs.get("std", 1.0)
    like = mean if isinstance(mean, torch.Tensor) else std
    z = trandom.shard_values("normal", _spec(plan), plan.mesh.get_coordinate(), like.dtype, like.device)
    return z.mul_(std).add_(mean) if not isinstance(std, torch.Tensor) else (z * std).add_(mean)


@implements("torch", RReluRule, "rrelu")
def _rrelurule_rrelu(rule, func, args, kwargs, plan):  # pylint: disable=unused-argument
    """Expand: ``where(x > 0, x, x * slope)`` on the local shard (slopes drawn for the global elements)."""

    def get(index, name, default):
        return args[index] if index < len(args) else kwargs.get(name, default)

    x = args[0] if args else kwargs["input"]
    lower, upper, training = rule._args(get)
    if training:
        slope = trandom.shard_values("uniform", _spec(plan), plan.mesh.get_coordinate(), x.dtype, x.device,
                                     (float(lower), float(upper)))
    else:
        slope = (lower + upper) / 2.0
    out = torch.where(x > 0, x, x * slope)
    if rule.options.get("inplace", False) or kwargs.get("inplace", False):  # torch.rrelu_ / F.rrelu(inplace=)
        return x.copy_(out)
    return out


@implements("torch", MultinomialRule, "sample")
def _multinomialrule_sample(rule, func, args, kwargs, plan):  # pylint: disable=unused-argument
    """Expand: category indices for this rank's rows."""
    probs = (args[0] if args else kwargs["input"]).detach().to(torch.float64)
    replacement = bool(args[2] if len(args) > 2 else kwargs.get("replacement", False))
    coord = plan.mesh.get_coordinate()
    out_spec = _spec(plan)
    if replacement:  # inverse CDF, one uniform per output element
        u = trandom.shard_values("uniform", out_spec, coord, torch.float64, probs.device)
        cdf = probs.cumsum(-1)
        idx = torch.searchsorted(cdf, u.mul_(cdf[..., -1:]), right=True)
        return idx.clamp_max_(probs.shape[-1] - 1)
    in_shape = out_spec.shape[:-1] + (probs.shape[-1],)
    u = trandom.shard_values("uniform", DTensorSpec(plan.mesh, out_spec.placements, in_shape), coord,
                             torch.float64, probs.device)
    race = trandom.exponential_from_uniform(u)  # exponential race: the smallest E_i / p_i win, in order
    keys = torch.where(probs > 0, race / probs, torch.full_like(probs, float("inf")))
    return torch.topk(keys, out_spec.shape[-1], dim=-1, largest=False, sorted=True).indices
