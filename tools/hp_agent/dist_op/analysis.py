# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Step 3 of the analysis: layout derivation by probing, over sample shapes and parameter values.

A *case* is one call (sample shape plus values of the layout-candidate parameters). Each case is probed
(:mod:`hp_agent.dist_op.probe`); the per-case tables are then matched against closed-form hypotheses:

``elementwise``  every dim shardable, output shard on the same dim, shape kept;
``except_dim``   every dim but the one named by a ``dim`` parameter is shardable (same output dim);
                 sharding that dim either fails (gather it) or assembles as a *scan* (local scan combined
                 with the carry of the shards before: the ``scan`` expand);
and the output shape relation (``same`` or ``halved`` along ``dim``). ``Partial(sum)`` inputs are kept
when the op is linear (the partial results sum to the result). What matches no hypothesis is reported as
the raw table with a ``[TBD]`` question.
"""
from __future__ import annotations

import itertools
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from hp_agent.dist_op.interface import Interface, Param
from hp_agent.dist_op.probe import CallProbe, probe_call, simulate, parse_placement

__all__ = ["Case", "Derivation", "derive", "SAMPLE_SHAPES", "LOW_RANK_SHAPES", "INPUT_DTYPES", "COMBINES",
           "scan_combine", "param_values", "sample_tensor"]

SAMPLE_SHAPES: Tuple[Tuple[int, ...], ...] = ((4, 6), (5, 6), (1, 6), (3, 4, 6))
#: shapes probed when no sample shape runs (an op of 1-D inputs such as ``vander``; 0-d last)
LOW_RANK_SHAPES: Tuple[Tuple[int, ...], ...] = ((6,), (5,), ())
#: input dtypes tried in order: the first the single-device op accepts is probed (``gcd``: int64 only;
#: ``bitwise_*`` of bool)
INPUT_DTYPES = ("float32", "int64", "bool")
DIM_NAMES = ("dim", "axis")
COMBINES = ("add", "mul", "logaddexp", "maximum", "minimum")
MAX_SETTINGS = 12


@dataclass
class Case:
    """One probed call."""

    shape: Tuple[int, ...]
    kwargs: Dict[str, Any]
    probe: Optional[CallProbe] = None
    error: str = ""
    scan: Optional[str] = None
    pnorm: bool = False
    n_tensors: int = 1
    dtype: str = "float32"

    @property
    def ndim(self) -> int:
        """Rank of the sample input."""
        return len(self.shape)

    def out_on(self, combo: Tuple[str, ...]) -> List[str]:
        """Placements of output 0 that assemble for input placements ``combo``."""
        found = self.probe.table.get(combo) if self.probe else None
        return found[0] if found else []


@dataclass
class Derivation:
    """What probing decided (and what it could not)."""

    kind: str
    dim_param: Optional[str] = None
    linear: bool = False
    shape_rule: str = "same"
    scan: Optional[str] = None
    expand: Optional[str] = None
    partial: Optional[str] = None
    n_tensors: int = 1
    legacy_dim: bool = False
    dtype: str = "float32"
    cache_values: List[str] = field(default_factory=list)
    cases: List[Case] = field(default_factory=list)
    questions: List[str] = field(default_factory=list)

    @property
    def ok_cases(self) -> List[Case]:
        """Cases the single-device op accepted."""
        return [c for c in self.cases if not c.error]


def param_values(p: Param, ndim_max: int = 3) -> List[Any]:
    """Values to probe for a non-tensor parameter (its default only when it cannot change a layout)."""
    typ = p.type.lower()
    if p.name in DIM_NAMES and "int" in typ and "[]" not in typ and "list" not in typ:
        vals = [p.default] if p.has_default else []
        return _unique(vals + [0, 1, -1, ndim_max])
    if p.name in ("dims",) and ("[]" in typ or "list" in typ):
        return [[0], [1], [0, 1]]
    if p.has_default:
        return [p.default]
    if "bool" in typ:
        return [False, True]
    if "int" in typ:
        return [1, 2]
    if "float" in typ or "scalar" in typ:
        return [0.5]
    return []


def _unique(vals: Sequence[Any]) -> List[Any]:
    out: List[Any] = []
    for v in vals:
        if v not in out:
            out.append(v)
    return out


def _settings(iface: Interface) -> Tuple[List[Param], List[Dict[str, Any]]]:
    """(layout-candidate params, list of keyword assignments to probe)."""
    scalars = [p for p in iface.params[1:] if not p.tensor and p.name not in ("out", "inplace", "dtype")
               and not p.name.startswith("_")]
    varying = [p for p in scalars if len(param_values(p)) > 1 or not p.has_default]
    grids = [param_values(p) for p in varying]
    out = []
    for values in itertools.islice(itertools.product(*grids), MAX_SETTINGS):
        out.append({p.name: v for p, v in zip(varying, values) if not (p.has_default and v == p.default)})
    return varying, out or [{}]


def sample_tensor(shape: Sequence[int], gen: Any, dtype: str = "float32") -> Any:
    """A probe input of ``dtype``: float in [0.5, 1.5) (away from zero and branch points), int64 in [1, 20)
    (non-zero: ``gcd``, ``remainder``), bool half true."""
    import torch
    if dtype == "int64":
        return torch.randint(1, 20, tuple(shape), generator=gen)
    if dtype == "bool":
        return torch.rand(tuple(shape), generator=gen) > 0.5
    return torch.rand(tuple(shape), generator=gen, dtype=getattr(torch, dtype)) + 0.5


def _runs_with(fn: Callable, n_tensors: int, shape: Sequence[int], kwargs: Dict[str, Any], dtype: str) -> bool:
    import torch
    gen = torch.Generator().manual_seed(0)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fn(*[sample_tensor(shape, gen, dtype) for _ in range(n_tensors)], **kwargs)
    except Exception:  # pylint: disable=broad-except  # this dtype or shape is refused: try the next
        return False
    return True


def input_choice(fn: Callable, n_tensors: int, settings: Sequence[Dict[str, Any]],
                 shapes: Sequence[Tuple[int, ...]] = SAMPLE_SHAPES) -> Tuple[str, Sequence[Tuple[int, ...]]]:
    """(dtype, shapes) to probe: the first of :data:`INPUT_DTYPES` with which some sample shape and setting
    runs on one device; the low-rank shapes (1-D, 0-d) when no sample shape runs in any dtype."""
    for candidates in (shapes, LOW_RANK_SHAPES):
        for dtype in INPUT_DTYPES:
            if any(_runs_with(fn, n_tensors, shape, kw, dtype) for shape in candidates for kw in settings):
                return dtype, candidates
    return INPUT_DTYPES[0], shapes


def _call(fn: Callable, x, kwargs: Dict[str, Any]):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(x, **kwargs)


def scan_combine(fn: Callable, x: Any, kwargs: Dict[str, Any], dim: int,
                 ranks: Sequence[int] = (2, 3)) -> Optional[str]:
    """The combine under which shards along ``dim`` assemble as a scan, or None.

    For shard ``r`` the global result must equal ``combine(local_r, carry)``, the carry being the global
    result at the last index of shard ``r - 1``.
    """
    import torch
    ref = _call(fn, x, kwargs)
    if not isinstance(ref, torch.Tensor) or ref.shape != x.shape or x.shape[dim] < 2 or not ref.is_floating_point():
        return None
    shards = {}
    for n in ranks:
        try:
            shards[n] = simulate(lambda t: _call(fn, t, kwargs), [x], {}, [parse_placement(f"S({dim})")], n)
        except Exception:  # pylint: disable=broad-except  # the op refuses a shard of dim: no scan
            return None
    for name in COMBINES:
        if all(_scan_holds(getattr(torch, name), ref, shards[n], dim, n) for n in ranks):
            return name
    return None


def _scan_holds(comb: Callable, ref: Any, locals_: list, dim: int, n: int) -> bool:
    """True when every shard after the first is ``comb(local, carry of the shard before)``."""
    import torch
    from hyper_parallel.core.placement import shard_range
    for r in range(1, n):
        start, length = shard_range(ref.shape[dim], n, r)
        if length == 0 or start == 0:
            continue
        carry = ref.narrow(dim, start - 1, 1)
        if not torch.allclose(comb(locals_[r][0], carry), ref.narrow(dim, start, length), atol=1e-5, rtol=1e-4):
            return False
    return True


def pnorm_expand(fn: Callable, x: Any, kwargs: Dict[str, Any], dim: int, iface: Interface,
                 ranks: Sequence[int] = (2, 3)) -> bool:
    """True when shards along ``dim`` reproduce the op as ``x / max(||x||_p, eps)`` with the p-norm's sum
    all-reduced over the simulated ranks (the ``pnorm`` expand; needs parameters ``p`` and ``eps``)."""
    import torch
    from hyper_parallel.core.placement import shard_range
    pp, ep = iface.param("p"), iface.param("eps")
    if pp is None or ep is None:
        return False
    p = kwargs.get("p", pp.default)
    eps = kwargs.get("eps", ep.default)
    if not isinstance(p, (int, float)) or p <= 0 or p == float("inf"):
        return False
    ref = _call(fn, x, kwargs)
    for n in ranks:
        parts = [x.narrow(dim, *shard_range(x.shape[dim], n, r)) for r in range(n)]
        total = sum(part.abs().pow(p).sum(dim, keepdim=True) for part in parts)
        local = [part / total.pow(1.0 / p).clamp_min(eps) for part in parts]
        if not torch.allclose(torch.cat(local, dim), ref, atol=1e-5, rtol=1e-4):
            return False
    return True


def _run_cases(fn: Callable, iface: Interface, shapes: Sequence[Tuple[int, ...]]) -> List[Case]:
    import torch
    _, settings = _settings(iface)
    dtype, shapes = input_choice(fn, 1, settings, shapes)
    cases = []
    for shape in shapes:
        for kwargs in settings:
            case = Case(tuple(shape), dict(kwargs), dtype=dtype)
            gen = torch.Generator().manual_seed(len(cases))
            x = sample_tensor(shape, gen, dtype)
            try:
                _call(fn, x, kwargs)
            except Exception as exc:  # pylint: disable=broad-except  # a refused call is a finding, kept in the plan
                case.error = f"{type(exc).__name__}: {exc}".splitlines()[0][:240]
                cases.append(case)
                continue
            case.probe = probe_call(lambda t, kw=kwargs: _call(fn, t, kw), [x], {})
            dim = _dim_value(iface, kwargs, len(shape))
            if dim is not None and "S(%d)" % dim not in case.out_on((f"S({dim})",)):
                case.scan = scan_combine(fn, x, kwargs, dim)
                case.pnorm = case.scan is None and pnorm_expand(fn, x, kwargs, dim, iface)
            cases.append(case)
    return cases


def _run_binary(fn: Callable, shapes: Sequence[Tuple[int, ...]]) -> List[Case]:
    """Cases of a two-tensor op: both operands of each sample shape (no broadcasting needed)."""
    import torch
    dtype, shapes = input_choice(fn, 2, [{}], shapes)
    cases = []
    for shape in shapes:
        case = Case(tuple(shape), {}, n_tensors=2, dtype=dtype)
        gen = torch.Generator().manual_seed(len(cases))
        x, y = sample_tensor(shape, gen, dtype), sample_tensor(shape, gen, dtype)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fn(x, y)
        except Exception as exc:  # pylint: disable=broad-except  # a refused call is a finding, kept in the plan
            case.error = f"{type(exc).__name__}: {exc}".splitlines()[0][:240]
            cases.append(case)
            continue
        case.probe = probe_call(fn, [x, y], {})
        cases.append(case)
    return cases


# (P,P) -> P, (P,R) -> P, (R,P) -> P  ->  ElementwiseRule partial mode
PARTIAL_MODES = {(True, False, False): "additive", (False, True, True): "multiplicative",
                 (False, True, False): "numerator", (False, False, False): "none"}


def _derive_two(fn: Callable, iface: Interface, shapes: Sequence[Tuple[int, ...]]) -> Derivation:
    """Derivation of a two-tensor op (probed with equal shapes)."""
    cases = _run_binary(fn, shapes)
    ok = [c for c in cases if not c.error]
    deriv = Derivation(kind="unknown", cases=cases, n_tensors=2, dtype=cases[0].dtype if cases else "float32")
    if not ok:
        deriv.questions.append("no sample call ran on one device; which inputs does the op take?")
        return deriv
    deriv.shape_rule = _shape_rule(ok, iface) or "mixed"
    return _derive_binary(deriv, ok)


def _derive_binary(deriv: Derivation, ok: List[Case]) -> Derivation:
    """Element-wise two-tensor op: aligned shards keep their dim; the partial mode from the P combos."""
    aligned = all(f"S({d})" in c.out_on((f"S({d})", f"S({d})")) for c in ok for d in range(c.ndim)
                  if c.shape[d] >= 2)
    if not aligned or deriv.shape_rule != "same":
        deriv.questions.append("two tensor inputs whose aligned shards do not assemble as element-wise: which rule "
                               "class fits (see the probe table)?")
        return deriv
    deriv.kind = "elementwise"
    flags = tuple(all("P(sum)" in c.out_on(combo) for c in ok)
                  for combo in (("P(sum)", "P(sum)"), ("P(sum)", "R"), ("R", "P(sum)")))
    deriv.partial = PARTIAL_MODES.get(flags)
    deriv.linear = deriv.partial not in (None, "none")
    if deriv.partial is None:
        deriv.questions.append(f"Partial(sum) behaviour (P,P)/(P,R)/(R,P) = {flags} matches no ElementwiseRule "
                               "partial mode: which one (none is always correct)?")
    return deriv


def dim_param(iface: Interface) -> Optional[Param]:
    """The ``dim``-like parameter of an op, if any."""
    return next((p for p in iface.params[1:] if p.name in DIM_NAMES and not p.tensor), None)


def _dim_value(iface: Interface, kwargs: Dict[str, Any], ndim: int) -> Optional[int]:
    p = dim_param(iface)
    if p is None:
        return None
    value = kwargs.get(p.name, p.default if p.has_default else None)
    if value is None:
        return _legacy_dim(ndim)
    if not isinstance(value, int) or not -max(ndim, 1) <= value < max(ndim, 1):
        return None
    return value % max(ndim, 1)


def _legacy_dim(ndim: int) -> int:
    """PyTorch's implicit softmax-family dim choice when ``dim=None``."""
    return 0 if ndim in (0, 1, 3) else 1


def _unshardable(case: Case) -> set:
    """Dims of size >= 2 whose Shard does not map to the same output Shard."""
    return {d for d in range(case.ndim) if case.shape[d] >= 2 and f"S({d})" not in case.out_on((f"S({d})",))}


def _shape_matches(shape, out, dim, along: Callable) -> bool:
    """True when ``out`` equals ``shape`` except ``along(size)`` at ``dim``."""
    if dim is None or out is None or len(out) != len(shape):
        return False
    return all(o == (along(s) if i == dim else s) for i, (o, s) in enumerate(zip(out, shape)))


def _shape_rule(cases: List[Case], iface: Interface) -> Optional[str]:
    rules = set()
    for c in cases:
        out = c.probe.out_shapes[0] if c.probe and c.probe.out_shapes else None
        if out == c.shape:
            rules.add("same")
            continue
        dim = _dim_value(iface, c.kwargs, c.ndim)
        n = c.kwargs.get("n", iface.param("n").default if iface.param("n") is not None else None)
        if _shape_matches(c.shape, out, dim, lambda s, n=n: max(s - n, 0) if isinstance(n, int) else None):
            rules.add("minus_n")
        elif _shape_matches(c.shape, out, dim, lambda s: s // 2):
            rules.add("halved")
        else:
            rules.add("other")
    return rules.pop() if len(rules) == 1 else None


def derive(fn: Callable, iface: Interface, shapes: Sequence[Tuple[int, ...]] = SAMPLE_SHAPES) -> Derivation:
    """Probe the op over samples and match the closed-form hypotheses (see the module docstring)."""
    tensors = [p for p in iface.params if p.tensor and not p.has_default]
    lists = [p.name for p in tensors if _is_list(p)]
    if lists:  # the probe calls the op with one tensor per parameter: a list of tensors is synthesised
        return Derivation(kind="unknown", questions=[
            f"parameter(s) {lists} take a list of tensors: the probe's closed forms are for single tensors"])
    if len(tensors) == 2:
        return _derive_two(fn, iface, shapes)
    if len(tensors) != 1:
        return Derivation(kind="unknown", n_tensors=len(tensors), questions=[
            f"{len(tensors)} required tensor inputs: the analyser derives one- and two-input rules only; which rule "
            "class fits?"])
    cases = _run_cases(fn, iface, shapes)
    ok = [c for c in cases if not c.error]
    deriv = Derivation(kind="unknown", cases=cases, dtype=cases[0].dtype if cases else "float32")
    if not ok:
        deriv.questions.append("no sample call ran on one device; which inputs does the op take?")
        return deriv
    deriv.linear = all("P(sum)" in c.out_on(("P(sum)",)) for c in ok)
    deriv.shape_rule = _shape_rule(ok, iface) or "mixed"
    return _classify(deriv, iface, ok)


def _is_list(p: Param) -> bool:
    """A ``Tensor[]`` / ``List[Tensor]`` / ``*tensors`` parameter."""
    text = str(p.type or "").replace(" ", "")
    return "[]" in text or text.startswith(("List[", "Sequence[", "Tuple[", "list[", "tuple[")) or \
        text.startswith("TensorList")


def _classify(deriv: Derivation, iface: Interface, ok: List[Case]) -> Derivation:
    """Match the one-tensor closed forms: element-wise, coupled along ``dim``, or an open question."""
    dp = dim_param(iface)
    if deriv.shape_rule == "same" and not any(_unshardable(c) for c in ok):
        deriv.kind = "elementwise"
        return deriv
    if dp is not None and _coupled_only_by_dim(ok, iface):
        _except_dim(deriv, dp, ok)
        return deriv
    deriv.questions.append("the probe table matches no known rule shape (elementwise, all-but-dim): which "
                           "placements should the rule keep?")
    return deriv


def _coupled_only_by_dim(ok: List[Case], iface: Interface) -> bool:
    """True when, in every case, only the dim named by the ``dim`` parameter (if any) cannot stay sharded."""
    return all(_unshardable(c) <= {_dim_value(iface, c.kwargs, c.ndim)} for c in ok)


def _except_dim(deriv: Derivation, dp: Param, ok: List[Case]) -> None:
    """Fill ``deriv`` for an op coupled along the dim named by ``dp`` (and its expand, if one works)."""
    deriv.kind, deriv.dim_param, deriv.cache_values = "except_dim", dp.name, [dp.name]
    deriv.legacy_dim = dp.has_default and dp.default is None
    coupled = [c for c in ok if _unshardable(c)]
    scans = {c.scan for c in coupled}
    if len(scans) == 1 and None not in scans:
        deriv.scan = scans.pop()
        deriv.expand = "scan"
    elif coupled and all(c.pnorm for c in coupled):
        deriv.expand = "pnorm"
    if deriv.shape_rule not in ("same", "halved", "minus_n"):
        deriv.questions.append(f"output shape relation is {deriv.shape_rule!r}: how is the output shape computed?")
