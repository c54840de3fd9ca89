# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``hp-agent dist-op verify``: the registered rules against probing, in one process.

For each registered torch op, each sample call (:mod:`hp_agent.dist_op.samples`) and each combination of
input placements on a 1-D mesh of 2 and of 3 ranks, the rule decides (``rule.infer`` on the same
:class:`OpCall` the dispatcher builds). Then:

* the decision has no expand: the inputs are split per the *required* placements, the op runs per
  shard, and the local outputs must form the declared output placements and global shapes. If they do
  not, the rule accepts a placement whose result is wrong: a **false positive** (a bug).
* the decision names an expand: the local result is computed by the expand (collectives), which one
  process cannot run; counted as ``expand`` and left to the ST parity tests.
* the rule redistributes or refuses, but the given placements assemble natively: a **false negative**
  (a missed optimisation).
"""
from __future__ import annotations

import contextlib
import functools
import itertools
import signal
import threading
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from hp_agent.dist_op.probe import assemble, close, collect_tensors, constant, flatten, placements_for, simulate
from hp_agent.dist_op.samples import NONDETERMINISTIC_MODULES, NONDETERMINISTIC_OPS, describe, samples_for

__all__ = ["Finding", "OpResult", "VerifyReport", "verify", "verify_op", "render_markdown", "DEFAULT_TIMEOUT"]

#: seconds one op may take (``verify --timeout``); at load 30 the slowest ops (``batch_norm``, the n-d FFTs)
#: take 1-4 minutes, the median op under a second
DEFAULT_TIMEOUT = 60.0

RANKS = (2, 3)
MAX_COMBOS = 64
MESH_2D = (2, 2)
MAX_COMBOS_2D = 48


@dataclass
class Finding:
    """One false positive / false negative / rule crash."""

    kind: str
    op: str
    sample: str
    placements: str
    detail: str
    scope: str = ""  # false negatives: where the missed strategy holds (see SCOPES)

    def line(self) -> str:
        """One readable line."""
        where = f" [{self.scope}]" if self.scope else ""
        return f"{self.kind}: {self.op}{self.sample} inputs {self.placements}: {self.detail}{where}"


#: where a false negative's placements work natively: ``general`` (on 2 and 3 ranks, and with the sample's
#: non-layout arguments moved: a rule keyed by ranks and layout arguments can offer it), ``mesh size``
#: (not on the other simulated mesh size: uneven or empty shards), ``argument value`` (not with the
#: non-layout arguments moved: valid for this ``kernel_size``/``size``/``value`` only)
SCOPES = ("general", "mesh size", "argument value")


@dataclass
class OpResult:
    """Counts for one op."""

    op: str
    rule: str
    source: str
    checked: int = 0
    expand: int = 0
    refused: int = 0
    status: str = "probed"
    findings: List[Finding] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def timed_out(self) -> bool:
        """True when the per-op time limit stopped the probing (the counts are partial)."""
        return self.status.startswith("timed out")

    def count(self, kind: str) -> int:
        """Findings of ``kind``."""
        return sum(1 for f in self.findings if f.kind == kind)


@dataclass
class VerifyReport:
    """Every op's result."""

    ops: List[OpResult]
    seconds: float = 0.0

    @property
    def false_positives(self) -> List[Finding]:
        """Every false positive (and rule crash)."""
        return [f for o in self.ops for f in o.findings if f.kind in ("false positive", "rule error")]

    @property
    def false_negatives(self) -> List[Finding]:
        """Every false negative."""
        return [f for o in self.ops for f in o.findings if f.kind == "false negative"]

    def to_dict(self) -> Dict[str, Any]:
        """JSON form."""
        return {"seconds": round(self.seconds, 1), "ops": len(self.ops),
                "false_positives": [f.__dict__ for f in self.false_positives],
                "false_negatives": [f.__dict__ for f in self.false_negatives],
                "false_negatives_by_scope": self.by_scope(),
                "errors": [f.__dict__ for f in self.errors],
                "unprobed": [{"op": o.op, "status": o.status} for o in self.unprobed],
                "timed_out": [{"op": o.op, "seconds": round(o.seconds, 1), "checked": o.checked}
                              for o in self.timed_out],
                "table": [{"op": o.op, "rule": o.rule, "status": o.status, "checked": o.checked,
                           "expand": o.expand, "refused": o.refused, "fp": o.count("false positive")
                           + o.count("rule error"), "fn": o.count("false negative")} for o in self.ops]}

    def by_scope(self) -> Dict[str, int]:
        """False negatives per scope (:data:`SCOPES`)."""
        return {sc: sum(1 for f in self.false_negatives if f.scope == sc) for sc in SCOPES}

    @property
    def unprobed(self) -> List[OpResult]:
        """Ops the verifier could not run a single sample of (nondeterministic ones excepted: ST covers them)."""
        return [o for o in self.ops if not o.status.startswith("nondeterministic") and not o.timed_out
                and (o.status != "probed" or o.checked == 0)]

    @property
    def timed_out(self) -> List[OpResult]:
        """Ops the per-op time limit stopped (their findings so far are kept)."""
        return [o for o in self.ops if o.timed_out]

    @property
    def errors(self) -> List[Finding]:
        """Ops the verifier itself could not check (its own errors)."""
        return [f for o in self.ops for f in o.findings if f.kind == "verify error"]

    def lines(self) -> List[str]:
        """Human summary."""
        out = [f.line() for f in self.false_positives + self.errors + self.false_negatives]
        probed = sum(1 for o in self.ops if o.status == "probed")
        scopes = ", ".join(f"{v} {k}" for k, v in self.by_scope().items())
        for o in self.unprobed:
            out.append(f"{o.op}: probed nothing ({o.status}). Fix: `hp-agent dist-op synth {o.op}` shows the "
                       "sample calls the pipeline builds from OpInfo and the signature; when none runs, add one "
                       "for the op in tools/hp_agent/dist_op/samples.py")
        for o in self.timed_out:
            out.append(f"{o.op}: {o.status}; the counts of it are partial. Fix: `hp-agent dist-op verify {o.op} "
                       "--timeout 0` (no limit) on a quieter machine")
        out.append(f"verify: {len(self.ops)} op(s), {probed} probed, {len(self.timed_out)} timed out, "
                   f"{len(self.unprobed)} unprobed, {len(self.false_positives)} false positive(s), "
                   f"{len(self.false_negatives)} false negative(s) ({scopes}) in {self.seconds:.1f} s")
        return out


def _cloning(fn):
    """``fn`` on copies of its tensor arguments (in-place ops must not change the samples); the wrapper
    keeps ``fn``'s signature (``__wrapped__``) for expands that bind arguments by name."""
    import torch

    @functools.wraps(fn)
    def run(*args, **kwargs):
        args = [a.clone() if isinstance(a, torch.Tensor) else
                type(a)(t.clone() if isinstance(t, torch.Tensor) else t for t in a) if type(a) in (list, tuple)
                else a for a in args]
        kwargs = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
        return fn(*args, **kwargs)
    return run


def _flat_outputs(outputs) -> List[Optional[Tuple[tuple, tuple]]]:
    if outputs is None:
        return [None]
    if isinstance(outputs, tuple) and len(outputs) == 2 and isinstance(outputs[0], tuple) \
            and all(hasattr(p, "is_shard") for p in outputs[0]):
        return [outputs]
    res: List[Optional[Tuple[tuple, tuple]]] = []
    for o in outputs:
        res.extend(_flat_outputs(o))
    return res


def _opcall(name, args, kwargs, placements, n):
    """The dispatcher's OpCall for ``placements`` (one placement each on a 1-D mesh of ``n``, or a tuple
    per tensor with ``n`` the mesh shape)."""
    from hyper_parallel.core.ops.rule import OpCall, TensorArg
    from hyper_parallel.core.ops.dispatch import placeholders as _placeholders
    import torch
    locs = collect_tensors(args, kwargs)
    tensors = []
    for slot, (loc, p) in enumerate(zip(locs, placements)):
        where, j = loc
        t = kwargs[where] if isinstance(where, str) else args[where]
        t = t if j is None else t[j]
        pl = tuple(p) if isinstance(p, tuple) else (p,)
        tensors.append(TensorArg(slot, tuple(t.shape), pl, bool(isinstance(t, torch.Tensor) and t.requires_grad)))
    pargs, pkwargs = _placeholders(args, kwargs, locs)
    return OpCall(name, tensors, tuple(pargs), pkwargs, tuple(n) if isinstance(n, tuple) else (n,))


def _constant(ref) -> bool:
    """True when every output is constant or a Python bool (:func:`hp_agent.dist_op.probe.constant`)."""
    return constant(ref)


def _is_inplace(name: str) -> bool:
    base = name.rsplit(".", 1)[-1]
    return (base.endswith("_") and not base.endswith("__")) or (base.startswith("__i") and base.endswith("__"))


def _shifted(args, kwargs) -> Tuple[list, dict]:
    """The sample with alternate elements of every floating tensor negated: mixed signs (sign coincidences
    fail) with the magnitudes kept away from zero (no ill-conditioned divisions)."""
    import torch

    def move(v):
        if isinstance(v, torch.Tensor) and v.is_floating_point():
            sign = 1.0 - 2.0 * (torch.arange(v.numel()) % 2).reshape(v.shape).to(v.dtype)
            return v * sign
        if type(v) in (list, tuple):  # pylint: disable=unidiomatic-typecheck
            return type(v)(move(t) for t in v)
        return v
    return [move(a) for a in args], {k: move(v) for k, v in kwargs.items()}


def _datasets(fn, args, kwargs, ref):
    """The sample, the sample moved to mixed signs, and the synthesis' value generators (arange, negative,
    zeros/ones, per-input offsets; a generator the op rejects is skipped): a native strategy must hold on
    every one, as the synthesis requires (:mod:`hp_agent.dist_op.synth`)."""
    from hp_agent.dist_op.synth import GENERATORS, _variant  # pylint: disable=protected-access
    shifted = _shifted(args, kwargs)
    yield args, kwargs, ref
    yield shifted[0], shifted[1], _reference(fn, *shifted)
    for name in GENERATORS:
        if name == "sample":
            continue
        a, k = _variant(name, args, kwargs)
        want = _reference(fn, a, k)
        if want is not None:
            yield a, k, want


def _native_ok(fn, args, kwargs, placements, ref, n, inplace: bool = False) -> bool:
    """True when the given placements assemble into the reference under some output placement (for an
    in-place op: under self's own placement), for two random Partial splits of every dataset of
    :func:`_datasets` (a constant result proves nothing and never counts). A tensor input the op writes in
    place besides self (``batch_norm``'s running statistics) counts as an output that must keep its own
    placement: a partial running mean updated on every rank is not the updated running mean."""
    written = _written(fn, args, kwargs, inplace)
    if not written:
        return _native_sets_ok(fn, args, kwargs, placements, ref, n, inplace)
    both = _with_writes(fn, written)
    full = _reference(both, args, kwargs)
    if full is None:
        return False
    return _native_sets_ok(both, args, kwargs, placements, full, n, inplace,
                           {len(full) - len(written) + j: placements[i].short() for j, i in enumerate(written)})


def _written(fn, args, kwargs, inplace: bool) -> List[int]:
    """Tensor inputs (by position among the call's tensors) that one call of ``fn`` writes in place, self of
    an in-place op excepted."""
    import torch
    raw = getattr(fn, "__wrapped__", None)
    if raw is None:
        return []
    a, k = _cloned(args, kwargs)
    tensors = [_nth(a, k, loc) for loc in collect_tensors(a, k)]
    before = [t.clone() if isinstance(t, torch.Tensor) else t for t in tensors]
    try:
        with torch.no_grad():
            raw(*a, **k)
    except Exception:  # pylint: disable=broad-except  # a call the op refuses writes nothing
        return []
    return [i for i, (t, b) in enumerate(zip(tensors, before)) if (i > 0 or not inplace)
            and isinstance(t, torch.Tensor) and (t.shape != b.shape or not torch.equal(t.nan_to_num(), b.nan_to_num()))]


def _cloned(args, kwargs):
    import torch
    a = [x.clone() if isinstance(x, torch.Tensor) else type(x)(t.clone() if isinstance(t, torch.Tensor) else t
                                                                for t in x) if type(x) in (list, tuple) else x
         for x in args]
    return a, {key: v.clone() if isinstance(v, torch.Tensor) else v for key, v in kwargs.items()}


def _with_writes(fn, written: Sequence[int]):
    """``fn`` returning its outputs followed by the tensor inputs at ``written`` after the call."""
    raw = fn.__wrapped__

    def run(*args, **kwargs):
        a, k = _cloned(args, kwargs)
        out = flatten(raw(*a, **k))
        locs = collect_tensors(a, k)
        return tuple(out) + tuple(_nth(a, k, locs[i]) for i in written)
    return run


def _native_sets_ok(fn, args, kwargs, placements, ref, n, inplace: bool = False,
                    keep: Optional[Dict[int, str]] = None) -> bool:
    """:func:`_native_ok` on ``fn``'s outputs; ``keep``: output index -> the placement it must assemble under."""
    common: Optional[List[set]] = None
    for i, (a, k, want) in enumerate(_datasets(fn, args, kwargs, ref)):
        if want is None or _constant(want):
            if i < 2 or (want is not None and not _assembles(fn, a, k, placements, want, n)):
                return False  # a constant result proves nothing, but one the placements miss disproves
            continue
        for seed in (0, 1):
            found = _found(fn, a, k, placements, want, n, seed)
            if found is None:
                return False
            common = found if common is None else [c & f for c, f in zip(common, found)]
    return _one_placement(common, placements, inplace, keep)


def _one_placement(common: Optional[List[set]], placements, inplace: bool, keep: Optional[Dict[int, str]]) -> bool:
    """One output placement works for every dataset and split (not P(max) here and P(min) there); an in-place
    op's self and every written input (``keep``) under its own placement."""
    if not common or not all(common):
        return False
    if any(k >= len(common) or p not in common[k] for k, p in (keep or {}).items()):
        return False
    return not inplace or placements[0].short() in common[0]


def _found(fn, args, kwargs, placements, want, n, seed) -> Optional[List[set]]:
    """Per output, the placements the local results of one Partial split assemble to (None: the op refused
    the shards)."""
    from hp_agent.dist_op.probe import assembling
    try:
        results = simulate(fn, args, kwargs, placements, n, seed)
    except Exception:  # pylint: disable=broad-except  # the op refused the shards: not native
        return None
    return [set(f) for f in assembling(want, results, n)] if results is not None else [set()]


def _assembles(fn, args, kwargs, placements, want, n) -> bool:
    """True when the placements' local results form ``want`` under some output placement (one split)."""
    from hp_agent.dist_op.probe import assembling
    try:
        results = simulate(fn, args, kwargs, placements, n, 0)
    except Exception:  # pylint: disable=broad-except  # the op refused the shards
        return False
    return results is not None and all(assembling(want, results, n))


class NeedsCollective(RuntimeError):
    """Raised by the simulated mesh when an expand asks for a process group (not simulated)."""


@dataclass(frozen=True)
class SimMesh:
    """A 1-D mesh seen from one simulated rank: shape and coordinate, no process groups."""

    shape: Tuple[int, ...]
    coordinate: Tuple[int, ...]

    @property
    def ndim(self) -> int:
        """Number of mesh dims."""
        return len(self.shape)

    def get_coordinate(self) -> Tuple[int, ...]:
        """This rank's coordinate."""
        return self.coordinate

    def get_group(self, dim: int = 0) -> Any:
        """Collectives are not simulated: the expand is left to the ST parity tests."""
        raise NeedsCollective(f"mesh dim {dim}")


@dataclass
class SimPlan:
    """The parts of the dispatcher's plan an expand reads (``outs``: output specs; ``redist``: non-empty
    when an input was redistributed; ``platform``: the backend)."""

    call: Any
    decision: Any
    mesh: SimMesh
    outs: Any = None
    redist: list = field(default_factory=list)
    platform: Any = None


def _expand_runner(rule, fn, call, decision, n, moved: bool):
    from hyper_parallel.core.ops.dispatch import output_specs as _out_specs
    from hyper_parallel.core.ops.expands import implementation
    from hyper_parallel.platform import get_platform
    platform = get_platform("torch")  # its package registers the torch expands
    method = implementation("torch", rule, decision.expand)
    shape = tuple(n) if isinstance(n, tuple) else (n,)

    def run(rank, args, kwargs):
        mesh = SimMesh(shape, rank if isinstance(rank, tuple) else (rank,))
        plan = SimPlan(call, decision, mesh, _out_specs(mesh, decision.outputs), [True] if moved else [], platform)
        return method(fn, args, kwargs, plan)
    return run


def _check_decision(fn, args, kwargs, decision, given, ref, n, call=None, rule=None) -> Optional[str]:
    """None when the decision's local computation reproduces ``ref``, else what went wrong.

    Raises :class:`NeedsCollective` when the decision's expand needs a process group."""
    need = [tuple(d)[0] if d is not None else g for d, g in zip(decision.inputs, given)]
    need += list(given[len(need):])
    moved = any(p != g for p, g in zip(need, given))
    runner = _expand_runner(rule, fn, call, decision, n, moved) if decision.expand else None
    try:
        results = simulate(fn, args, kwargs, need, n, per_rank=runner)
    except NeedsCollective:
        raise
    except Exception as exc:  # pylint: disable=broad-except  # the op fails on the required shards: a finding
        return f"the op fails on the required shards ({[p.short() for p in need]}): {type(exc).__name__}: {exc}"
    if results is None or decision.outputs is None:  # no declared output: an in-place op returning its inputs
        return None
    return _compare_outputs(_flat_outputs(decision.outputs), results, ref, need, n)


def _compare_outputs(outs, results, ref, need, n) -> Optional[str]:
    """None when every declared output (placement and global shape) reproduces ``ref``."""
    if any(len(r) != len(ref) for r in results):
        return f"the local op returns {[len(r) for r in results]} output(s) per rank, the op {len(ref)}"
    if len(outs) != len(ref):
        return f"rule declares {len(outs)} output(s), the op returns {len(ref)}"
    for k, (entry, want) in enumerate(zip(outs, ref)):
        if entry is None:
            continue
        placements, shape = entry
        if tuple(shape) != tuple(getattr(want, "shape", ())):
            return f"output {k}: declared global shape {list(shape)}, actual {list(want.shape)}"
        got = assemble([r[k] for r in results], placements[0], want, n)
        if got is None or not close(got, want):
            return (f"output {k}: declared {placements[0].short()} (inputs as {[p.short() for p in need]}) "
                    "does not reproduce the single-device result")
    return None


def _one_combo(res: OpResult, name: str, rule, fn, sample, ref, combo, n) -> None:
    from hyper_parallel.core.ops.rule import RuleError
    args, kwargs = sample
    text = f"{[p.short() for p in combo]} on {n} ranks"
    call = _opcall(name, args, kwargs, combo, n)
    try:
        decision = rule.infer(call)
    except RuleError:
        res.refused += 1
        if _native_ok(fn, args, kwargs, combo, ref, n, _is_inplace(name)):
            res.findings.append(Finding("false negative", name, describe(sample), text,
                                        "refused, but the placements work without communication",
                                        _scope(name, fn, sample, combo, n)))
        return
    except Exception as exc:  # pylint: disable=broad-except  # a rule crash is reported as a finding
        res.findings.append(Finding("rule error", name, describe(sample), text, f"{type(exc).__name__}: {exc}"))
        return
    res.checked += 1
    given = list(combo)
    need = [tuple(d)[0] if d is not None else g for d, g in zip(decision.inputs, given)]
    try:
        problem = _check_both(fn, args, kwargs, decision, given, ref, n, call, rule)
    except NeedsCollective:
        res.expand += 1
        problem = None
    if problem:
        res.findings.append(Finding("false positive", name, describe(sample), text, problem))
    elif need != given[:len(need)]:
        _false_negative(res, name, fn, sample, ref, combo, need, n)


def _check_both(fn, args, kwargs, decision, given, ref, n, call, rule) -> Optional[str]:
    """The decision on the sample, then on the sample moved to mixed signs (sign coincidences hide bugs)."""
    problem = _check_decision(fn, args, kwargs, decision, given, ref, n, call, rule)
    if problem:
        return problem
    shifted = _shifted(args, kwargs)
    shifted_ref = _reference(fn, *shifted)
    if shifted_ref is None:
        return None
    return _check_decision(fn, shifted[0], shifted[1], decision, given, shifted_ref, n, call, rule)


def _false_negative(res: OpResult, name: str, fn, sample, ref, combo, need, n) -> None:
    """Record a redistribution the given placements did not need (natively, or with a scan expand)."""
    args, kwargs = sample
    given = list(combo)
    text = f"{[p.short() for p in combo]} on {n} ranks"
    moved = [f"{g.short()}->{p.short()}" for g, p in zip(given, need) if g != p]
    if _native_ok(fn, args, kwargs, combo, ref, n, _is_inplace(name)):
        res.findings.append(Finding("false negative", name, describe(sample), text,
                                    f"redistributes {moved}, but the given placements work without communication",
                                    _scope(name, fn, sample, combo, n)))
        return
    combine = _scan_instead(fn, args, kwargs, given, need, ref)
    if combine:
        res.findings.append(Finding("false negative", name, describe(sample), text,
                                    f"gathers {moved}, but a scan expand (local scan combined by torch.{combine} "
                                    "with the carry of the earlier shards) would keep the shard", "general"))


def _scope(name: str, fn, sample, combo, n: int) -> str:
    """Where the natively working ``combo`` holds (:data:`SCOPES`): on the other simulated mesh size too, and
    with the sample's non-layout arguments moved (:func:`hp_agent.dist_op.synth.moved_arguments`)."""
    from hp_agent.dist_op.synth import moved_arguments
    args, kwargs = sample
    inplace = _is_inplace(name)
    other = next(r for r in RANKS if r != n)
    if not _native_ok(fn, args, kwargs, combo, _reference(fn, args, kwargs), other, inplace):
        return "mesh size"
    moved = moved_arguments(fn, (list(args), dict(kwargs)))
    if moved is not None:
        for r in RANKS:
            if not _native_ok(fn, moved[0], moved[1], combo, _reference(fn, *moved), r, inplace):
                return "argument value"
    return "general"


def _scan_instead(fn, args, kwargs, given, need, ref) -> Optional[str]:
    """The scan combine that would keep the one gathered shard of a one-tensor, shape-keeping op, or None."""
    import torch
    from hyper_parallel.core.placement import Replicate, Shard
    from hp_agent.dist_op.analysis import scan_combine
    if len(given) != 1 or not isinstance(given[0], Shard) or not isinstance(need[0], Replicate):
        return None
    x = args[0] if args and isinstance(args[0], torch.Tensor) else None
    if x is None or len(ref) != 1 or getattr(ref[0], "shape", None) != x.shape:
        return None
    return scan_combine(lambda t, **kw: fn(t, *args[1:], **kw), x, kwargs, given[0].dim)


def _combos_2d(tensors) -> list:
    """A deterministic sample of placement pairs per tensor on the 2x2 mesh."""
    import random
    per_tensor = [list(itertools.product(placements_for(t), repeat=len(MESH_2D))) for t in tensors]
    every = list(itertools.product(*per_tensor))
    return random.Random(0).sample(every, min(MAX_COMBOS_2D, len(every)))


def _one_combo_2d(res: OpResult, name: str, rule, fn, sample, ref, combo) -> None:
    """False-positive check of one combination on the 2x2 mesh (a tuple of placements per tensor)."""
    from hyper_parallel.core.ops.rule import RuleError
    from hp_agent.dist_op.meshsim import matches_nd, simulate_nd
    args, kwargs = sample
    text = f"{[[p.short() for p in pl] for pl in combo]} on mesh {list(MESH_2D)}"
    call = _opcall(name, args, kwargs, combo, MESH_2D)
    try:
        decision = rule.infer(call)
    except RuleError:
        res.refused += 1
        return
    except Exception as exc:  # pylint: disable=broad-except  # a rule crash is reported as a finding
        res.findings.append(Finding("rule error", name, describe(sample), text, f"{type(exc).__name__}: {exc}"))
        return
    res.checked += 1
    need = [tuple(d) if d is not None else g for d, g in zip(decision.inputs, combo)]
    need += list(combo[len(decision.inputs):])
    moved = any(tuple(a) != tuple(b) for a, b in zip(need, combo))
    runner = _expand_runner(rule, fn, call, decision, MESH_2D, moved) if decision.expand else None
    try:
        results = simulate_nd(fn, args, kwargs, need, MESH_2D, per_rank=runner)
    except NeedsCollective:
        res.expand += 1
        return
    except Exception as exc:  # pylint: disable=broad-except  # the op fails on the required shards: a finding
        res.findings.append(Finding("false positive", name, describe(sample), text,
                                    f"the op fails on the required shards: {type(exc).__name__}: {exc}"))
        return
    if results is None or decision.outputs is None:
        return
    problem = matches_nd(results, _flat_outputs(decision.outputs), ref, MESH_2D)
    if problem:
        res.findings.append(Finding("false positive", name, describe(sample), text, problem))


class OpTimeout(BaseException):
    """The per-op time limit ran out (a BaseException: the probes' own ``except Exception`` must not eat it)."""


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise :class:`OpTimeout` in the block after ``seconds`` (0: no limit; only in the main thread, where
    ``SIGALRM`` is delivered: elsewhere the block runs unbounded)."""
    if not seconds or threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def expire(signum, frame):  # pylint: disable=unused-argument
        raise OpTimeout()
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def verify_op(name: str, entry: Any, timeout: float = 0.0) -> OpResult:
    """Probe one registered op for at most ``timeout`` seconds (0: no limit; a timed-out op keeps what it
    found, its status says so); an unexpected error of the verifier itself is reported in the status."""
    res = OpResult(name, entry.rule, entry.source.rsplit("/", 1)[-1])
    start = time.monotonic()
    try:
        with time_limit(timeout):
            _verify_op(res, name, entry)
    except OpTimeout:
        res.status = f"timed out after {timeout:g} s ({res.checked} placement(s) checked)"
    except Exception as exc:  # pylint: disable=broad-except  # reported per op (status + finding), never hidden
        res.status = f"verify error: {exc}"
        res.findings.append(Finding("verify error", name, "", "-", f"{type(exc).__name__}: {exc}"))
    res.seconds = time.monotonic() - start
    return res


def _reference(fn, args, kwargs) -> Optional[list]:
    """The single-device outputs of a sample, or None when the op does not take it."""
    import torch
    try:
        with torch.no_grad():
            ref = flatten(fn(*args, **kwargs))
    except Exception:  # pylint: disable=broad-except  # a sample the op does not take: not a call to verify
        return None
    if any(r is NotImplemented for r in ref):  # a reflected operator declining these operands
        return None
    return ref


def _verify_op(res: OpResult, name: str, entry: Any) -> OpResult:
    """Probe one registered op into ``res``."""
    from hyper_parallel.platform.torch.dispatch import resolve_torch_name
    if any(m in entry.module for m in NONDETERMINISTIC_MODULES) or name.rsplit(".", 1)[-1] in NONDETERMINISTIC_OPS:
        res.status = "nondeterministic (random or uninitialised): not probed, ST covers it"
        return res
    try:
        fn = resolve_torch_name(name)
    except Exception as exc:  # pylint: disable=broad-except  # an unresolvable name is reported, not hidden
        res.status = f"unresolvable: {exc}"
        return res
    if fn is None:
        res.status = "not a torch name"
        return res
    fn = _cloning(fn)
    rule = entry.rule_instance()
    ran = _probe_samples(res, name, rule, fn, samples_for(name))
    if not ran:  # the family table and the signature gave nothing the op takes: PyTorch's OpInfo samples
        ran = _probe_samples(res, name, rule, fn, _opinfo_fallback(name))
    if not ran:
        res.status = ("no sample: no sample call ran (float, integer and bool inputs from the signature, and "
                      "OpInfo's samples, tried); define one in tools/hp_agent/dist_op/samples.py")
    return res


def _probe_samples(res: OpResult, name: str, rule, fn, samples) -> int:
    """Probe every sample the op takes (float, else cast to int64 or bool); the number probed."""
    ran = 0
    for sample in samples:
        sample, ref = _usable(fn, sample)
        if ref is None:
            continue
        args, kwargs = sample
        ran += 1
        tensors = [_nth(args, kwargs, loc) for loc in collect_tensors(args, kwargs)]
        options = [placements_for(t) for t in tensors]
        for combo in itertools.islice(itertools.product(*options), MAX_COMBOS):
            for n in RANKS:
                _one_combo(res, name, rule, fn, sample, ref, combo, n)
        for combo in _combos_2d(tensors):
            _one_combo_2d(res, name, rule, fn, sample, ref, combo)
    return ran


def _opinfo_fallback(name: str) -> list:
    """Up to 3 OpInfo samples of ``name`` (in the dtype its OpInfo supports: int64 for ``gcd``); none when
    OpInfo does not cover it."""
    from hp_agent.dist_op.synth import opinfo_samples  # pylint: disable=import-outside-toplevel
    try:
        return opinfo_samples(name, limit=3)
    except Exception:  # pylint: disable=broad-except  # OpInfo cannot build samples here: nothing to add
        return []


def _cast(value, dtype):
    """A float tensor as int64 (scaled, so values differ) or bool; lists and tuples element-wise."""
    import torch
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return (value * 10).to(dtype) if dtype is torch.int64 else value > 1.0
    if isinstance(value, (list, tuple)):
        return type(value)(_cast(v, dtype) for v in value)
    return value


def _usable(fn, sample):
    """``(sample, reference outputs)``: the sample as given, else with its float tensors cast to int64, else to
    bool (integer-only ops such as ``gcd``, bool-only ones such as ``logical_*``); ``(sample, None)`` when the
    op takes none of them."""
    import torch
    ref = _reference(fn, *sample)
    if ref is not None:
        return sample, ref
    for dtype in (torch.int64, torch.bool):
        args, kwargs = sample
        retyped = ([_cast(a, dtype) for a in args], {k: _cast(v, dtype) for k, v in kwargs.items()})
        ref = _reference(fn, *retyped)
        if ref is not None:
            return retyped, ref
    return sample, None


def _nth(args, kwargs, loc):
    where, j = loc
    value = kwargs[where] if isinstance(where, str) else args[where]
    return value if j is None else value[j]


def verify(names: Optional[Sequence[str]] = None, registry: Any = None, timeout: float = 0.0,
           progress: Optional[Callable[[int, int, OpResult], None]] = None) -> VerifyReport:
    """Verify ``names`` (default: every op) of ``registry`` (default: the process-wide registry), each op for
    at most ``timeout`` seconds (0: no limit); ``progress(i, total, result)`` is called after each op."""
    from hyper_parallel.core.ops.registry import get_registry
    start = time.monotonic()
    reg = registry if registry is not None else get_registry()
    if names:
        missing = [n for n in names if n not in reg.entries]
        if missing:
            raise KeyError(", ".join(missing))
    import torch
    state = torch.random.get_rng_state()
    torch.manual_seed(0)  # the same samples every run: a finding is reproducible
    try:
        with warnings.catch_warnings():  # torch's deprecation/broadcast warnings on samples are not findings
            warnings.simplefilter("ignore")
            todo = list(names or sorted(reg.entries))
            results = []
            for i, name in enumerate(todo, start=1):
                results.append(verify_op(name, reg.entries[name], timeout))
                if progress is not None:
                    progress(i, len(todo), results[-1])
    finally:
        torch.random.set_rng_state(state)
    return VerifyReport(results, time.monotonic() - start)


def render_markdown(report: VerifyReport) -> str:
    """The table for ``docs/dist_op_verify.md``."""
    from hp_agent.dist_op.render import render
    groups: Dict[str, List[Finding]] = {}
    for f in report.false_negatives:
        groups.setdefault(f.op, []).append(f)
    return render("verify.md.j2", report=report, data=report.to_dict(), fn_groups=sorted(groups.items()))
