# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Layout probing in one process: simulate N ranks, run the op per shard, test how the results assemble.

For a call ``fn(*args, **kwargs)`` (full tensors) and one placement per tensor argument on a 1-D mesh of
``n`` ranks, :func:`simulate` splits every tensor as that placement would (``Shard(d)`` with the library's
chunking, ``Replicate`` as copies, ``Partial(sum)`` as a random split that sums to the tensor), runs the op
once per rank and returns the per-rank outputs. :func:`assembling` then tests, per output, which output
placements reproduce the single-device result: ``Replicate`` (every rank holds it), ``Shard(k)`` (the local
results have the chunk sizes of ``k`` and concatenate to it), ``Partial(sum|max|min)`` (they reduce to it).

torch is imported inside the functions: the agent CLI must start without it.
"""
from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

__all__ = ["Placed", "parse_placement", "fmt", "collect_tensors", "split", "simulate", "assembling", "constant",
           "probe_call", "CallProbe", "ProbeError", "placements_for"]

_SHORT = re.compile(r"^(R|S\((-?\d+)\)|P\((sum|avg|max|min)\))$")
OUTPUT_PARTIALS = ("sum", "max", "min")


class ProbeError(ValueError):
    """A probe request that cannot be run (bad placement text, bad input); the message names it."""


@dataclass(frozen=True)
class Placed:
    """A placement in short form (``R``, ``S(1)``, ``P(sum)``), hashable and YAML friendly."""

    text: str

    @property
    def kind(self) -> str:
        """``R``, ``S`` or ``P``."""
        return self.text[0]

    @property
    def dim(self) -> int:
        """Sharded dim of ``S(d)``."""
        return int(self.text[2:-1])

    @property
    def reduce(self) -> str:
        """Reduce op of ``P(op)``."""
        return self.text[2:-1]


def parse_placement(text: str) -> Any:
    """``"S(1)"`` -> ``Shard(1)`` (also ``R``, ``P(sum)``); a clear error for anything else."""
    from hyper_parallel.core.placement import Partial, Replicate, Shard
    m = _SHORT.match(str(text).strip())
    if not m:
        raise ProbeError(f"placement {text!r}: expected R, S(<dim>) or P(sum|avg|max|min)")
    if m.group(1) == "R":
        return Replicate()
    if m.group(2) is not None:
        return Shard(int(m.group(2)))
    return Partial(m.group(3))


def fmt(placement: Any) -> str:
    """Short text of a placement object."""
    return placement.short()


def collect_tensors(args: Sequence[Any], kwargs: Dict[str, Any]) -> List[Tuple[Any, Optional[int]]]:
    """Locations of tensor arguments in dispatch order: ``(index or name, position in a list or None)``."""
    import torch
    locs: List[Tuple[Any, Optional[int]]] = []
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor):
            locs.append((i, None))
        elif type(a) in (list, tuple):  # pylint: disable=unidiomatic-typecheck
            locs.extend((i, j) for j, t in enumerate(a) if isinstance(t, torch.Tensor))
    locs.extend((k, None) for k, v in kwargs.items() if isinstance(v, torch.Tensor))
    return locs


def _get(args, kwargs, loc):
    where, j = loc
    value = kwargs[where] if isinstance(where, str) else args[where]
    return value if j is None else value[j]


def _put(args: list, kwargs: dict, loc, value) -> None:
    where, j = loc
    if isinstance(where, str):
        kwargs[where] = value
    elif j is None:
        args[where] = value
    else:
        seq = list(args[where])
        seq[j] = value
        args[where] = type(args[where])(seq) if isinstance(args[where], tuple) else seq


def split(t: Any, placement: Any, n: int, gen: Any) -> Optional[list]:
    """Per-rank local tensors of full tensor ``t`` placed with ``placement`` on ``n`` ranks (None: not
    representable, e.g. Partial of an integer tensor)."""
    import torch
    from hyper_parallel.core.placement import Partial, Shard, shard_range
    if isinstance(placement, Shard):
        if placement.dim >= max(t.dim(), 1) or t.dim() == 0:
            return None
        out = []
        for r in range(n):
            start, length = shard_range(t.shape[placement.dim], n, r)
            out.append(t.narrow(placement.dim, start, length).clone())
        return out
    if isinstance(placement, Partial):
        if not t.is_floating_point():
            return None
        if placement.reduce_op == "sum":
            noise = torch.randn((n,) + tuple(t.shape), generator=gen, dtype=t.dtype)
            noise = noise - noise.mean(0, keepdim=True)
            return [t / n + noise[r] for r in range(n)]
        if placement.reduce_op == "avg":
            noise = torch.randn((n,) + tuple(t.shape), generator=gen, dtype=t.dtype)
            noise = noise - noise.mean(0, keepdim=True)
            return [t + noise[r] for r in range(n)]
        # the rank holding the true value changes from element to element (never one dominant rank, so an
        # op that is only monotone does not pass for max/min-linear)
        owner = torch.randint(0, n, tuple(t.shape), generator=gen)
        gap = torch.rand(t.shape, generator=gen, dtype=t.dtype).abs() + 0.1
        other = t - gap if placement.reduce_op == "max" else t + gap
        return [torch.where(owner == r, t, other) for r in range(n)]
    return [t.clone() for _ in range(n)]


def flatten(out: Any) -> list:
    """Outputs of an op as a flat list (tuples, named tuples and lists opened)."""
    if isinstance(out, (list, tuple)):
        res = []
        for o in out:
            res.extend(flatten(o))
        return res
    return [out]


def simulate(fn: Callable, args: Sequence[Any], kwargs: Dict[str, Any], placements: Sequence[Any], n: int,
             seed: int = 0, per_rank: Optional[Callable] = None) -> Optional[List[list]]:
    """Run ``fn`` once per simulated rank on the shards; per rank the flat outputs.

    ``per_rank(rank, args, kwargs)``, when given, runs instead of ``fn`` (e.g. a rule's expand method).
    None when a placement cannot represent an input. Exceptions of the op propagate (the caller decides).
    """
    import torch
    locs = collect_tensors(args, kwargs)
    if len(locs) != len(placements):
        raise ProbeError(f"{len(placements)} placement(s) for {len(locs)} tensor argument(s)")
    gen = torch.Generator().manual_seed(seed)
    per_input = []
    for loc, p in zip(locs, placements):
        parts = split(_get(args, kwargs, loc), p, n, gen)
        if parts is None:
            return None
        per_input.append(parts)
    results = []
    for r in range(n):
        a, k = list(args), dict(kwargs)
        for loc, parts in zip(locs, per_input):
            _put(a, k, loc, parts[r])
        with torch.no_grad():
            results.append(flatten(fn(*a, **k) if per_rank is None else per_rank(r, a, k)))
    return results


_TOLERANCE: Dict[Any, Tuple[float, float]] = {}


def _tolerances() -> None:
    """Per-dtype (atol, rtol): half precision rounds partial sums differently from the whole sum."""
    import torch
    if not _TOLERANCE:
        _TOLERANCE.update({torch.float16: (1e-2, 1e-2), torch.bfloat16: (2e-2, 2e-2)})


#: (atol, rtol) of float32/float64 when no partial value takes part: shards and replicas recompute the same
#: elements from the same numbers, so only a few ulps may differ. The loose tolerance would hide a weak
#: coupling between elements (``local_response_norm``'s window scaled by ``alpha = 1e-4`` changes values by
#: ~4e-5 relative, so sharding channels looked correct).
TIGHT = (1e-6, 2e-6)


def close(got: Any, want: Any, tight: bool = False) -> bool:
    """Same shape, dtype and values (floating tolerance 1e-5 abs / 1e-4 rel, NaN equal; ``tight``:
    :data:`TIGHT` for float32/float64, for results assembled without any partial value)."""
    import torch
    _tolerances()
    if not isinstance(want, torch.Tensor):
        return got == want
    if not isinstance(got, torch.Tensor) or got.shape != want.shape or got.dtype != want.dtype:
        return False
    if want.is_floating_point() or want.is_complex():
        loose = _TOLERANCE.get(want.dtype, (1e-5, 1e-4))
        atol, rtol = TIGHT if tight and want.dtype not in _TOLERANCE else loose
        return bool(torch.allclose(got, want, atol=atol, rtol=rtol, equal_nan=True))
    return bool(torch.equal(got, want))


def _assemble_shard(locals_: list, k: int, want, n: int):
    import torch
    from hyper_parallel.core.placement import shard_range
    if want.dim() == 0 or k >= want.dim():
        return None
    for r, x in enumerate(locals_):
        if x.dim() != want.dim() or x.shape[k] != shard_range(want.shape[k], n, r)[1]:
            return None
        if any(x.shape[i] != want.shape[i] for i in range(want.dim()) if i != k):
            return None
    return torch.cat(locals_, dim=k)


def _assemble_partial(locals_: list, reduce_op: str, want):
    import torch
    if reduce_op == "sum" and want.dtype == torch.bool:
        return None
    if any(x.shape != locals_[0].shape for x in locals_):
        return None
    stack = torch.stack(locals_)
    if reduce_op == "sum":
        return stack.sum(0)
    return stack.amax(0) if reduce_op == "max" else stack.amin(0)


def assemble(locals_: list, placement: Any, want: Any, n: int) -> Any:
    """The global value the local outputs form under ``placement``, or None when they cannot form one
    (wrong local shapes for ``Shard``, ranks disagreeing for ``Replicate``)."""
    import torch
    from hyper_parallel.core.placement import Partial, Shard
    if not all(isinstance(x, torch.Tensor) for x in locals_):
        return None
    if isinstance(placement, Shard):
        return _assemble_shard(locals_, placement.dim, want, n)
    if isinstance(placement, Partial):
        return _assemble_partial(locals_, placement.reduce_op, want)
    if all(close(x, locals_[0]) for x in locals_[1:]):
        return locals_[0]
    return None


def output_candidates(want: Any) -> list:
    """Placements an output ``want`` could have: R, S(k) per dim, P(sum|max|min) for floats."""
    import torch
    from hyper_parallel.core.placement import Partial, Replicate, Shard
    if not isinstance(want, torch.Tensor):
        return [None]
    cands = [Replicate()] + [Shard(k) for k in range(want.dim())]
    if want.is_floating_point():
        cands += [Partial(op) for op in OUTPUT_PARTIALS]
    return cands


def assembling(ref_flat: list, results: List[list], n: int, partial_inputs: bool = True) -> List[List[str]]:
    """Per output: the short texts of every placement under which the local outputs give the reference
    (``partial_inputs=False``: no input was partial, so ``R``/``S(k)`` outputs are compared tightly)."""
    if any(len(res) != len(ref_flat) for res in results):  # e.g. unbind of a sharded dim: fewer outputs
        return [[] for _ in ref_flat]
    return [_working(ref_flat, results, k, n, not partial_inputs) for k in range(len(ref_flat))]


def _working(ref_flat: list, results: List[list], k: int, n: int, tight: bool = False) -> List[str]:
    """Placements under which output ``k`` of every rank forms the reference (``tight``: shard and
    replicate assemblies use :data:`TIGHT`; partial reductions reorder sums and keep the loose one)."""
    want = ref_flat[k]
    locals_ = [res[k] for res in results]
    if output_candidates(want) == [None]:  # a non-tensor output: every rank must return the same value
        return ["value"] if all(x == want for x in locals_) else []
    ok = []
    for cand in output_candidates(want):
        got = assemble(locals_, cand, want, n)
        if got is not None and close(got, want, tight and not fmt(cand).startswith("P(")):
            ok.append(fmt(cand))
    if "R" in ok and want.numel():  # every rank holds the value: a partial that also assembles is a
        # coincidence (max/min of identical values, or a sum of zeros: a loss that is 0 on the sample)
        ok = [o for o in ok if not o.startswith("P(")]
    return ok


def constant(ref: list) -> bool:
    """True when every output is constant (all elements equal) or a Python bool (one bit: ``allclose`` on
    shards answers ``False`` on every rank whenever the whole answer is ``False``): any placement would
    'reproduce' it."""
    import torch
    tensors = [r for r in ref if isinstance(r, torch.Tensor)]
    flags = [r for r in ref if isinstance(r, bool)]
    if len(tensors) + len(flags) != len(ref) or not ref:
        return False
    return all(t.numel() <= 1 or bool((t == t.flatten()[0]).all()) for t in tensors)


def placements_for(t: Any, partial: bool = True) -> list:
    """Candidate input placements of tensor ``t``: R, S(d) per dim, P(sum) for float tensors."""
    from hyper_parallel.core.placement import Partial, Replicate, Shard
    cands = [Replicate()] + [Shard(d) for d in range(t.dim())]
    if partial and t.is_floating_point():
        cands.append(Partial("sum"))
    return cands


@dataclass
class CallProbe:
    """What probing one call found: per input-placement combination, the output placements that work."""

    table: Dict[Tuple[str, ...], List[List[str]]] = field(default_factory=dict)
    errors: Dict[Tuple[str, ...], str] = field(default_factory=dict)
    out_shapes: List[Tuple[int, ...]] = field(default_factory=list)

    def works(self, combo: Tuple[str, ...]) -> bool:
        """True when every output assembles under some placement for ``combo``."""
        found = self.table.get(combo)
        return bool(found) and all(found)


def probe_call(fn: Callable, args: Sequence[Any], kwargs: Dict[str, Any], ranks: Sequence[int] = (2, 3),
               seed: int = 0, combos: Optional[Sequence[Tuple[str, ...]]] = None,
               max_combos: int = 200) -> CallProbe:
    """Probe every input-placement combination of one call (single-device run must succeed).

    An output placement counts only if it works for every simulated rank count in ``ranks`` (uneven
    chunks for 3 ranks catch offset-dependent ops).
    """
    import torch
    with torch.no_grad():  # on copies: an op writing an input in place must not change what the ranks get
        ref = flatten(fn(*_copies(args), **dict(zip(kwargs, _copies(list(kwargs.values()))))))
    locs = collect_tensors(args, kwargs)
    tensors = [_get(args, kwargs, loc) for loc in locs]
    probe = CallProbe(out_shapes=[tuple(o.shape) if isinstance(o, torch.Tensor) else () for o in ref])
    if combos is None:
        combos = [tuple(fmt(p) for p in c) for c in itertools.product(*[placements_for(t) for t in tensors])]
    for combo in list(combos)[:max_combos]:
        agreed = _probe_combo(probe, fn, args, kwargs, combo, ref, ranks, seed)
        if agreed is not None:
            probe.table[combo] = [sorted(a, key=_order) for a in agreed]
    return probe


def _copies(values: Sequence[Any]) -> list:
    """``values`` with every tensor (also inside lists and tuples) cloned."""
    import torch
    out = []
    for v in values:
        if isinstance(v, torch.Tensor):
            out.append(v.clone())
        elif type(v) in (list, tuple):  # pylint: disable=unidiomatic-typecheck
            out.append(type(v)(_copies(v)))
        else:
            out.append(v)
    return out


def _probe_combo(probe: CallProbe, fn, args, kwargs, combo, ref, ranks, seed) -> Optional[List[set]]:
    """Output placements that work for ``combo`` on every rank count (None: not representable)."""
    objs = [parse_placement(c) for c in combo]
    agreed: Optional[List[set]] = None
    for n in ranks:
        try:
            results = simulate(fn, args, kwargs, objs, n, seed)
        except Exception as exc:  # pylint: disable=broad-except  # the op refused the shard: recorded
            probe.errors[combo] = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
            return [set() for _ in ref]
        if results is None:
            return None
        found = [set(x) for x in assembling(ref, results, n, any(c.startswith("P(") for c in combo))]
        agreed = found if agreed is None else [a & f for a, f in zip(agreed, found)]
    return agreed


def _order(text: str) -> Tuple[int, str]:
    """Preference of output placements: shards first, then partial sum, replicate last."""
    return ({"S": 0, "P": 1, "R": 2, "v": 3}[text[0]], text)
